package fsm

// The state machine's records: what the jobs, epochs, blobs and lineages
// buckets (schema.go) hold, one record per key. They are stored as
// MessagePack, through the methods records_msgp.go has generated from
// these declarations (field names from the json tags, times in UTC).
// Records written by releases before the binary encoding are JSON; both
// are read (decodeRecord), and Open rewrites the JSON ones once
// (encoding.go). Like every record of the state machine they are not
// exported: the package shows them as package wire's types (views.go), so
// how they are stored is not part of any answer. Regenerate after changing
// a type here:
//
//	go generate ./fsm/

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file records.go -o records_msgp.go -tests=false -io=false -unexported

//msgp:tag json
//msgp:timezone utc
//msgp:replace Duration with:int64
//msgp:replace epochState with:string
//msgp:replace blobState with:string
//msgp:replace Caps with:uint8

import "time"

// jobConfig is the configuration of a job as its record holds it.
type jobConfig struct {
	// Retained is the number of completed checkpoints kept; older ones are
	// subsumed unless pinned.
	Retained int `json:"retained,allownil"`
	// AckTimeout is how long an epoch may stay pending before the leader
	// aborts it.
	AckTimeout Duration `json:"ack_timeout"`
	// History is the number of ended epochs remembered for inspection.
	History int `json:"history"`
}

// jobRecord is a streaming job.
type jobRecord struct {
	ID     string    `json:"id"`
	Config jobConfig `json:"config"`
	// Generation is the generation of the current attempt; 0 before the
	// first attempt.
	Generation uint64 `json:"generation"`
	AttemptID  string `json:"attempt_id,omitempty"`
	// GenerationBase is the last generation of a deleted job of the same
	// name (jobTombstone.Generation), 0 for a job whose name was never
	// deleted: this job's generations start above it, and writes of it or
	// an older one are fenced. Generation equals it until the first
	// attempt.
	GenerationBase uint64 `json:"generation_base,omitempty"`
	// LastEpoch is the highest epoch ever begun.
	LastEpoch uint64 `json:"last_epoch"`
	// LatestCompleted is the newest completed epoch, 0 if none.
	LatestCompleted uint64 `json:"latest_completed"`
	// Pending lists the pending epochs, ascending.
	Pending []uint64 `json:"pending,allownil"`
	// Retained lists the completed epochs not subsumed (pinned ones
	// included), ascending.
	Retained []uint64 `json:"retained,allownil"`
	// Ended lists the aborted and subsumed epochs still remembered,
	// ascending by the time they ended.
	Ended []uint64 `json:"ended,allownil"`
	// RestoredAttempts counts the attempts that resumed from a checkpoint
	// (an attemptRecord.RestoredFrom above 0) among the attempts of generation
	// RestoresCountedFrom and later; absent means 0.
	RestoredAttempts uint64 `json:"restored_attempts,omitempty"`
	// RestoresCountedFrom is the first generation whose start recorded the
	// checkpoint it resumed from (attempt-start version 2); absent (0) while
	// no start has. Attempts of older generations started before the store
	// recorded restores: the count does not know them.
	RestoresCountedFrom uint64    `json:"restores_counted_from,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	CreateIndex         uint64    `json:"create_index"`
	ModifyIndex         uint64    `json:"modify_index"`
}

// epochRecord is one checkpoint of a job.
type epochRecord struct {
	Job        string     `json:"job"`
	Epoch      uint64     `json:"epoch"`
	Generation uint64     `json:"generation"`
	State      epochState `json:"state"`
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

// blobRecord is an object in the object store, as the metastore knows it.
type blobRecord struct {
	// Key is the blob's key. The stored value leaves it empty since
	// schema version 7: it is the bucket's key (encodeRecord empties it,
	// decodeBlob sets it).
	Key  string `json:"key"`
	Job  string `json:"job"`
	Task string `json:"task,omitempty"`
	// Generation is the attempt whose upload slot created the intent (0:
	// recorded before intent-create version 2). An ack of another attempt
	// cannot commit it.
	Generation uint64    `json:"generation,omitempty"`
	State      blobState `json:"state"`
	Size       uint64    `json:"size"`
	// Checksum is what the worker declared when it committed the blob.
	Checksum string `json:"checksum,omitempty"`
	// Observed is what the object store reported for the blob when the
	// leader looked right after its ack (observe.go); nil: not yet.
	Observed *observation `json:"observed,omitempty"`
	// AwaitingObservation: a live blob an ack committed (task-ack version
	// 2) whose object the leader has not looked at yet (observe.go); the
	// state machine keeps these keys in memory too (unobserved.go).
	AwaitingObservation bool `json:"awaiting_observation,omitempty"`
	// Flagged: the observed object did not match the declared size, or
	// was missing. Restore plans list flagged blobs.
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

	// counted is what the record counts in its job's usage as stored
	// (quota.go): set when it is read, moved when it is written.
	counted JobUsage `json:"-"`
	// countedAwaiting is AwaitingObservation as stored (unobserved.go):
	// set when the record is read, moved when it is written.
	countedAwaiting bool `json:"-"`
	// batch and batchIndex name the upload batch and the key's index in
	// it of an intent read from a batch (upload_batches.go), which has no
	// record of its own until it is committed or expires.
	batch      string `json:"-"`
	batchIndex int    `json:"-"`
	// signed: an intent read from a signed upload slot
	// (upload_slots.go), which has no record until an ack commits it.
	signed bool `json:"-"`
}

// observation is what the object store reported for a blob after its ack.
type observation struct {
	// Size and ETag as a HEAD request answered them (ETag without quotes;
	// empty from a store that has none, the local directory store).
	Size uint64 `json:"size"`
	ETag string `json:"etag,omitempty"`
	// Missing: the object store had no object under the key.
	Missing bool `json:"missing,omitempty"`
	// At is the leader's clock when it proposed the observation.
	At time.Time `json:"at"`
}

// lineageRecord is one chain of a task's manifests.
type lineageRecord struct {
	ID         uint64 `json:"id"`
	Job        string `json:"job"`
	Task       string `json:"task"`
	Generation uint64 `json:"generation"`
	// LastEpoch is the epoch of the latest ack applied to the lineage.
	LastEpoch uint64 `json:"last_epoch"`
	// Epochs lists the live epochs (pending, retained, pinned) the
	// lineage's task acknowledged, ascending.
	Epochs []uint64 `json:"epochs,allownil"`
	// Released marks a lineage no attempt extends any more (set by
	// attempt-start version 3, releaseHeads): it holds exactly what its
	// live epochs hold, is rolled back to the newest as newer ones leave,
	// and is deleted with the last. A lineage an attempt continues again
	// (the first ack of an attempt, from its newest epoch) is no longer
	// released.
	Released bool `json:"released,omitempty"`
}

type record struct {
	Length   uint64 `json:"length"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	Added    uint64 `json:"added"`
	Dropped  uint64 `json:"dropped,omitempty"`
	// CRC32C is the checksum the ack declared for the range (empty: none).
	CRC32C string `json:"crc32c,omitempty"`
}

