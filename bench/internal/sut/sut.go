// Package sut defines the systems under test of the benchmark: the
// metastore and the stores users would otherwise keep checkpoint metadata
// in (etcd, ZooKeeper), each started by the benchmark as a three-member
// cluster on loopback with durable writes, and driven through the same
// logical operations of a stream job's checkpoint cycle.
//
// The logical records are the same everywhere: a job with tasks, epochs
// that complete when every task has acknowledged them, and per task a
// manifest of changelog segments to which each ack adds a few. The
// metastore keeps them as its checkpoint model; the baselines keep them the
// way a careful user of a key-value store would (see the implementations).
package sut

import (
	"context"
	"errors"
	"time"
)

// Segment is a changelog segment: a byte range of a blob (object key),
// holding the changelog records FirstSeq..LastSeq.
type Segment struct {
	Key      string
	Offset   int64
	Length   int64
	FirstSeq uint64
	LastSeq  uint64
}

// Member is one process of a system's cluster.
type Member struct {
	ID      string
	PID     int
	DataDir string
}

// System is a store under test. Start launches it; every other method
// requires a started system. Methods are safe for concurrent use.
type System interface {
	// Name is "metastore", "etcd", "etcd-cas", "zookeeper" or
	// "zookeeper-cas".
	Name() string
	// Start launches a three-member cluster with data under dir and waits
	// until it accepts writes. Writes are durable (fsync on commit).
	Start(ctx context.Context, dir string) error
	// Stop kills every member process; data directories stay.
	Stop() error
	// Members returns the running member processes (for resident memory,
	// I/O accounting and data-directory size).
	Members() []Member

	// CreateJob registers a job whose epochs complete when all tasks have
	// acknowledged them. Every task is stateful and incremental.
	CreateJob(ctx context.Context, job string, tasks []string) error
	// BeginEpoch starts epoch (strictly increasing per job, from 1).
	BeginEpoch(ctx context.Context, job string, epoch uint64) error
	// Ack acknowledges epoch for task, adding segments to the task's
	// manifest (a delta: the segments before stay). The epoch completes
	// with its last task's ack. Blob keys are chosen by the system (Keys).
	Ack(ctx context.Context, job, task string, epoch uint64, add []Segment) error
	// Keys returns n fresh blob keys the task may reference in its next
	// acks (the metastore hands out upload slots; a key-value store makes
	// them up). The call is part of the worker's cycle and timed with it.
	Keys(ctx context.Context, job, task string, n int) ([]string, error)
	// ReadManifest reads the task's whole manifest as a restore would and
	// returns its number of segments. From the leader, linearizable; with
	// stale, from a follower, as fresh as that follower is.
	ReadManifest(ctx context.Context, job, task string, stale bool) (int, error)
	// Preload gives the only task of a job just created with CreateJob a
	// manifest of n segments, quickly (the setup of a measurement, not
	// measured): it begins and acknowledges epochs itself, as many as it
	// likes, and returns the next epoch to begin.
	Preload(ctx context.Context, job, task string, n int) (next uint64, err error)

	// Leader returns the member that currently leads.
	Leader(ctx context.Context) (Member, error)
	// Kill sends SIGKILL to the member and waits until it is gone.
	Kill(m Member) error
	// Restart starts a killed member again from its data directory and
	// waits until it has rejoined.
	Restart(ctx context.Context, m Member) error
}

// StateSettler is a System whose members may hold applied writes in
// memory before they write them to their files (the metastore's group
// commits of its state file; a follower's interval is seconds long).
// SettleState waits until every member's files hold what the member had
// applied when the call began, so that a measurement of the bytes its
// members write counts the writes of what it measured, and nothing
// applied before it is left to be written inside the next one.
type StateSettler interface {
	SettleState(ctx context.Context) error
}

// Extras are the workloads only the metastore has, measured by its own
// system.
type Extras interface {
	// GC makes objects unreferenced blobs in the S3-protocol server (real
	// objects, uploaded), lets them pass the grace period, runs the
	// collector until all are gone and reports the rate.
	GC(ctx context.Context, objects int) (GCResult, error)
	// Resume runs a job of tasks tasks of which stateful have state (a
	// changelog manifest) and the rest only an input position (inline) or
	// nothing, checkpoints it, restarts it with a changed topology and
	// restores every task, counting object-store requests; and the same
	// restore done the way a store without capability flags does it (one
	// object per task and kind).
	Resume(ctx context.Context, tasks, stateful int) (ResumeResult, error)
	// Footprint loads blobs live blobs across jobs jobs, then reports the
	// members' resident memory and data-directory sizes, the time a killed
	// member takes to restart and catch up, and the time to take a
	// snapshot and to restore it. When a step after the memory was
	// measured fails, it returns the figures measured so far (Measured
	// reports true) with the error, which the result also records.
	Footprint(ctx context.Context, blobs, jobs int) (FootprintResult, error)
}

