package node

import (
	"strings"
	"unicode"

	metricscompat "github.com/hashicorp/go-metrics/compat"
)

// promSink sits between go-metrics and its Prometheus sink and renames what
// hashicorp/raft and raft-boltdb report the Prometheus way: snake_case names
// and label names, counters ending in _total, durations in seconds ending in
// _seconds, sizes ending in _bytes.
//
// It relies on the go-metrics configuration installRaftMetrics sets up: the
// service name ("metastore") and the type ("timer", "sample", "counter",
// "gauge", "kv") prefix every key, and timers are measured in seconds
// (TimerGranularity). A few samples and gauges are reported by Raft in
// milliseconds by hand rather than through a timer; units lists them.
type promSink struct {
	next metricscompat.MetricSink
}

// unit is what a non-timer metric measures, when Raft does not say it in
// the name: a suffix for the name and a factor to the base unit.
type unit struct {
	suffix string
	scale  float32
}

// units maps go-metrics keys (without the service and type prefixes, joined
// with dots) to their unit.
var units = map[string]unit{
	"raft.leader.lastContact":           {"_seconds", 1e-3},
	"raft.leader.oldestLogAge":          {"_seconds", 1e-3},
	"raft.fsm.lastRestoreDuration":      {"_seconds", 1e-3},
	"raft.boltdb.txstats.rebalanceTime": {"_seconds", 1e-3},
	"raft.boltdb.txstats.spillTime":     {"_seconds", 1e-3},
	"raft.boltdb.logSize":               {"_bytes", 1},
	"raft.boltdb.logBatchSize":          {"_bytes", 1},
}

// rename returns the Prometheus name of a go-metrics key and the factor its
// values are multiplied by; ok is false for a key not laid out as
// installRaftMetrics configures (service, type, name...), which is dropped.
func rename(key []string) (name []string, scale float32, ok bool) {
	if len(key) < 3 {
		return nil, 0, false
	}
	service, kind, parts := key[0], key[1], key[2:]
	var b strings.Builder
	b.WriteString(snakeCase(service))
	for _, p := range parts {
		b.WriteByte('_')
		b.WriteString(snakeCase(p))
	}
	scale = 1
	switch kind {
	case "counter":
		b.WriteString("_total")
	case "timer":
		b.WriteString("_seconds")
	case "sample", "gauge", "kv":
		if u, found := units[strings.Join(parts, ".")]; found {
			b.WriteString(u.suffix)
			scale = u.scale
		}
	default:
		return nil, 0, false
	}
	return []string{b.String()}, scale, true
}

func renameLabels(labels []metricscompat.Label) []metricscompat.Label {
	if len(labels) == 0 {
		return labels
	}
	out := make([]metricscompat.Label, len(labels))
	for i, l := range labels {
		out[i] = metricscompat.Label{Name: snakeCase(l.Name), Value: l.Value}
	}
	return out
}

// snakeCase turns "appendEntries", "getRPCType" and "heartbeat_timeout"
// into "append_entries", "get_rpc_type" and "heartbeat_timeout"; any
// character other than a letter, digit or underscore becomes an underscore.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		switch {
		case unicode.IsUpper(c):
			if i > 0 {
				prev := r[i-1]
				nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					b.WriteByte('_')
				}
			}
			b.WriteRune(unicode.ToLower(c))
		case c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_'):
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (s promSink) SetGauge(key []string, val float32) {
	s.SetGaugeWithLabels(key, val, nil)
}

func (s promSink) SetGaugeWithLabels(key []string, val float32, labels []metricscompat.Label) {
	if name, scale, ok := rename(key); ok {
		s.next.SetGaugeWithLabels(name, val*scale, renameLabels(labels))
	}
}

func (s promSink) EmitKey(key []string, val float32) {
	if name, scale, ok := rename(key); ok {
		s.next.EmitKey(name, val*scale)
	}
}

func (s promSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s promSink) IncrCounterWithLabels(key []string, val float32, labels []metricscompat.Label) {
	if name, scale, ok := rename(key); ok {
		s.next.IncrCounterWithLabels(name, val*scale, renameLabels(labels))
	}
}

func (s promSink) AddSample(key []string, val float32) {
	s.AddSampleWithLabels(key, val, nil)
}

func (s promSink) AddSampleWithLabels(key []string, val float32, labels []metricscompat.Label) {
	if name, scale, ok := rename(key); ok {
		s.next.AddSampleWithLabels(name, val*scale, renameLabels(labels))
	}
}
