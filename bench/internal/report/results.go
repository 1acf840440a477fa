// Package report holds what a benchmark run measured (the schema of
// results.json), derives the comparisons (ratios of the metastore's figures
// to each peer's, the goals), and renders it all: a text table, the JSON
// document and SVG line charts.
//
// The workloads fill in the per-system results; Finalize computes the
// derived figures; WriteAll writes results.json, results.txt and the charts.
package report

import (
	"strings"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

// SchemaVersion is the version of the results.json layout.
const SchemaVersion = 1

// Names of the systems the comparisons are about. Each peer is measured
// in the designs its careful users would build: lean (Etcd, ZooKeeper:
// one fenced transaction per ack), lean with the acks made while others
// are in flight batched into one transaction (EtcdBatched, as the
// metastore's client batches them; ZooKeeper's multi is all-or-nothing,
// so independent guards cannot share one) and compare-and-swap (EtcdCAS,
// ZooKeeperCAS).
const (
	Metastore    = "metastore"
	Etcd         = "etcd"
	EtcdBatched  = "etcd-batched"
	EtcdCAS      = "etcd-cas"
	ZooKeeper    = "zookeeper"
	ZooKeeperCAS = "zookeeper-cas"
)

// Peers are the systems the metastore is compared with, in table order.
var Peers = []string{Etcd, EtcdBatched, EtcdCAS, ZooKeeper, ZooKeeperCAS}

// PeerFamilies are the peer servers: a system belongs to a family when
// it is named after it ("etcd", or "etcd-" and its design). The metastore
// is judged against the best variant of each family in the run.
var PeerFamilies = []string{Etcd, ZooKeeper}

// BestPrefix names the comparison with the best variant of a family:
// "best-etcd".
const BestPrefix = "best-"

// InFamily reports whether the system name is a variant of family.
func InFamily(name, family string) bool {
	return name == family || strings.HasPrefix(name, family+"-")
}

// Results is everything one run of the benchmark measured and derived.
type Results struct {
	Schema   int       `json:"schema"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Interrupted is set when the run was stopped (SIGINT) before it
	// measured everything it was asked to.
	Interrupted bool `json:"interrupted,omitempty"`
	// Revision is the metastore tree measured: its git commit, with
	// "-dirty" when it had changes (empty when git could not tell).
	Revision string   `json:"revision,omitempty"`
	Machine  Machine  `json:"machine"`
	Params   Params   `json:"params"`
	Systems  []System `json:"systems"`
	// Ratios and Goals are derived by Finalize.
	Ratios []RatioFigure `json:"ratios"`
	Goals  []Goal        `json:"goals"`
}

// System returns the results of the named system, or nil.
func (r *Results) System(name string) *System {
	for i := range r.Systems {
		if r.Systems[i].Name == name {
			return &r.Systems[i]
		}
	}
	return nil
}

// Machine describes the host the benchmark ran on.
type Machine struct {
	CPUModel  string `json:"cpu_model"`
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// Params are the parameters of the run.
type Params struct {
	Systems   []string `json:"systems"`
	Workloads []string `json:"workloads"`
	Smoke     bool     `json:"smoke"`
	DataDir   string   `json:"data_dir"`
	Keep      bool     `json:"keep"`
	// MetastoreFlags were added to every metastore member's command line.
	MetastoreFlags []string `json:"metastore_flags,omitempty"`

	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	Concurrency     []int   `json:"concurrency"`
	TasksPerJob     int     `json:"tasks_per_job"`
	SegmentsPerAck  int     `json:"segments_per_ack"`
	KeyBatch        int     `json:"key_batch"`

	ManifestSizes []int `json:"manifest_sizes"`
	ManifestAcks  int   `json:"manifest_acks"`
	RestoreReads  int   `json:"restore_reads"`

	FailoverKills              int     `json:"failover_kills"`
	FailoverCallTimeoutSeconds float64 `json:"failover_call_timeout_seconds"`

	GCObjects      int `json:"gc_objects"`
	ResumeTasks    int `json:"resume_tasks"`
	ResumeStateful int `json:"resume_stateful"`
	FootprintBlobs int `json:"footprint_blobs"`
	FootprintJobs  int `json:"footprint_jobs"`
}

// System is what was measured on one system under test.
type System struct {
	Name string `json:"name"`
	// Version is the system's own version string, when it reports one.
	Version string `json:"version,omitempty"`
	// Started and Finished bound the system's part of the run (start of
	// its cluster to its stop).
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Throughput []ThroughputPoint `json:"throughput,omitempty"`
	Manifest   *ManifestCost     `json:"manifest_cost,omitempty"`
	Restore    *Restore          `json:"restore,omitempty"`
	Failover   *Failover         `json:"failover,omitempty"`
	Extras     *Extras           `json:"extras,omitempty"`
	// Counters are the system's own counts over the run (the baselines'
	// compare-and-swap retries, for one).
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Errors are the workloads that failed on this system; the others
	// still ran.
	Errors []WorkloadError `json:"errors,omitempty"`
}

// Point returns the throughput point measured with workers workers, or nil.
func (s *System) Point(workers int) *ThroughputPoint {
	for i := range s.Throughput {
		if s.Throughput[i].Workers == workers {
			return &s.Throughput[i]
		}
	}
	return nil
}

// WorkloadError records a workload that failed on a system.
type WorkloadError struct {
	Workload string `json:"workload"`
	Error    string `json:"error"`
}

// ThroughputPoint is one point of the ack throughput sweep: Workers tasks
// (one worker each) spread over Jobs jobs, every job's coordinator
// beginning the next epoch as soon as all its tasks acknowledged the last.
type ThroughputPoint struct {
	Workers int `json:"workers"`
	Jobs    int `json:"jobs"`
	// WindowSeconds is the measured window (the warmup before it excluded).
	WindowSeconds   float64 `json:"window_seconds"`
	Acks            int     `json:"acks"`
	AcksPerSecond   float64 `json:"acks_per_second"`
	Epochs          int     `json:"epochs"`
	EpochsPerSecond float64 `json:"epochs_per_second"`
	// AckLatency is the duration of the Ack calls that ended in the window.
	AckLatency Latency `json:"ack_latency"`
	// KeysLatency is the duration of the Keys calls (batches of key
	// fetches, part of each worker's cycle) that ended in the window.
	KeysLatency Latency `json:"keys_latency"`
	// BeginLatency is the duration of the coordinators' BeginEpoch calls.
	BeginLatency Latency `json:"begin_latency"`
	// CPU time of the member processes over the window (utime+stime of
	// /proc/PID/stat), when every member's could be read.
	CPUMeasured           bool    `json:"cpu_measured"`
	CPUSeconds            float64 `json:"cpu_seconds"`
	CPUSecondsPer1000Acks float64 `json:"cpu_seconds_per_1000_acks"`
	// RSSBytes is the members' total resident memory at the window's end
	// (zero when it could not be read).
	RSSBytes int64 `json:"rss_bytes"`
}

// Byte-accounting methods of ManifestCost.
const (
	// BytesProcIO sums write_bytes of /proc/PID/io over the members.
	BytesProcIO = "proc_io_write_bytes"
	// BytesDataDir sums the growth of the members' data directories.
	BytesDataDir = "data_dir_growth"
)

// ManifestCost is the cost of an ack against the size of the task's
// manifest: per size, a one-task job preloaded to that many segments, then
// Acks acknowledgements done one after the other.
type ManifestCost struct {
	Acks           int    `json:"acks"`
	SegmentsPerAck int    `json:"segments_per_ack"`
	BytesMethod    string `json:"bytes_method"`
	// Points, in ascending size.
	Points []ManifestPoint `json:"points"`
	// TimeRatio is the mean time per ack at the largest size over that at
	// the smallest (derived by Finalize; zero when not computable).
	TimeRatio float64 `json:"time_ratio_largest_smallest"`
}

// ManifestPoint is the cost of an ack at one manifest size.
type ManifestPoint struct {
	Size int `json:"size"`
	// AckTime is the duration of the Ack calls.
	AckTime Latency `json:"ack_time"`
	// BytesWritten counts every byte the members wrote during the acks'
	// cycles (epoch begins and key fetches included), per BytesMethod.
	BytesWritten int64   `json:"bytes_written"`
	BytesPerAck  float64 `json:"bytes_per_ack"`
	// DeviceBytesWritten is what the block devices holding the members'
	// data directories wrote over the same acks, synced at both ends (the
	// file system's journal and any other writer on the machine included);
	// zero when the data is not on a block device.
	DeviceBytesWritten int64   `json:"device_bytes_written,omitempty"`
	DeviceBytesPerAck  float64 `json:"device_bytes_per_ack,omitempty"`
}

// Restore is the time to read a large manifest as a restore does.
type Restore struct {
	Segments int `json:"segments"`
	Reads    int `json:"reads"`
	// Leader reads are linearizable; follower reads are stale reads served
	// by a follower.
	Leader           Latency `json:"leader"`
	Follower         Latency `json:"follower"`
	FollowerSegments int     `json:"follower_segments"`
}

// Failover is the time from killing the leader to the first successful ack.
type Failover struct {
	Kills              int     `json:"kills"`
	CallTimeoutSeconds float64 `json:"call_timeout_seconds"`
	// Samples are the measured times in seconds, in round order.
	Samples       []float64 `json:"samples_seconds"`
	MedianSeconds float64   `json:"median_seconds"`
	P90Seconds    float64   `json:"p90_seconds"`
	MaxSeconds    float64   `json:"max_seconds"`
	// Attempts are the Ack attempts each round needed.
	Attempts []int `json:"attempts"`
	// KillSeconds are the durations of the Kill calls (SIGKILL until the
	// process is gone), part of each sample.
	KillSeconds []float64 `json:"kill_seconds"`
}

// Extras are the metastore-only workloads' results, as its system reports
// them.
type Extras struct {
	GC        *sut.GCResult        `json:"gc,omitempty"`
	Resume    *sut.ResumeResult    `json:"resume,omitempty"`
	Footprint *sut.FootprintResult `json:"footprint,omitempty"`
}