// GCResult is what Extras.GC measured.
type GCResult struct {
	Deleted        int     `json:"deleted"`
	Seconds        float64 `json:"seconds"`
	PerSecond      float64 `json:"deletions_per_second"`
	RaftEntries    uint64  `json:"raft_entries"`
	EntriesPer1000 float64 `json:"raft_entries_per_1000_deletions"`
	DeleteRequests int     `json:"delete_requests"`
}

// ResumeResult is what Extras.Resume measured.
type ResumeResult struct {
	Tasks    int `json:"tasks"`
	Stateful int `json:"stateful"`
	// Object-store requests of the metastore's restore, in all and for
	// the tasks without state.
	MetastoreRequests          int `json:"metastore_object_requests"`
	MetastoreStatelessRequests int `json:"metastore_stateless_task_requests"`
	// The same restore reading one object per task and kind.
	NaiveRequests  int `json:"naive_object_requests"`
	NaiveNoSuchKey int `json:"naive_nosuchkey"`
}

// FootprintResult is what Extras.Footprint measured. The per-member
// slices are in the order of MemberIDs.
type FootprintResult struct {
	Blobs       int      `json:"blobs"`
	Jobs        int      `json:"jobs"`
	LoadSeconds float64  `json:"load_seconds"`
	MemberIDs   []string `json:"member_ids,omitempty"`
	// RSSBytes is each member's resident memory (VmRSS) once it applied
	// the load; RSSAnonBytes and RSSFileBytes split it (RssAnon: heap and
	// stacks; RssFile: resident pages of mapped files, such as a
	// memory-mapped state file, which the kernel can reclaim). The split
	// is absent when the kernel does not report it.
	RSSBytes     []int64 `json:"rss_bytes"`
	RSSAnonBytes []int64 `json:"rss_anon_bytes,omitempty"`
	RSSFileBytes []int64 `json:"rss_file_bytes,omitempty"`
	DataDirBytes []int64 `json:"data_dir_bytes"`

	// RestartMember was killed (SIGKILL) once the load was measured and
	// started again with the same command line and data directory.
	// RestartServeSecs is the time from its start until it answered its
	// status; RestartSecs until it was ready (knew a leader, had applied
	// what it knew committed) and had applied RestartIndex, the leader's
	// applied index read before the kill (or later, if higher). Zero when
	// not measured; RestartError says why the restart failed.
	RestartMember    string  `json:"restart_member,omitempty"`
	RestartIndex     uint64  `json:"restart_index,omitempty"`
	RestartServeSecs float64 `json:"restart_serve_seconds,omitempty"`
	RestartSecs      float64 `json:"restart_seconds,omitempty"`
	RestartError     string  `json:"restart_error,omitempty"`
	// RestartRSSBytes is the restarted member's resident memory (VmRSS)
	// once it was ready and had applied RestartIndex: a member reads its
	// whole state file when it opens it. RestartRSSAnonBytes and
	// RestartRSSFileBytes split it, as above. Zero when not measured.
	RestartRSSBytes     int64 `json:"restart_rss_bytes,omitempty"`
	RestartRSSAnonBytes int64 `json:"restart_rss_anon_bytes,omitempty"`
	RestartRSSFileBytes int64 `json:"restart_rss_file_bytes,omitempty"`

	SnapshotBytes int64   `json:"snapshot_bytes"`
	SnapshotSecs  float64 `json:"snapshot_seconds"`
	RestoreSecs   float64 `json:"restore_seconds"`
	RestoreMethod string  `json:"restore_method"`
	// RestoreError says why the backup (snapshot save) or the restore
	// failed; the figures measured before it stand.
	RestoreError string `json:"restore_error,omitempty"`
}

// Measured reports whether r holds the figures of a load: Footprint may
// return them with an error from a later step.
func (r FootprintResult) Measured() bool { return len(r.RSSBytes) > 0 }

// ErrFenced is wrapped by the errors of writes a system refused because
// they were made for a generation of the job that a newer one has
// superseded (the lean baselines fence their acks and epochs so).
var ErrFenced = errors.New("sut: fenced: a newer generation of the job has taken over")

// ErrNotSupported is returned by an optional operation a system lacks.
var ErrNotSupported = errors.New("sut: not supported by this system")

// WaitFor polls cond every interval until it returns true or an error, or
// ctx ends.
func WaitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
