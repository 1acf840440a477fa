package report

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Point is one point of a chart's series.
type Point struct{ X, Y float64 }

// Series is one line of a chart.
type Series struct {
	Name   string
	Points []Point
}

// LineChart is a line chart written as a standalone SVG image: title,
// axes with ticks and labels, one line with markers per series, a legend.
// The y axis starts at zero; the x axis is linear or, with LogX,
// logarithmic (points with x <= 0 are then left out).
type LineChart struct {
	Title  string
	XLabel string
	YLabel string
	LogX   bool
	Series []Series
}

// Chart geometry, in SVG user units (pixels).
const (
	chartWidth   = 780
	chartHeight  = 460
	plotLeft     = 90
	plotRight    = chartWidth - 200
	plotTop      = 56
	plotBottom   = chartHeight - 70
	legendLeft   = plotRight + 24
	maxDataTicks = 10
)

var (
	palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}
	dashes  = []string{"", "7 4", "2 3", "9 3 2 3"}
)

// WriteSVG writes the chart as an SVG document.
func (c *LineChart) WriteSVG(w io.Writer) error {
	b := bufio.NewWriter(w)
	series := c.plottable()

	var xs, ys []float64
	for _, s := range series {
		for _, p := range s.Points {
			xs = append(xs, p.X)
			ys = append(ys, p.Y)
		}
	}
	xAxis := c.xScale(xs)
	yMax := 0.0
	for _, y := range ys {
		yMax = max(yMax, y)
	}
	yStep := niceStep(yMax / 5)
	if yMax <= 0 {
		yStep = 0.2
	}
	yTop := math.Ceil(yMax*1.05/yStep) * yStep
	if yTop <= 0 {
		yTop = 5 * yStep
	}
	py := func(y float64) float64 { return plotBottom - y/yTop*(plotBottom-plotTop) }

	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, chartHeight)
	text(b, float64(chartWidth)/2, 28, "middle", `font-size="16" font-weight="bold"`, c.Title)

	// Grid and ticks of y.
	decimals := stepDecimals(yStep)
	for i := 0; ; i++ {
		y := float64(i) * yStep
		if y > yTop*(1+1e-9) {
			break
		}
		v := py(y)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", plotLeft, v, plotRight, v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000000"/>`+"\n", plotLeft-5, v, plotLeft, v)
		text(b, plotLeft-8, v+4, "end", "", formatTick(y, decimals))
	}
	// Grid and ticks of x.
	for _, t := range xAxis.ticks {
		v := xAxis.pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", v, plotTop, v, plotBottom)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000"/>`+"\n", v, plotBottom, v, plotBottom+5)
		text(b, v, plotBottom+19, "middle", "", formatTick(t, xAxis.decimals))
	}
	// Axes.
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom)
	text(b, float64(plotLeft+plotRight)/2, plotBottom+48, "middle", "", c.XLabel)
	yMid := float64(plotTop+plotBottom) / 2
	text(b, 24, yMid, "middle", fmt.Sprintf(`transform="rotate(-90 24 %.1f)"`, yMid), c.YLabel)
	if len(xs) == 0 {
		text(b, float64(plotLeft+plotRight)/2, yMid, "middle", `fill="#808080"`, "no data")
	}

	// Lines, markers and legend.
	for i, s := range c.Series {
		color, dash := palette[i%len(palette)], dashes[i%len(dashes)]
		dashAttr := ""
		if dash != "" {
			dashAttr = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
		}
		pts := series[i].Points
		if len(pts) > 1 {
			b.WriteString(`<polyline fill="none" stroke="` + color + `" stroke-width="2"` + dashAttr + ` points="`)
			for j, p := range pts {
				if j > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(b, "%.1f,%.1f", xAxis.pos(p.X), py(p.Y))
			}
			b.WriteString(`"/>` + "\n")
		}
		for _, p := range pts {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", xAxis.pos(p.X), py(p.Y), color)
		}
		ly := float64(plotTop + 10 + 22*i)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n",
			legendLeft, ly, legendLeft+28, ly, color, dashAttr)
		fmt.Fprintf(b, `<circle cx="%d" cy="%.1f" r="3.5" fill="%s"/>`+"\n", legendLeft+14, ly, color)
		name := s.Name
		if len(pts) == 0 {
			name += " (no data)"
		}
		text(b, legendLeft+36, ly+4, "start", "", name)
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

