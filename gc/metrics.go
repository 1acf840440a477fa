package gc

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the collector's Prometheus metrics. They exist (and count)
// whether or not they are registered.
type metrics struct {
	reg prometheus.Registerer

	cycles         *prometheus.CounterVec
	deleted        prometheus.Counter
	bytesFreed     prometheus.Counter
	orphansDeleted prometheus.Counter
	deleteErrors   prometheus.Counter
	marksProposed  prometheus.Counter
	marked         prometheus.Counter
	expiredIntents prometheus.Counter
	purged         prometheus.Counter
	duration       prometheus.Histogram
	candidates     prometheus.Gauge
	deleting       prometheus.Gauge
	observed       prometheus.Counter
	flagged        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metastore_gc_cycles_total",
			Help: "Garbage-collection cycles run by this member as leader, by outcome (ok, error, canceled). Dry runs are not counted.",
		}, []string{"outcome"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_deleted_objects_total",
			Help: "Blobs deleted from the object store and recorded gone.",
		}),
		bytesFreed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_bytes_freed_total",
			Help: "Bytes freed: the recorded sizes of blobs recorded gone, plus the listed sizes of orphans deleted.",
		}),
		orphansDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_orphans_deleted_total",
			Help: "Objects unknown to the state machine deleted by the orphan sweep.",
		}),
		deleteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_delete_errors_total",
			Help: "Keys whose object-store delete failed or timed out (retried later).",
		}),
		marksProposed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_marks_proposed_total",
			Help: "Keys proposed for marking deleting.",
		}),
		marked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_marked_total",
			Help: "Keys the state machine marked deleting.",
		}),
		expiredIntents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_expired_intents_total",
			Help: "Upload intents whose lease ended, turned into candidates.",
		}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_gc_tombstones_purged_total",
			Help: "Records of gone blobs forgotten after the tombstone TTL.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metastore_gc_cycle_duration_seconds",
			Help:    "Duration of garbage-collection cycles (dry runs excluded).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}),
		candidates: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "metastore_gc_candidates",
			Help: "Unreferenced blobs waiting for the collector (grace not yet over included), as of the last cycle.",
		}),
		deleting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "metastore_gc_deleting",
			Help: "Blobs marked deleting whose object-store delete is not yet confirmed, as of the last cycle.",
		}),
		observed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_blobs_observed_total",
			Help: "New blobs whose object the leader looked at (HEAD) shortly after their ack, in batches, and recorded.",
		}),
		flagged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_blobs_flagged_total",
			Help: "New blobs whose object did not match their ack when the leader looked: a size that differs from the declared one, or no object.",
		}),
	}
	if reg != nil {
		all := m.collectors()
		for i, c := range all {
			if err := reg.Register(c); err != nil {
				for _, done := range all[:i] {
					reg.Unregister(done)
				}
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.cycles, m.deleted, m.bytesFreed, m.orphansDeleted, m.deleteErrors, m.marksProposed,
		m.marked, m.expiredIntents, m.purged, m.duration, m.candidates, m.deleting,
		m.observed, m.flagged,
	}
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
}
