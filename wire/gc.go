// The garbage collector's answers (GET /v1/gc, POST /v1/gc/run, GET
// /v1/jobs/{job}/verify).

package wire

import "time"

// GCRunOptions modify one cycle started with RunOnce.
type GCRunOptions struct {
	// DryRun computes what the cycle would do and changes nothing: no
	// command is proposed, no object deleted.
	DryRun bool `json:"dry_run"`
	// Orphans runs the orphan sweep in this cycle even if it is not due
	// (even when the periodic sweep is disabled).
	Orphans bool `json:"orphans"`
}

// GCReport is what one cycle did. In a dry run the counts are what the cycle
// would have done.
type GCReport struct {
	DryRun bool `json:"dry_run"`
	// ResumeOnly marks the pass Run makes when it starts: it only finishes
	// the deletes a previous leader (or cycle) left deleting.
	ResumeOnly bool      `json:"resume_only,omitempty"`
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	Duration   Duration  `json:"duration"`
	// ExpiredIntents is the number of intents whose lease ended, turned into
	// candidates.
	ExpiredIntents int `json:"expired_intents"`
	// MarksProposed counts the candidate keys proposed for marking; Marked
	// the keys the state machine marked deleting (a key referenced again
	// since the collector looked is left alone).
	MarksProposed int `json:"marks_proposed"`
	Marked        int `json:"marked"`
	// Deleted is the number of blobs deleted from the object store and
	// recorded gone, Resumed how many of them had been marked by an earlier
	// cycle or an earlier leader.
	Deleted int `json:"deleted"`
	Resumed int `json:"resumed"`
	// BytesFreed adds the recorded sizes of the blobs recorded gone and the
	// listed sizes of the orphans deleted. An upload whose intent expired
	// was never committed with a size and counts 0.
	BytesFreed uint64 `json:"bytes_freed"`
	// OrphanSweep tells whether the orphan sweep ran; OrphansListed is the
	// number of objects it listed, OrphansDeleted those it deleted (unknown
	// to the state machine, older than OrphanGrace).
	OrphanSweep    bool `json:"orphan_sweep"`
	OrphansListed  int  `json:"orphans_listed"`
	OrphansDeleted int  `json:"orphans_deleted"`
	// Purged is the number of tombstones forgotten.
	Purged int `json:"purged"`
	// DeleteErrors counts keys whose delete failed or timed out; they stay
	// deleting and are retried by the next cycle.
	DeleteErrors int `json:"delete_errors"`
	// Errors counts the problems met; Error is the first one, or the one
	// that ended the cycle.
	Errors int    `json:"errors"`
	Error  string `json:"error,omitempty"`
	// Dry runs only: up to DryRunSample keys that would be deleted, and
	// orphans that would be swept. Truncated is set when a list stopped at
	// its bound, so the counts are lower bounds.
	Candidates []string `json:"candidates,omitempty"`
	Orphans    []string `json:"orphans,omitempty"`
	Truncated  bool     `json:"truncated,omitempty"`
}

// GCTotals add up the reports of the cycles run since the collector was
// created (dry runs excluded).
type GCTotals struct {
	Since          time.Time `json:"since"`
	Cycles         int64     `json:"cycles"`
	FailedCycles   int64     `json:"failed_cycles"`
	ExpiredIntents int64     `json:"expired_intents"`
	MarksProposed  int64     `json:"marks_proposed"`
	Marked         int64     `json:"marked"`
	Deleted        int64     `json:"deleted"`
	BytesFreed     uint64    `json:"bytes_freed"`
	OrphanSweeps   int64     `json:"orphan_sweeps"`
	OrphansDeleted int64     `json:"orphans_deleted"`
	Purged         int64     `json:"purged"`
	DeleteErrors   int64     `json:"delete_errors"`
	Errors         int64     `json:"errors"`
}

// GCStatusConfig is the configuration in force, for GCStatus.
type GCStatusConfig struct {
	Interval      Duration `json:"interval"`
	Grace         Duration `json:"grace"`
	BatchSize     int      `json:"batch_size"`
	Rate          float64  `json:"rate"`
	TombstoneTTL  Duration `json:"tombstone_ttl"`
	OrphanGrace   Duration `json:"orphan_grace"`
	OrphanEvery   Duration `json:"orphan_every"`
	Prefix        string   `json:"prefix"`
	DeleteTimeout Duration `json:"delete_timeout"`
}

// GCRecentRuns is the number of cycles GCStatus.RecentRuns keeps.
const GCRecentRuns = 60

