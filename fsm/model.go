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