// uploadBatch is the intent of one upload-slot request (intent-create
// version 4): Count keys of one task directory, held by one lease
// (upload_batches.go). Its keys have no blob record until an ack commits
// one (Used) or the lease ends (the unused ones become expired records).
type uploadBatch struct {
	// ID is the batch's part of every key: 32 hex digits, the leader's
	// clock in nanoseconds then 8 random bytes.
	ID         string    `json:"id"`
	Job        string    `json:"job"`
	Task       string    `json:"task,omitempty"`
	Generation uint64    `json:"generation"`
	Count      int       `json:"count"`
	LeaseUntil time.Time `json:"lease_until"`
	CreatedAt  time.Time `json:"created_at"`
	// Used has bit i set once an ack committed key i (a bitmap, key 0 in
	// the lowest bit of the first byte). A used key is never an intent
	// again, even after its blob record was collected and purged.
	Used        []byte `json:"used,allownil"`
	ModifyIndex uint64 `json:"modify_index"`
}

// taskRecord is one task of an attempt.
type taskRecord struct {
	ID   string `json:"id"`
	Caps Caps   `json:"capabilities"`
}

// attemptRecord is one (re)start of a job.
type attemptRecord struct {
	Job        string    `json:"job"`
	Generation uint64    `json:"generation"`
	AttemptID  string    `json:"attempt_id"`
	StartedAt  time.Time `json:"started_at"`
	Tasks      int       `json:"tasks"`
	Expected   int       `json:"expected"`
	// ContentHash identifies the attempt's task set, so a retried start is
	// recognised and a different one with the same id is a conflict.
	ContentHash string `json:"content_hash"`
	// RestoredFrom is the checkpoint the attempt resumed from, recorded as
	// it started (attempt-start version 2): the job's latest completed
	// epoch at that moment, the one a restore that names no epoch or
	// savepoint reads; 0 when the job had none (a fresh start). Absent
	// (nil) for attempts started by an entry of version 1: unknown.
	RestoredFrom *uint64 `json:"restored_from,omitempty"`
	Index        uint64  `json:"index"`
}

// ackRecord is one task's acknowledgement of an epoch.
type ackRecord struct {
	Task string    `json:"task"`
	At   time.Time `json:"at"`
	// Delay is the time from the epoch's begin to this ack.
	Delay Duration `json:"delay"`
	// Sizes holds the inline payload size per kind acknowledged.
	Sizes       kindSizes `json:"sizes"`
	ContentHash string    `json:"content_hash"`
	Index       uint64    `json:"index"`
	// Lineage holds the task's manifest for this epoch (0: no manifest).
	Lineage uint64 `json:"lineage,omitempty"`
}
