package report

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
)

// RatioFigure is one figure of the metastore divided by the same figure of
// a peer, measured in the same conditions.
type RatioFigure struct {
	// ID is section.variant.figure, e.g. "throughput.w64.acks_per_second".
	ID      string `json:"id"`
	Section string `json:"section"`
	Variant string `json:"variant"`
	Figure  string `json:"figure"`
	// Peer is a peer system, or BestPrefix and a family ("best-etcd"):
	// the best of the family's variants in the run for this figure (the
	// highest of a rate, the lowest of a cost), named by Chosen.
	Peer      string  `json:"peer"`
	Chosen    string  `json:"chosen,omitempty"`
	Metastore float64 `json:"metastore"`
	PeerValue float64 `json:"peer_value"`
	Ratio     float64 `json:"ratio"`
}

// A section is one workload's table: rows of systems per variant (e.g.
// per concurrency), columns of figures. Ratios are computed over the same
// sections, so the table and the JSON agree.
type section struct {
	id    string
	title string
	// variantHeader heads the column of variant labels; a section without
	// a parameter has none.
	variantHeader string
	variants      func(r *Results) []variant
	figures       []figure
}

// A variant is one setting of a workload's parameter (concurrency, size).
type variant struct {
	id    string // part of a ratio ID
	label string // first table column
	key   int
}

// A figure is one column: a named number read off a system's results.
type figure struct {
	id     string
	header string
	format func(float64) string
	get    func(s *System, key int) (float64, bool)
	// noRatio marks a figure that describes the setup (not a cost).
	noRatio bool
	// higher marks a rate, of which more is better; of every other
	// figure (a cost: time, bytes, CPU, memory) less is better.
	higher bool
}

// best returns the best value of figure f at key among the variants of
// family in r (the highest of a rate, the lowest positive one of a cost)
// and the variant's name.
func (f figure) best(r *Results, family string, key int) (float64, string, bool) {
	var val float64
	var name string
	found := false
	for i := range r.Systems {
		s := &r.Systems[i]
		if !InFamily(s.Name, family) {
			continue
		}
		v, ok := f.get(s, key)
		if !ok || (!f.higher && v <= 0) {
			continue
		}
		if !found || (f.higher && v > val) || (!f.higher && v < val) {
			val, name, found = v, s.Name, true
		}
	}
	return val, name, found
}

// Formats of the figures.
func count(v float64) string { return fmt.Sprintf("%.0f", v) }
func rate(v float64) string  { return fmt.Sprintf("%.1f", v) }
func secs(v float64) string  { return fmt.Sprintf("%.3f", v) }

