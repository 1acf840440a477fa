// Package checker decides whether a run of the consistency suite kept the
// metastore's promises. It reads the history the workload recorded
// (package jepsen/history), the S3 proxy's request log, and the state the
// runner collected from the cluster after healing it, and returns one
// Verdict per checker:
//
//   - linearizable: each job's latest completed checkpoint, as seen by
//     linearizable reads (the readers' and restores of the latest
//     checkpoint), awaits and acks, is linearizable (porcupine);
//   - acks: no acknowledged write lost, no value that was never written,
//     epochs strictly increasing, no write of a fenced generation accepted;
//   - gc-safety: no referenced blob deleted or answered 404, no upload
//     key handed out twice, every blob live checkpoints reference
//     (LiveSet) exists at the end;
//   - gc-liveness: after quiescence, grace and two GC cycles the bucket
//     holds only the blobs live checkpoints reference (LiveSet, not the
//     store's reference counts), young uploads and garbage inside its
//     grace;
//   - convergence: every member at the same state hash and applied index,
//     fsck clean on every member;
//   - logs: no panic or race report in any member's log.
//
// docs/consistency.md explains each one and why it is sound.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// Verdict is one checker's answer.
type Verdict struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Summary is one line: what was checked, or the first violation.
	Summary string `json:"summary"`
	// Problems lists every violation found (at most MaxProblems).
	Problems []string `json:"problems,omitempty"`
	// Artifact is a file the checker wrote (the linearizability
	// visualization).
	Artifact string        `json:"artifact,omitempty"`
	Took     time.Duration `json:"took"`
}

// MaxProblems bounds the violations a verdict lists.
const MaxProblems = 50

type problems struct {
	list  []string
	total int
}

func (p *problems) addf(format string, args ...any) {
	p.total++
	if len(p.list) < MaxProblems {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	}
}

func (p *problems) verdict(name, okSummary string, start time.Time) Verdict {
	v := Verdict{Name: name, OK: p.total == 0, Problems: p.list, Took: time.Since(start)}
	if v.OK {
		v.Summary = okSummary
	} else {
		v.Summary = fmt.Sprintf("%d violation(s); first: %s", p.total, p.list[0])
	}
	return v
}

// TaskCheckpoint is what the store holds for one task in one checkpoint.
type TaskCheckpoint struct {
	// Value is the task's main inline payload (workload.MainKind).
	Value string `json:"value"`
	// HasManifest and Keys: the task's state manifest, as blob keys;
	// Refs the same manifest whole (history.ManifestRefs; nil: not
	// recorded).
	HasManifest bool     `json:"has_manifest"`
	Keys        []string `json:"keys,omitempty"`
	Refs        []string `json:"refs,omitempty"`
}