// GCRunSample is one finished cycle in GCStatus.RecentRuns: what it did, and
// the counts of candidates and deleting blobs it left (-1: not read).
type GCRunSample struct {
	Finished       time.Time `json:"finished"`
	Outcome        string    `json:"outcome"`
	Marked         int       `json:"marked"`
	Deleted        int       `json:"deleted"`
	BytesFreed     uint64    `json:"bytes_freed"`
	OrphanSweep    bool      `json:"orphan_sweep"`
	OrphansDeleted int       `json:"orphans_deleted"`
	Candidates     int       `json:"candidates"`
	Deleting       int       `json:"deleting"`
}

// GCStatus is the collector's state, for GET /v1/gc.
type GCStatus struct {
	// Enabled is true for every collector (a member without one reports
	// false itself).
	Enabled bool `json:"enabled"`
	// Running is true while a cycle (of Run or RunOnce) is in progress.
	Running bool `json:"running"`
	// Leading is true while Run is active: this member leads and collects.
	Leading bool `json:"leading"`
	// LastRun is the report of the last cycle (nil before the first). Dry
	// runs are not recorded.
	LastRun *GCReport `json:"last_run"`
	// RecentRuns lists the latest GCRecentRuns cycles of this member, oldest
	// first (dry runs are not recorded).
	RecentRuns []GCRunSample `json:"recent_runs"`
	Totals     GCTotals      `json:"totals"`
	// PendingCandidates counts the unreferenced blobs waiting for the
	// collector, grace period not yet over included; Deleting the blobs
	// marked deleting whose delete is not confirmed. Both read the local
	// state machine and stop counting at StatusCountLimit.
	PendingCandidates int `json:"pending_candidates"`
	Deleting          int `json:"deleting"`
	// LastOrphanSweep is when the last orphan sweep started.
	LastOrphanSweep *time.Time `json:"last_orphan_sweep,omitempty"`
	// OrphanSweepRetryAt is set while an orphan sweep of this member that
	// did not finish (its listing or a delete failed) waits to be tried
	// again: from a minute after it, doubling with each failed sweep in a
	// row, up to the sweep's period.
	OrphanSweepRetryAt *time.Time `json:"orphan_sweep_retry_at,omitempty"`
	// Store names the object store.
	Store  string         `json:"store"`
	Config GCStatusConfig `json:"config"`
	// StatusError is set when the counts could not be read.
	StatusError string `json:"status_error,omitempty"`
}

// MissingBlob is a blob a retained or pinned checkpoint references that the
// object store does not have.
type MissingBlob struct {
	Job    string `json:"job"`
	Epoch  uint64 `json:"epoch"`
	Task   string `json:"task"`
	Key    string `json:"key"`
	Pinned bool   `json:"pinned,omitempty"`
}

// ChangedBlob is a blob a retained or pinned checkpoint references whose
// object is not the one its ack committed: its size or ETag differs from
// what the leader observed right after the ack (or, before that
// observation, its size from the declared one), or the observation already
// flagged it.
type ChangedBlob struct {
	Job    string `json:"job"`
	Epoch  uint64 `json:"epoch"`
	Task   string `json:"task"`
	Key    string `json:"key"`
	Pinned bool   `json:"pinned,omitempty"`
	// DeclaredSize is the size the ack committed; ObservedSize and
	// ObservedETag what the object store reported right after it (absent:
	// not observed yet).
	DeclaredSize uint64  `json:"declared_size"`
	ObservedSize *uint64 `json:"observed_size,omitempty"`
	ObservedETag string  `json:"observed_etag,omitempty"`
	// Size and ETag are what the object store reports now.
	Size int64  `json:"size"`
	ETag string `json:"etag,omitempty"`
	// Mismatches names each difference found, one sentence each: the size
	// now against the observed (or declared) size, the ETag now against the
	// observed one, and what the observation after the ack found.
	Mismatches []string `json:"mismatches"`
}

// VerifyError is a blob whose HEAD failed for another reason than its
// absence: Verify could not tell.
type VerifyError struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Job string `json:"job"`
	// Index is the state machine index the references were read at.
	Index uint64 `json:"index"`
	// References counts (epoch, task, blob) references; Blobs the distinct
	// blobs checked with a HEAD request.
	References int `json:"references"`
	Blobs      int `json:"blobs"`
	// Missing lists every reference to a missing blob, by epoch, task and
	// key.
	Missing []MissingBlob `json:"missing"`
	// Changed lists every reference to a blob whose object changed since
	// its ack, or never matched it.
	Changed  []ChangedBlob `json:"changed"`
	Errors   []VerifyError `json:"errors"`
	Duration Duration      `json:"duration"`
}

// OK reports whether every referenced blob was found, as its ack committed
// it.
func (r *VerifyReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Changed) == 0 && len(r.Errors) == 0
}