// millis prints milliseconds with three significant digits at least.
func millis(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// sections lists the comparable workloads in table order.
var sections = []section{
	{
		id:            "throughput",
		title:         "ack throughput and latency (W workers, one task each, over max(1, W/tasks-per-job) jobs)",
		variantHeader: "W",
		variants: func(r *Results) []variant {
			return keyed(r, "w", func(s *System) []int {
				var ks []int
				for _, p := range s.Throughput {
					ks = append(ks, p.Workers)
				}
				return ks
			})
		},
		figures: []figure{
			higher(tp("acks_per_second", "acks/s", count, func(p *ThroughputPoint) (float64, bool) { return p.AcksPerSecond, true })),
			higher(tp("epochs_per_second", "epochs/s", rate, func(p *ThroughputPoint) (float64, bool) { return p.EpochsPerSecond, true })),
			tp("ack_p50_ms", "p50 ms", millis, func(p *ThroughputPoint) (float64, bool) { return p.AckLatency.P50MS, p.AckLatency.Count > 0 }),
			tp("ack_p99_ms", "p99 ms", millis, func(p *ThroughputPoint) (float64, bool) { return p.AckLatency.P99MS, p.AckLatency.Count > 0 }),
			tp("ack_p999_ms", "p999 ms", millis, func(p *ThroughputPoint) (float64, bool) { return p.AckLatency.P999MS, p.AckLatency.Count > 0 }),
			tp("keys_p99_ms", "keys p99 ms", millis, func(p *ThroughputPoint) (float64, bool) { return p.KeysLatency.P99MS, p.KeysLatency.Count > 0 }),
			tp("cpu_seconds_per_1000_acks", "cpu s/1k acks", secs, func(p *ThroughputPoint) (float64, bool) {
				return p.CPUSecondsPer1000Acks, p.CPUMeasured && p.Acks > 0
			}),
			tp("rss_mib", "rss MiB", count, func(p *ThroughputPoint) (float64, bool) {
				return float64(p.RSSBytes) / (1 << 20), p.RSSBytes > 0
			}),
		},
	},
	{
		id:            "manifest",
		title:         "cost of an ack against manifest size (one task, acks one after the other)",
		variantHeader: "segments",
		variants: func(r *Results) []variant {
			return keyed(r, "n", func(s *System) []int {
				if s.Manifest == nil {
					return nil
				}
				var ks []int
				for _, p := range s.Manifest.Points {
					ks = append(ks, p.Size)
				}
				return ks
			})
		},
		figures: []figure{
			mp("ack_mean_ms", "mean ms", millis, func(p *ManifestPoint) (float64, bool) { return p.AckTime.MeanMS, p.AckTime.Count > 0 }),
			mp("ack_p50_ms", "p50 ms", millis, func(p *ManifestPoint) (float64, bool) { return p.AckTime.P50MS, p.AckTime.Count > 0 }),
			mp("ack_p99_ms", "p99 ms", millis, func(p *ManifestPoint) (float64, bool) { return p.AckTime.P99MS, p.AckTime.Count > 0 }),
			mp("bytes_per_ack", "bytes/ack", count, func(p *ManifestPoint) (float64, bool) { return p.BytesPerAck, p.AckTime.Count > 0 }),
			mp("device_bytes_per_ack", "device bytes/ack", count, func(p *ManifestPoint) (float64, bool) {
				return p.DeviceBytesPerAck, p.AckTime.Count > 0 && p.DeviceBytesWritten > 0
			}),
		},
	},
	{
		id:       "restore",
		title:    "restore: read a large manifest (leader: linearizable; follower: stale)",
		variants: single(func(s *System) bool { return s.Restore != nil }),
		figures: []figure{
			{id: "segments", header: "segments", format: count, noRatio: true, get: func(s *System, _ int) (float64, bool) {
				if s.Restore == nil {
					return 0, false
				}
				return float64(s.Restore.Segments), true
			}},
			rs("leader_p50_ms", "leader p50 ms", millis, func(r *Restore) float64 { return r.Leader.P50MS }),
			rs("leader_p99_ms", "leader p99 ms", millis, func(r *Restore) float64 { return r.Leader.P99MS }),
			rs("follower_p50_ms", "follower p50 ms", millis, func(r *Restore) float64 { return r.Follower.P50MS }),
			rs("follower_p99_ms", "follower p99 ms", millis, func(r *Restore) float64 { return r.Follower.P99MS }),
		},
	},
	{
		id:       "failover",
		title:    "failover: leader killed to first successful ack",
		variants: single(func(s *System) bool { return s.Failover != nil }),
		figures: []figure{
			fo("median_seconds", "median s", secs, func(f *Failover) float64 { return f.MedianSeconds }),
			fo("p90_seconds", "p90 s", secs, func(f *Failover) float64 { return f.P90Seconds }),
			fo("max_seconds", "max s", secs, func(f *Failover) float64 { return f.MaxSeconds }),
		},
	},
}

// keyed returns one variant per distinct key any system has, ascending.
func keyed(r *Results, idPrefix string, keys func(*System) []int) []variant {
	var all []int
	for i := range r.Systems {
		all = append(all, keys(&r.Systems[i])...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	vs := make([]variant, len(all))
	for i, k := range all {
		vs[i] = variant{id: idPrefix + strconv.Itoa(k), label: strconv.Itoa(k), key: k}
	}
	return vs
}

// single returns the variants of a workload without a parameter: one,
// when any system has its results.
func single(has func(*System) bool) func(r *Results) []variant {
	return func(r *Results) []variant {
		for i := range r.Systems {
			if has(&r.Systems[i]) {
				return []variant{{id: "all", label: "", key: 0}}
			}
		}
		return nil
	}
}

// higher marks f a rate (more is better).
func higher(f figure) figure {
	f.higher = true
	return f
}

func tp(id, header string, format func(float64) string, f func(*ThroughputPoint) (float64, bool)) figure {
	return figure{id: id, header: header, format: format, get: func(s *System, w int) (float64, bool) {
		p := s.Point(w)
		if p == nil {
			return 0, false
		}
		return f(p)
	}}
}

func mp(id, header string, format func(float64) string, f func(*ManifestPoint) (float64, bool)) figure {
	return figure{id: id, header: header, format: format, get: func(s *System, size int) (float64, bool) {
		if s.Manifest == nil {
			return 0, false
		}
		for i := range s.Manifest.Points {
			if s.Manifest.Points[i].Size == size {
				return f(&s.Manifest.Points[i])
			}
		}
		return 0, false
	}}
}

func rs(id, header string, format func(float64) string, f func(*Restore) float64) figure {
	return figure{id: id, header: header, format: format, get: func(s *System, _ int) (float64, bool) {
		if s.Restore == nil || s.Restore.Reads == 0 {
			return 0, false
		}
		return f(s.Restore), true
	}}
}

func fo(id, header string, format func(float64) string, f func(*Failover) float64) figure {
	return figure{id: id, header: header, format: format, get: func(s *System, _ int) (float64, bool) {
		if s.Failover == nil || len(s.Failover.Samples) == 0 {
			return 0, false
		}
		return f(s.Failover), true
	}}
}

// ComputeRatios returns, for every figure both the metastore and a peer
// have, the metastore's value over the peer's, and over the best value of
// each peer family's variants (Peer "best-etcd"). A figure whose peer value
// is zero has no ratio.
func ComputeRatios(r *Results) []RatioFigure {
	ms := r.System(Metastore)
	if ms == nil {
		return nil
	}
	var out []RatioFigure
	for _, sec := range sections {
		for _, v := range sec.variants(r) {
			for _, f := range sec.figures {
				a, ok := f.get(ms, v.key)
				if !ok || f.noRatio {
					continue
				}
				for _, peer := range Peers {
					ps := r.System(peer)
					if ps == nil {
						continue
					}
					b, ok := f.get(ps, v.key)
					if !ok {
						continue
					}
					q, ok := Ratio(a, b)
					if !ok {
						continue
					}
					out = append(out, RatioFigure{
						ID:      fmt.Sprintf("%s.%s.%s", sec.id, v.id, f.id),
						Section: sec.id, Variant: v.id, Figure: f.id, Peer: peer,
						Metastore: a, PeerValue: b, Ratio: q,
					})
				}
				for _, fam := range PeerFamilies {
					b, chosen, ok := f.best(r, fam, v.key)
					if !ok {
						continue
					}
					q, ok := Ratio(a, b)
					if !ok {
						continue
					}
					out = append(out, RatioFigure{
						ID:      fmt.Sprintf("%s.%s.%s", sec.id, v.id, f.id),
						Section: sec.id, Variant: v.id, Figure: f.id, Peer: BestPrefix + fam, Chosen: chosen,
						Metastore: a, PeerValue: b, Ratio: q,
					})
				}
			}
		}
	}
	return out
}

// Finalize derives the comparisons of r from its measurements: each
// system's manifest time ratio, the ratios to the peers, and the goals.
// Systems are put in the canonical order (metastore, the peers in Peers'
// order, then any other), and a non-finite float a system reported (which JSON cannot
// encode) becomes zero.
func Finalize(r *Results) {
	r.Schema = SchemaVersion
	zeroNonFinite(reflect.ValueOf(r).Elem())
	order := map[string]int{Metastore: 0}
	for i, p := range Peers {
		order[p] = i + 1
	}
	rank := func(name string) int {
		if i, ok := order[name]; ok {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(r.Systems, func(a, b System) int { return rank(a.Name) - rank(b.Name) })
	for i := range r.Systems {
		if m := r.Systems[i].Manifest; m != nil {
			m.TimeRatio = manifestTimeRatio(m)
		}
	}
	r.Ratios = ComputeRatios(r)
	r.Goals = EvaluateGoals(r)
}

// manifestTimeRatio returns the mean time per ack at the largest size over
// that at the smallest, or zero without two measured sizes.
func manifestTimeRatio(m *ManifestCost) float64 {
	var small, large *ManifestPoint
	for i := range m.Points {
		p := &m.Points[i]
		if p.AckTime.Count == 0 {
			continue
		}
		if small == nil || p.Size < small.Size {
			small = p
		}
		if large == nil || p.Size > large.Size {
			large = p
		}
	}
	if small == nil || large == nil || small.Size == large.Size {
		return 0
	}
	q, ok := Ratio(large.AckTime.MeanMS, small.AckTime.MeanMS)
	if !ok {
		return 0
	}
	return q
}

// zeroNonFinite sets every NaN or infinite float reachable from v (through
// structs, pointers and slices) to zero.
func zeroNonFinite(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && v.CanSet() {
			v.SetFloat(0)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			zeroNonFinite(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				zeroNonFinite(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			zeroNonFinite(v.Index(i))
		}
	}
}