// EpochFinal is one epoch of a job at the end of the run.
type EpochFinal struct {
	Epoch       uint64     `json:"epoch"`
	Generation  uint64     `json:"generation"`
	State       string     `json:"state"`
	Pinned      bool       `json:"pinned"`
	Expected    int        `json:"expected"`
	Acked       int        `json:"acked"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Tasks holds, for retained and pinned checkpoints, each task's
	// checkpoint (restore of that epoch); for pending epochs the state
	// manifests acknowledged so far.
	Tasks map[string]TaskCheckpoint `json:"tasks,omitempty"`
	// Acks are the ack records the store holds for the epoch, whatever
	// its state (GET /v1/jobs/{job}/epochs/{epoch}), by task.
	Acks map[string]AckRecord `json:"acks"`
}

// AckRecord is the store's record of one task's ack of an epoch.
type AckRecord struct {
	Hash string `json:"hash"`
}

// JobFinal is a job at the end of the run.
type JobFinal struct {
	Generation      uint64       `json:"generation"`
	LatestCompleted uint64       `json:"latest_completed"`
	Epochs          []EpochFinal `json:"epochs"`
}

// BlobRecord is the store's record of a blob (GET /v1/blobs/{key}).
type BlobRecord struct {
	State string `json:"state"`
	Refs  uint64 `json:"refs"`
	// Job, Task and Generation are who asked for the upload slot.
	Job            string     `json:"job,omitempty"`
	Task           string     `json:"task,omitempty"`
	Generation     uint64     `json:"generation,omitempty"`
	LeaseUntil     *time.Time `json:"lease_until,omitempty"`
	UnreferencedAt *time.Time `json:"unreferenced_at,omitempty"`
	Err            string     `json:"err,omitempty"`
}

// MemberFinal is one member's view at the end.
type MemberFinal struct {
	ID           string   `json:"id"`
	Hash         string   `json:"hash"`
	Index        uint64   `json:"index"`
	HashErr      string   `json:"hash_err,omitempty"`
	FsckProblems []string `json:"fsck_problems,omitempty"`
	FsckErr      string   `json:"fsck_err,omitempty"`
	// LogFindings are suspicious log lines (panics, races).
	LogFindings []string `json:"log_findings,omitempty"`
}

// Final is what the runner collected after healing the cluster.
type Final struct {
	Jobs map[string]*JobFinal `json:"jobs"`
	// Others are the jobs the store holds that the workload did not
	// create (a fault's own: gc-crash-after-mark's garbage job), read
	// like Jobs, each epoch's tasks from its attempt. The history has none
	// of their operations: only the live set (LiveSet) reads them.
	Others map[string]*JobFinal `json:"others,omitempty"`
	// CollectErr is set when the final state could not be read.
	CollectErr string `json:"collect_err,omitempty"`
	// Bucket lists the keys in the bucket (metastore keys, prefix
	// stripped) after the final GC cycles, read from the S3 server
	// directly.
	Bucket    []string  `json:"bucket"`
	BucketErr string    `json:"bucket_err,omitempty"`
	ListedAt  time.Time `json:"listed_at"`
	// Records are the store's records of the bucket's keys that no
	// retained, pinned or pending checkpoint of Jobs references, read
	// after the final GC cycles.
	Records map[string]BlobRecord `json:"records,omitempty"`
	// GCRuns are the final GC cycles' outcomes; GCStart is when the first
	// began, Grace the members' GC grace period.
	GCRuns  []string      `json:"gc_runs,omitempty"`
	GCStart time.Time     `json:"gc_start"`
	Grace   time.Duration `json:"grace"`
	// HealthErr is set when the cluster did not become healthy after the
	// heal.
	HealthErr string        `json:"health_err,omitempty"`
	Members   []MemberFinal `json:"members"`
}

// Input is everything the checkers read.
type Input struct {
	Ops   []history.Op
	Final *Final
	// S3 is the proxy's request log; S3Prefix the prefix S3 keys carry
	// in it (metastore key K is S3Prefix+K).
	S3       []s3proxy.Request
	S3Prefix string
	// OutDir receives artifacts (the linearizability visualization).
	OutDir string
	// ClockSkew is the largest amount by which a member's clock was set
	// off the machine's during the run (0: clocks right).
	ClockSkew time.Duration
	// LinearizabilityTimeout bounds porcupine (default 2 minutes); a
	// timeout is a failure.
	LinearizabilityTimeout time.Duration
}

// Check runs every checker.
func Check(in *Input) []Verdict {
	return []Verdict{
		Linearizable(in),
		Acks(in),
		GCSafety(in),
		GCLiveness(in),
		Convergence(in),
		Logs(in),
	}
}

// Passed reports whether every verdict is OK.
func Passed(vs []Verdict) bool {
	for _, v := range vs {
		if !v.OK {
			return false
		}
	}
	return true
}

// opsByJob groups ops by job.
func opsByJob(ops []history.Op) map[string][]history.Op {
	out := map[string][]history.Op{}
	for _, o := range ops {
		if o.Job != "" {
			out[o.Job] = append(out[o.Job], o)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// sameManifest reports whether two manifests, as blob keys and whole
// (history.ManifestRefs), are the same state. Refs missing on either side
// (not recorded) compare the keys only.
func sameManifest(aKeys, aRefs, bKeys, bRefs []string) bool {
	if !sameKeys(aKeys, bKeys) {
		return false
	}
	return aRefs == nil || bRefs == nil || sameKeys(aRefs, bRefs)
}

func sameKeys(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a2 := append([]string(nil), a...)
	b2 := append([]string(nil), b...)
	sort.Strings(a2)
	sort.Strings(b2)
	return strings.Join(a2, "\x00") == strings.Join(b2, "\x00")
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func at(start, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return fmt.Sprintf("%.3fs", t.Sub(start).Seconds())
}
