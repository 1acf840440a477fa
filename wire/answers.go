package wire

import (
	"strings"
	"time"

	"github.com/metastore/metastore/manifests"
)

// JobConfig is the configuration of a job.
type JobConfig struct {
	// Retained is the number of completed checkpoints kept; older ones are
	// subsumed unless pinned.
	Retained int `json:"retained"`
	// AckTimeout is how long an epoch may stay pending before the leader
	// aborts it.
	AckTimeout Duration `json:"ack_timeout"`
	// History is the number of ended epochs remembered for inspection.
	History int `json:"history"`
}

// WithDefaults fills unset fields.
func (c JobConfig) WithDefaults() JobConfig {
	if c.Retained == 0 {
		c.Retained = DefaultRetained
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = Duration(DefaultAckTimeout)
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	return c
}

// Validate checks a config after defaults.
func (c JobConfig) Validate() error {
	if c.Retained < 1 || c.Retained > 1000 {
		return Errorf(CodeInvalid, "config.retained", "must be between 1 and 1000, got %d", c.Retained)
	}
	if time.Duration(c.AckTimeout) < 100*time.Millisecond || time.Duration(c.AckTimeout) > 7*24*time.Hour {
		return Errorf(CodeInvalid, "config.ack_timeout", "must be between 100ms and 168h, got %s", time.Duration(c.AckTimeout))
	}
	if c.History < 1 || c.History > 10000 {
		return Errorf(CodeInvalid, "config.history", "must be between 1 and 10000, got %d", c.History)
	}
	return nil
}

// Job is a streaming job.
type Job struct {
	ID     string    `json:"id"`
	Config JobConfig `json:"config"`
	// Generation is the generation of the current attempt; 0 before the
	// first attempt.
	Generation uint64 `json:"generation"`
	AttemptID  string `json:"attempt_id,omitempty"`
	// GenerationBase is the last generation of a deleted job of the same
	// name: this job's generations start above it (generation equals it
	// until the first attempt). Absent (0) when the name was never deleted.
	GenerationBase uint64 `json:"generation_base,omitempty"`
	// LastEpoch is the highest epoch ever begun.
	LastEpoch uint64 `json:"last_epoch"`
	// LatestCompleted is the newest completed epoch, 0 if none.
	LatestCompleted uint64 `json:"latest_completed"`
	// Pending lists the pending epochs, ascending.
	Pending []uint64 `json:"pending"`
	// Retained lists the completed epochs not subsumed (pinned ones
	// included), ascending.
	Retained []uint64 `json:"retained"`
	// Ended lists the aborted and subsumed epochs still remembered,
	// ascending by the time they ended.
	Ended []uint64 `json:"ended"`
	// RestoredAttempts counts the attempts that resumed from a checkpoint
	// (an Attempt.RestoredFrom above 0) among the attempts of generation
	// RestoresCountedFrom and later; absent means 0.
	RestoredAttempts uint64 `json:"restored_attempts,omitempty"`
	// RestoresCountedFrom is the first generation whose start recorded the
	// checkpoint it resumed from; absent (0) while no start has.
	RestoresCountedFrom uint64    `json:"restores_counted_from,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	CreateIndex         uint64    `json:"create_index"`
	ModifyIndex         uint64    `json:"modify_index"`
}

// JobDeletion is the answer to a job delete: what remains of the deleted
// job (its tombstone). A repeated delete answers the same.
type JobDeletion struct {
	Job string `json:"job"`
	// Generation is the deleted job's last attempt generation: its writers
	// are answered job_deleted, and a job created again under the name
	// starts above it.
	Generation uint64 `json:"generation"`
	// LastEpoch is the highest epoch the deleted job began.
	LastEpoch uint64 `json:"last_epoch"`
	// Forced: the delete was forced (?force=true).
	Forced bool `json:"forced"`
	// PinsReleased lists the savepoints a forced delete released.
	PinsReleased []PinRef `json:"pins_released"`
	// LineagesReleased counts the task manifests whose references were
	// dropped; IntentsExpired the upload intents ended.
	LineagesReleased int       `json:"lineages_released"`
	IntentsExpired   int       `json:"intents_expired"`
	DeletedAt        time.Time `json:"deleted_at"`
	// Index is the Raft index of the delete.
	Index uint64 `json:"index"`
}

// PinRef names a savepoint: its epoch and pin name.
type PinRef struct {
	Epoch uint64 `json:"epoch"`
	Name  string `json:"name,omitempty"`
}

// Task is one task of an attempt.
type Task struct {
	ID   string `json:"id"`
	Caps Caps   `json:"capabilities"`
}

// Attempt is one (re)start of a job.
type Attempt struct {
	Job        string    `json:"job"`
	Generation uint64    `json:"generation"`
	AttemptID  string    `json:"attempt_id"`
	StartedAt  time.Time `json:"started_at"`
	Tasks      int       `json:"tasks"`
	Expected   int       `json:"expected"`
	// ContentHash identifies the attempt's task set, so a retried start is
	// recognised and a different one with the same id is a conflict.
	ContentHash string `json:"content_hash"`
	// RestoredFrom is the checkpoint the attempt resumed from: the job's
	// latest completed epoch as it started (0 for a fresh start); absent
	// for attempts started before the store recorded it.
	RestoredFrom *uint64 `json:"restored_from,omitempty"`
	Index        uint64  `json:"index"`
}

// AttemptDetail is an attempt with its task set.
type AttemptDetail struct {
	Attempt
	TaskList []Task `json:"task_list"`
}

// AttemptEntry is one attempt of a list, with its task set when asked.
type AttemptEntry struct {
	Attempt
	TaskList []Task `json:"task_list,omitempty"`
}

// AttemptList is the attempts of a job the store keeps.
type AttemptList struct {
	// Attempts holds the newest kept attempts, newest first.
	Attempts []AttemptEntry `json:"attempts"`
	// Kept counts every kept attempt (Attempts may hold fewer: a limit).
	Kept int `json:"kept"`
}

// EpochState is the lifecycle state of an epoch.
type EpochState string

const (
	EpochPending   EpochState = "pending"
	EpochCompleted EpochState = "completed"
	EpochAborted   EpochState = "aborted"
	EpochSubsumed  EpochState = "subsumed"
)

// Epoch is one checkpoint of a job.
type Epoch struct {
	Job        string     `json:"job"`
	Epoch      uint64     `json:"epoch"`
	Generation uint64     `json:"generation"`
	State      EpochState `json:"state"`
	BeganAt    time.Time  `json:"began_at"`
	Deadline   time.Time  `json:"deadline"`
	// CompletedAt is set when the epoch completed, EndedAt when it was
	// aborted or subsumed.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Expected    int        `json:"expected"`
	Acked       int        `json:"acked"`
	// PayloadBytes is the total inline payload size of the acks.
	PayloadBytes int64  `json:"payload_bytes"`
	Pinned       bool   `json:"pinned"`
	PinName      string `json:"pin_name,omitempty"`
	CreateIndex  uint64 `json:"create_index"`
	ModifyIndex  uint64 `json:"modify_index"`
}

// Ack is one task's acknowledgement of an epoch.
type Ack struct {
	Task string    `json:"task"`
	At   time.Time `json:"at"`
	// Delay is the time from the epoch's begin to this ack.
	Delay Duration `json:"delay"`
	// Sizes holds the inline payload size per kind acknowledged.
	Sizes       map[Kind]int `json:"sizes"`
	ContentHash string       `json:"content_hash"`
	Index       uint64       `json:"index"`
	// Lineage holds the task's manifest for this epoch (0: no manifest).
	Lineage uint64 `json:"lineage,omitempty"`
}

// EpochDetail is an epoch with its per-task statistics.
type EpochDetail struct {
	Epoch
	// Acks lists the acknowledgements in the order they arrived.
	Acks []Ack `json:"acks"`
	// Stragglers lists the expected tasks that have not acknowledged.
	Stragglers []string `json:"stragglers"`
	// Duration is the time from begin to completion or end (to the last
	// ack while pending).
	Duration Duration `json:"duration"`
}

// AckResult is the answer to an ack: the epoch after it, and whether this
// ack completed it.
type AckResult struct {
	Ack       *Ack   `json:"ack"`
	Epoch     *Epoch `json:"epoch"`
	Completed bool   `json:"completed_by_this_ack"`
}

// AckBatchAnswer answers an AckBatchRequest: one result per ack, in the
// request's order.
type AckBatchAnswer struct {
	Results []AckBatchResult `json:"results"`
}

// AckBatchResult is the outcome of one ack of a batch: Status is the HTTP
// status the ack alone would have been answered with; Ack is its answer
// (Status 200) or Error its refusal.
type AckBatchResult struct {
	Status int        `json:"status"`
	Ack    *AckResult `json:"ack,omitempty"`
	Error  *Error     `json:"error,omitempty"`
}

// Restore answers, per kind and for a whole plan.
const (
	// RestoreRestored: the checkpoint holds data of this kind for the task.
	RestoreRestored = "restored"
	// RestoreNothing: the task did not have this capability in the
	// checkpoint; there is nothing to recover, and nothing to read.
	RestoreNothing = "nothing_to_recover"
	// RestoreNoPriorState: the checkpoint does not know the task (it is new
	// after a topology change), or the job has no completed checkpoint.
	RestoreNoPriorState = "no_prior_state"
	// RestoreNoCheckpoint (plan status only): the source job has no
	// completed checkpoint yet.
	RestoreNoCheckpoint = "no_checkpoint"
)

// KindRestore is the restore answer for one kind.
type KindRestore struct {
	Status  string `json:"status"`
	Payload []byte `json:"payload,omitempty"`
	// Manifest lists the blobs (ranges of objects) holding the task's
	// state, for a task that acknowledged with a manifest.
	Manifest *manifests.Manifest `json:"manifest,omitempty"`
	// Bytes is what the restore of this kind reads: the inline payload plus
	// the manifest's ranges.
	Bytes int `json:"bytes"`
}

// RestoreSource is the checkpoint a restore plan reads.
type RestoreSource struct {
	Job        string `json:"job"`
	Task       string `json:"task"`
	Epoch      uint64 `json:"epoch,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Pin        string `json:"pin,omitempty"`
}

// RestorePlan is what a task recovers from which checkpoint, and what
// reading it costs.
type RestorePlan struct {
	Job  string `json:"job"`
	Task string `json:"task"`
	// Status is restored (the checkpoint holds data of at least one kind
	// for the task), nothing_to_recover (the checkpoint knows the task, which
	// had no capability), no_prior_state (the checkpoint does not know the
	// task), or no_checkpoint (the source job has none).
	Status       string               `json:"status"`
	Source       RestoreSource        `json:"source"`
	Capabilities *Caps                `json:"capabilities,omitempty"`
	Kinds        map[Kind]KindRestore `json:"kinds"`
	// InlineBytes is the inline payload returned; ObjectStoreReads is the
	// number of object-store requests the restore needs (one ranged GET
	// per base and segment), ObjectStoreBytes the bytes they read.
	InlineBytes      int    `json:"inline_bytes"`
	ObjectStoreReads int    `json:"object_store_reads"`
	ObjectStoreBytes uint64 `json:"object_store_bytes"`
	// FlaggedBlobs lists the plan's blobs whose object did not match what
	// their ack declared when the leader observed the object store right
	// after the ack: a size that differs, or no object.
	FlaggedBlobs []FlaggedBlob `json:"flagged_blobs,omitempty"`
}

// RestoreAnswer is GET .../tasks/{task}/restore: the plan, and with
// authentication on the grants that admit reading its blobs.
type RestoreAnswer struct {
	*RestorePlan
	// ObjectGrants maps a blob key to the query (expires, sig) that admits
	// GET /v1/objects/{key} without a token.
	ObjectGrants map[string]string `json:"object_grants,omitempty"`
}

// Observation is what the object store reported for a blob after its ack.
type Observation struct {
	// Size and ETag as a HEAD request answered them (ETag without quotes;
	// empty from a store that has none).
	Size uint64 `json:"size"`
	ETag string `json:"etag,omitempty"`
	// Missing: the object store had no object under the key.
	Missing bool `json:"missing,omitempty"`
	// At is the leader's clock when it proposed the observation.
	At time.Time `json:"at"`
}

// FlaggedBlob is a blob whose object did not match its ack's declaration.
type FlaggedBlob struct {
	Key      string       `json:"key"`
	Declared uint64       `json:"declared_size"`
	Observed *Observation `json:"observed"`
}

// BlobState is the lifecycle state of a blob.
type BlobState string

const (
	// BlobIntent: a key handed to a worker for an upload, held by a lease.
	BlobIntent BlobState = "intent"
	// BlobLive: committed by an ack; Refs counts the manifests' references.
	BlobLive BlobState = "live"
	// BlobExpired: an intent whose lease ended before any ack committed it.
	BlobExpired BlobState = "expired"
	// BlobDeleting: marked for deletion; the object-store delete may be in
	// flight. Never referenced again.
	BlobDeleting BlobState = "deleting"
	// BlobGone: deleted from the object store; kept as a tombstone for a
	// while so late references are answered clearly.
	BlobGone BlobState = "gone"
)

// Blob is an object in the object store, as the metastore knows it.
type Blob struct {
	Key  string `json:"key"`
	Job  string `json:"job"`
	Task string `json:"task,omitempty"`
	// Generation is the attempt whose upload slot created the intent (0:
	// not recorded). An ack of another attempt cannot commit it.
	Generation uint64    `json:"generation,omitempty"`
	State      BlobState `json:"state"`
	Size       uint64    `json:"size"`
	// Checksum is what the worker declared when it committed the blob.
	Checksum string `json:"checksum,omitempty"`
	// Observed is what the object store reported for the blob when the
	// leader looked right after its ack; nil: not yet.
	Observed *Observation `json:"observed,omitempty"`
	// AwaitingObservation: an ack committed the blob and the leader has
	// not looked at its object yet; Observed follows.
	AwaitingObservation bool `json:"awaiting_observation,omitempty"`
	// Flagged: the observed object did not match the declared size, or
	// was missing.
	Flagged bool `json:"flagged,omitempty"`
	// Refs counts the manifest references (segments and bases, in every
	// lineage) to this blob.
	Refs       uint64     `json:"refs"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	// UnreferencedAt is when Refs last fell to zero (or the lease ended).
	UnreferencedAt *time.Time `json:"unreferenced_at,omitempty"`
	DeletingAt     *time.Time `json:"deleting_at,omitempty"`
	GoneAt         *time.Time `json:"gone_at,omitempty"`
	ModifyIndex    uint64     `json:"modify_index"`
}

// BlobStats counts blobs by state, and the bytes of each state.
type BlobStats struct {
	Count map[BlobState]int    `json:"count"`
	Bytes map[BlobState]uint64 `json:"bytes"`
	// Candidates is the number of unreferenced blobs waiting for the
	// collector.
	Candidates int `json:"candidates"`
	// LiveByJob counts the live blobs and their bytes by the job that
	// uploaded them.
	LiveByJob map[string]JobBlobs `json:"live_by_job"`
}

// JobBlobs is a count of blobs and their bytes.
type JobBlobs struct {
	Count int    `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// RefMismatch is a blob whose stored reference count differs from the
// count recomputed from the lineage records.
type RefMismatch struct {
	Key       string    `json:"key"`
	State     BlobState `json:"state,omitempty"`
	Stored    uint64    `json:"stored"`
	Recounted uint64    `json:"recounted"`
}

// FsckReport is the result of a consistency check of the reference counts.
type FsckReport struct {
	Index      uint64        `json:"index"`
	Blobs      int           `json:"blobs"`
	Records    int           `json:"records"`
	Lineages   int           `json:"lineages"`
	Mismatches []RefMismatch `json:"mismatches"`
	// Problems lists other inconsistencies (a record without its blob, a
	// referenced blob that is not live, a broken index, an epoch or attempt
	// a job names without its record).
	Problems []string `json:"problems"`
}

// OK reports whether the check found nothing wrong.
func (r *FsckReport) OK() bool { return len(r.Mismatches) == 0 && len(r.Problems) == 0 }

// Role is what a token may do.
type Role string

const (
	// RoleOperator may do everything.
	RoleOperator Role = "operator"
	// RoleWorker may touch only the jobs of its scope: one job, or every
	// job whose id starts with a prefix.
	RoleWorker Role = "worker"
)

// Token is an API token as the API shows it (never its hash); Secret is
// set only in the answer that creates it, the one time it is shown.
type Token struct {
	Accessor    string    `json:"accessor"`
	Role        Role      `json:"role"`
	Job         string    `json:"job,omitempty"`
	JobPrefix   string    `json:"job_prefix,omitempty"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	CreateIndex uint64    `json:"create_index"`
	Secret      string    `json:"secret,omitempty"`
}

// Covers reports whether the token's scope covers job.
func (t *Token) Covers(job string) bool {
	switch {
	case t.Role == RoleOperator:
		return true
	case t.Role != RoleWorker:
		return false
	case t.Job != "":
		return job == t.Job
	case t.JobPrefix != "":
		return strings.HasPrefix(job, t.JobPrefix)
	}
	return false
}

// Scope describes the token's scope for messages: "all jobs", `job "a"`,
// `jobs prefixed "team-"`.
func (t *Token) Scope() string {
	switch {
	case t.Role == RoleOperator:
		return "all jobs (operator)"
	case t.Job != "":
		return `job "` + t.Job + `"`
	default:
		return `jobs prefixed "` + t.JobPrefix + `"`
	}
}
