package report

import (
	"math"
	"slices"
	"time"
)

// Latency summarizes a set of measured durations. Percentiles are exact:
// computed from every sample by sorting, with the nearest-rank method.
type Latency struct {
	Count  int     `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p999_ms"`
	MaxMS  float64 `json:"max_ms"`
}

// Summarize returns the summary of samples (which it does not modify). No
// samples give the zero Latency.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return Latency{
		Count:  len(sorted),
		MeanMS: ms(sum / time.Duration(len(sorted))),
		P50MS:  ms(Percentile(sorted, 50)),
		P90MS:  ms(Percentile(sorted, 90)),
		P99MS:  ms(Percentile(sorted, 99)),
		P999MS: ms(Percentile(sorted, 99.9)),
		MaxMS:  ms(sorted[len(sorted)-1]),
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted, an
// ascending slice, by the nearest-rank method: the smallest sample such
// that at least p percent of the samples are less than or equal to it.
// An empty slice gives the zero value.
func Percentile[T ~int64 | ~float64](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	// The tolerance keeps a rank that is whole in exact arithmetic (99.9%
	// of 1,000) from rounding up past it.
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Ratio returns a/b, and false when the quotient is not a finite number
// (b is zero, or either is NaN or infinite).
func Ratio(a, b float64) (float64, bool) {
	if b == 0 {
		return 0, false
	}
	r := a / b
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return 0, false
	}
	return r, true
}

// PerSecond returns n/elapsed in events per second, and zero for an
// empty interval.
func PerSecond(n int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
