package node

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	gometricsprom "github.com/armon/go-metrics/prometheus"
	metricscompat "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/fsm"
)

// raftMetricsOnce guards the process-wide go-metrics sink. hashicorp/raft
// reports through the global go-metrics instance (github.com/armon/go-metrics
// through the go-metrics/compat alias), so only one sink per process can
// exist: the first Node created with a non-nil Registerer installs it, later
// Registerers do not get Raft's internal metrics (they still get the node's
// own metrics below).
var raftMetricsOnce sync.Once

// installRaftMetrics bridges hashicorp/raft's go-metrics into Prometheus:
// metrics appear as metastore_raft_... on reg, named by promSink
// (raftmetrics.go). A nil reg leaves go-metrics' default blackhole sink in
// place (tests start many nodes per process).
func installRaftMetrics(reg prometheus.Registerer, log *slog.Logger) {
	if reg == nil {
		return
	}
	raftMetricsOnce.Do(func() {
		sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
			Registerer: reg,
			Name:       "metastore_raft_go_metrics",
			// Series not updated for this long are dropped, so leader-only
			// gauges do not linger with stale values after a step-down.
			Expiration: time.Minute,
		})
		if err != nil {
			log.Warn("raft metrics not exported: registering the go-metrics sink failed", "err", err)
			return
		}
		if _, err := metricscompat.NewGlobal(raftMetricsConfig(), promSink{next: sink}); err != nil {
			log.Warn("raft metrics not exported: installing the go-metrics sink failed", "err", err)
		}
	})
}

// raftMetricsConfig is the go-metrics configuration promSink expects: keys
// prefixed with the service name and the metric type (promSink tells timers
// from other samples by it), timers measured in seconds, no hostname and no
// runtime metrics (the Go collector reports those).
func raftMetricsConfig() *metricscompat.Config {
	conf := metricscompat.DefaultConfig("metastore")
	conf.EnableHostname = false
	conf.EnableHostnameLabel = false
	conf.EnableRuntimeMetrics = false
	conf.EnableTypePrefix = true
	conf.TimerGranularity = time.Second
	return conf
}

// nodeMetrics are the node's own metrics, read from Raft and the FSM when
// Prometheus scrapes.
type nodeMetrics struct {
	reg           prometheus.Registerer
	collectors    []prometheus.Collector
	applyDuration *prometheus.HistogramVec
	// commitDuration times the commits of the state machine file
	// (fsm.SetCommitObserver), by reason.
	commitDuration *prometheus.HistogramVec
	batchCommands  prometheus.Histogram
	leaderChanges  prometheus.Counter
}

