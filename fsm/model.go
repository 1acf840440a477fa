package fsm

import (
	"sort"

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

// epochState is the lifecycle state of an epoch (wire.EpochState shows
// it).
type epochState string

const (
	epochPending   epochState = "pending"
	epochCompleted epochState = "completed"
	epochAborted   epochState = "aborted"
	epochSubsumed  epochState = "subsumed"
)

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
