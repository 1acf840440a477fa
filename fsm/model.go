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
func (j *jobRecord) hasAttempt() bool { return j.Generation > j.GenerationBase }

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

// epochState is the lifecycle state of an epoch (wire.EpochState shows
// it).
type epochState string

const (
	epochPending   epochState = "pending"
	epochCompleted epochState = "completed"
	epochAborted   epochState = "aborted"
	epochSubsumed  epochState = "subsumed"
)

// ackRecord is one task's acknowledgement of an epoch.
type ackRecord struct {
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

// memberRecord is a cluster member's record, replicated so any member can
// find the leader's HTTP address (Members shows it as a Member).
type memberRecord struct {
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
