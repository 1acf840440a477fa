package report

// NamedChart is a chart and the file it is written to.
type NamedChart struct {
	File  string
	Chart LineChart
}

// Charts returns the charts of r: ack throughput and p99 ack latency
// against concurrency, and mean time per ack against manifest size, one
// line per system.
func Charts(r *Results) []NamedChart {
	tput := LineChart{
		Title:  "Ack throughput against concurrency",
		XLabel: "workers W (log scale; W/4 jobs)",
		YLabel: "acks per second",
		LogX:   true,
	}
	p99 := LineChart{
		Title:  "p99 ack latency against concurrency",
		XLabel: "workers W (log scale; W/4 jobs)",
		YLabel: "p99 ack latency (ms)",
		LogX:   true,
	}
	manifest := LineChart{
		Title:  "Time per ack against manifest size",
		XLabel: "segments in the task's manifest (log scale)",
		YLabel: "mean time per ack (ms)",
		LogX:   true,
	}
	for _, s := range r.Systems {
		t, l, m := Series{Name: s.Name}, Series{Name: s.Name}, Series{Name: s.Name}
		for _, p := range s.Throughput {
			t.Points = append(t.Points, Point{X: float64(p.Workers), Y: p.AcksPerSecond})
			if p.AckLatency.Count > 0 {
				l.Points = append(l.Points, Point{X: float64(p.Workers), Y: p.AckLatency.P99MS})
			}
		}
		if s.Manifest != nil {
			for _, p := range s.Manifest.Points {
				if p.AckTime.Count > 0 {
					m.Points = append(m.Points, Point{X: float64(p.Size), Y: p.AckTime.MeanMS})
				}
			}
		}
		tput.Series = append(tput.Series, t)
		p99.Series = append(p99.Series, l)
		manifest.Series = append(manifest.Series, m)
	}
	return []NamedChart{
		{File: "throughput.svg", Chart: tput},
		{File: "latency_p99.svg", Chart: p99},
		{File: "manifest.svg", Chart: manifest},
	}
}