// plottable returns the series with the points that can be drawn, sorted
// by x.
func (c *LineChart) plottable() []Series {
	out := make([]Series, len(c.Series))
	for i, s := range c.Series {
		out[i].Name = s.Name
		for _, p := range s.Points {
			if math.IsNaN(p.X) || math.IsNaN(p.Y) || math.IsInf(p.X, 0) || math.IsInf(p.Y, 0) || (c.LogX && p.X <= 0) {
				continue
			}
			out[i].Points = append(out[i].Points, p)
		}
		slices.SortFunc(out[i].Points, func(a, b Point) int { return cmpFloat(a.X, b.X) })
	}
	return out
}

// axis maps data x values to SVG x positions.
type axis struct {
	lo, hi   float64 // in transformed units (log10 with LogX)
	log      bool
	ticks    []float64
	decimals int
}

func (a axis) pos(x float64) float64 {
	if a.log {
		x = math.Log10(x)
	}
	return plotLeft + (x-a.lo)/(a.hi-a.lo)*(plotRight-plotLeft)
}

// xScale returns the x axis for the data xs: its range, padded so that no
// point sits on the frame, and its ticks (the data's own x values when
// there are few, else round values).
func (c *LineChart) xScale(xs []float64) axis {
	a := axis{log: c.LogX}
	if len(xs) == 0 {
		a.lo, a.hi = 0, 1
		return a
	}
	distinct := slices.Clone(xs)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	tr := func(x float64) float64 {
		if c.LogX {
			return math.Log10(x)
		}
		return x
	}
	lo, hi := tr(distinct[0]), tr(distinct[len(distinct)-1])
	if lo == hi {
		lo, hi = lo-1, hi+1
		if c.LogX {
			lo, hi = lo+0.5, hi-0.5
		}
	}
	pad := (hi - lo) * 0.06
	a.lo, a.hi = lo-pad, hi+pad
	switch {
	case len(distinct) <= maxDataTicks:
		a.ticks = distinct
		a.decimals = 0
		for _, x := range distinct {
			a.decimals = max(a.decimals, decimalsOf(x))
		}
	case c.LogX:
		for e := math.Ceil(lo); e <= math.Floor(hi); e++ {
			a.ticks = append(a.ticks, math.Pow(10, e))
		}
		a.decimals = max(0, int(-math.Ceil(lo)))
	default:
		step := niceStep((hi - lo) / 6)
		for x := math.Ceil(lo/step) * step; x <= hi+step*1e-9; x += step {
			a.ticks = append(a.ticks, x)
		}
		a.decimals = stepDecimals(step)
	}
	return a
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) near raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	exp := math.Floor(math.Log10(raw))
	f := raw / math.Pow(10, exp)
	var nf float64
	switch {
	case f <= 1:
		nf = 1
	case f <= 2:
		nf = 2
	case f <= 5:
		nf = 5
	default:
		nf = 10
	}
	return nf * math.Pow(10, exp)
}

// stepDecimals returns the decimals needed to print multiples of step.
func stepDecimals(step float64) int {
	return max(0, int(-math.Floor(math.Log10(step)+1e-9)))
}

// decimalsOf returns the decimals x needs (at most 6).
func decimalsOf(x float64) int {
	for d := 0; d < 6; d++ {
		p := math.Pow(10, float64(d))
		if math.Abs(x*p-math.Round(x*p)) < 1e-9 {
			return d
		}
	}
	return 6
}

// formatTick prints a tick value, with k and M for round thousands and
// millions.
func formatTick(v float64, decimals int) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(a, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3 && math.Mod(a, 1e2) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// text writes a text element with escaped content.
func text(b *bufio.Writer, x, y float64, anchor, attrs, s string) {
	if attrs != "" {
		attrs = " " + attrs
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>`, x, y, anchor, attrs)
	_ = xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