func newNodeMetrics(n *Node, reg prometheus.Registerer) (*nodeMetrics, error) {
	m := &nodeMetrics{
		reg: reg,
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "metastore_node_apply_duration_seconds",
			Help:    "Time from proposing a command to its application on the leader, by outcome (ok, rule_error, not_leader, try_again, unknown, shutdown, disk_full, canceled, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"outcome"}),
		commitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "metastore_node_fsm_commit_duration_seconds",
			Help:    "Time to commit the state machine file's transaction (its deferred puts written, bbolt's commit), during which Raft's apply waits, by reason: due (--state-commit-interval passed, or --state-commit-entries or --state-commit-writes reached), read (a read needed what it held), snapshot, restore, close.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 13),
		}, []string{"reason"}),
		batchCommands: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metastore_node_entry_commands",
			Help:    "Commands per Raft entry proposed by this node (group commit: more than 1 when commands queued while the previous entry was written).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_node_leader_changes_total",
			Help: "Changes of the known leader observed by this node.",
		}),
	}
	fileOps := func(op string, f func(fsm.FileOps) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "metastore_node_fsm_file_ops_total",
			Help:        "Operations of the committed transactions on the state machine file's buckets, by kind: seek (a point read, or the start of a scan), put, delete. bbolt searches its tree from the root for each; divided by the acks applied, the cost of an ack in the file.",
			ConstLabels: prometheus.Labels{"op": op},
		}, func() float64 { return float64(f(n.fsm.CommitStats().Ops)) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	commitTimes := make(map[fsm.CommitReason]prometheus.Observer, len(fsm.CommitReasons))
	for _, r := range fsm.CommitReasons {
		commitTimes[r] = m.commitDuration.WithLabelValues(string(r))
	}
	n.fsm.SetCommitObserver(func(r fsm.CommitReason, took time.Duration) {
		commitTimes[r].Observe(took.Seconds())
	})
	m.collectors = []prometheus.Collector{
		m.applyDuration,
		m.commitDuration,
		m.batchCommands,
		m.leaderChanges,
		gauge("metastore_node_is_leader", "1 if this node is the Raft leader, else 0.", func() float64 {
			if n.raft.State() == raft.Leader {
				return 1
			}
			return 0
		}),
		gauge("metastore_node_raft_term", "Current Raft term.", func() float64 {
			return float64(n.raft.CurrentTerm())
		}),
		gauge("metastore_node_raft_commit_index", "Raft commit index known to this node.", func() float64 {
			return float64(n.raft.CommitIndex())
		}),
		gauge("metastore_node_fsm_applied_index", "Last Raft index applied by the state machine.", func() float64 {
			return float64(n.fsm.AppliedIndex())
		}),
		gauge("metastore_node_disk_free_bytes", "Free bytes of the data directory's file system (read at most every 100 ms).", func() float64 {
			return float64(n.disk.Status().FreeBytes)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_disk_writes_refused_total",
			Help: "Writes refused because the data directory's file system had less than --min-free-disk free, or a write failed with ENOSPC.",
		}, func() float64 { return float64(n.disk.refused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_integrity_problems_total",
			Help: "Corrupt data files (a snapshot not matching its checksum) found while the member runs; rebuild the member.",
		}, func() float64 { _, c := n.integrity.status(); return float64(c) }),
		gauge("metastore_node_raft_last_snapshot_index", "Raft index of the newest snapshot.", func() float64 {
			return float64(n.lastSnapshotIndex())
		}),
		gauge("metastore_blobs_unobserved", "Blobs committed by acks whose objects the leader has not looked at yet (HEAD), as of the state machine file's last commit; it grows while new blobs arrive faster than the leader observes them.", func() float64 {
			c, _ := n.fsm.UnobservedCount()
			return float64(c)
		}),
		gauge("metastore_node_fsm_committed_index", "Last Raft index the state machine file holds committed (group commits: at most --state-commit-interval behind the applied index).", func() float64 {
			return float64(n.fsm.CommittedIndex())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_fsm_commits_total",
			Help: "Transactions of the state machine file committed (each holds the Raft entries applied since the previous one).",
		}, func() float64 { return float64(n.fsm.CommitStats().Commits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_fsm_committed_entries_total",
			Help: "Raft entries in the committed transactions of the state machine file (divided by metastore_node_fsm_commits_total: entries per commit).",
		}, func() float64 { return float64(n.fsm.CommitStats().Entries) }),
		fileOps("seek", func(o fsm.FileOps) uint64 { return o.Seeks }),
		fileOps("put", func(o fsm.FileOps) uint64 { return o.Puts }),
		fileOps("delete", func(o fsm.FileOps) uint64 { return o.Deletes }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_fsm_blob_filter_spared_total",
			Help: "Searches of the state machine file's blobs bucket that the filter of blob keys answered without reading the file (a new blob's commit checks that no record has its key); not in metastore_node_fsm_file_ops_total.",
		}, func() float64 { return float64(n.fsm.CommitStats().Ops.Spared) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_fsm_blob_filter_builds_total",
			Help: "Builds of the filter of blob keys from the state machine file, each reading every blob key: at start and at each snapshot restore.",
		}, func() float64 { return float64(n.fsm.CommitStats().FilterBuilds) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "metastore_node_fsm_blob_filter_keys",
			Help: "Blob keys the filter of blob keys counts (the blobs bucket's, with the open transaction's writes); it takes about 19 bytes of memory per key.",
		}, func() float64 { return float64(n.fsm.CommitStats().FilterKeys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "metastore_node_raft_log_cache_entries",
			Help: fmt.Sprintf("Newest Raft log entries kept in memory in front of the log store (at most %d).", logCacheSize),
		}, func() float64 { e, _ := n.logs.cached(); return float64(e) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "metastore_node_raft_log_cache_bytes",
			Help: fmt.Sprintf("Bytes of the Raft log entries kept in memory (their data, and %d bytes each besides; at most %d MiB).", logCacheEntryOverhead, logCacheBytes>>20),
		}, func() float64 { _, b := n.logs.cached(); return float64(b) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metastore_node_fsm_commit_failures_total",
			Help: "Commits of the state machine file that failed (a full file system); their entries are applied again and the commit retried.",
		}, func() float64 { return float64(n.fsm.CommitStats().Failed) }),
	}
	if n.tlsStream != nil {
		m.collectors = append(m.collectors, n.tlsStream.failures)
	}
	if reg != nil {
		for i, c := range m.collectors {
			if err := reg.Register(c); err != nil {
				for _, done := range m.collectors[:i] {
					reg.Unregister(done)
				}
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *nodeMetrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *nodeMetrics) observeApply(start time.Time, outcome string) {
	m.applyDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}

func (m *nodeMetrics) observeBatch(commands int) {
	m.batchCommands.Observe(float64(commands))
}

// lastSnapshotIndex reads the snapshot store's directory (no lock of Raft
// or of the state machine) rather than raft.Stats, which formats the whole
// configuration for the one number.
func (n *Node) lastSnapshotIndex() uint64 {
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		return 0
	}
	return metas[0].Index
}
