package fsm

import (
	"sort"
	"time"

	"github.com/metastore/metastore/wire"
)

// The value types of records and commands (kinds, capability sets,
// durations) are those of the API, declared in package wire with their
// JSON forms and the limits and checks of their shape.
type (
	Kind       = wire.Kind
	Capability = wire.Capability
	Caps       = wire.Caps
	Duration   = wire.Duration
)

// JobConfig is the configuration of a job as records and commands hold it.
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

// WithDefaults fills unset fields (wire.JobConfig.WithDefaults).
func (c JobConfig) WithDefaults() JobConfig { return JobConfig(wire.JobConfig(c).WithDefaults()) }

// Validate checks a config after defaults (wire.JobConfig.Validate).
func (c JobConfig) Validate() error { return wire.JobConfig(c).Validate() }

// Job is a streaming job.
type Job struct {
	ID     string    `json:"id"`
	Config JobConfig `json:"config"`
	// Generation is the generation of the current attempt; 0 before the
	// first attempt.
	Generation uint64 `json:"generation"`
	AttemptID  string `json:"attempt_id,omitempty"`
	// GenerationBase is the last generation of a deleted job of the same
	// name (JobTombstone.Generation), 0 for a job whose name was never
	// deleted: this job's generations start above it, and writes of it or
	// an older one are fenced. Generation equals it until the first
	// attempt.
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
	// checkpoint it resumed from (attempt-start version 2); absent (0) while
	// no start has. Attempts of older generations started before the store
	// recorded restores: the count does not know them.
	RestoresCountedFrom uint64    `json:"restores_counted_from,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	CreateIndex         uint64    `json:"create_index"`
	ModifyIndex         uint64    `json:"modify_index"`
}

// hasAttempt reports whether the job has started an attempt of its own.
func (j *Job) hasAttempt() bool { return j.Generation > j.GenerationBase }

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
	// RestoredFrom is the checkpoint the attempt resumed from, recorded as
	// it started (attempt-start version 2): the job's latest completed
	// epoch at that moment, the one a restore that names no epoch or
	// savepoint reads; 0 when the job had none (a fresh start). Absent
	// (nil) for attempts started by an entry of version 1: unknown.
	RestoredFrom *uint64 `json:"restored_from,omitempty"`
	Index        uint64  `json:"index"`
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

// Member is a cluster member's record, replicated so any member can find
// the leader's HTTP address.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

func sortedKinds(m map[Kind][]byte) []Kind {
	ks := make([]Kind, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
