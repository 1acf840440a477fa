package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Limits of the model. They are part of the API contract (docs/openapi.json).
const (
	// MaxInlinePayload is the largest inline payload one task may store for
	// one kind in one epoch. Source offsets and small sink state fit; larger
	// state belongs in the object store.
	MaxInlinePayload = 16 << 10
	// MaxPendingEpochs bounds the epochs of one job pending at once.
	MaxPendingEpochs = 64
	// MaxEpoch is the largest epoch number: 2^63-1, the largest int64
	// (docs/openapi.json declares epochs int64, and Java and JavaScript
	// clients cannot count past it). A job whose epoch reached 2^64-1
	// could never begin another one.
	MaxEpoch = math.MaxInt64
	// MaxTasks bounds the tasks of one attempt.
	MaxTasks = 10000
	// MaxReasonLen bounds free-text reasons and savepoint names.
	MaxReasonLen = 256
	// DefaultRetained is the number of completed checkpoints a job keeps when
	// its config does not say.
	DefaultRetained = 1
	// DefaultAckTimeout is the time an epoch may stay pending.
	DefaultAckTimeout = 10 * time.Minute
	// DefaultHistory is the number of ended (aborted or subsumed) epochs a
	// job remembers for inspection.
	DefaultHistory = 100
)

// IDPattern is the charset of job, task, member and attempt ids.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Kind is one kind of checkpointed data a task may have.
type Kind string

const (
	KindInput  Kind = "input"
	KindState  Kind = "state"
	KindOutput Kind = "output"
)

// Kinds lists every kind, in a fixed order.
var Kinds = []Kind{KindInput, KindState, KindOutput}

// Capability is one capability flag of a task.
type Capability string

const (
	CapInput       Capability = "input"
	CapState       Capability = "state"
	CapOutput      Capability = "output"
	CapIncremental Capability = "incremental"
)

// Caps is the set of capability flags of a task, as a bit set.
type Caps uint8

const (
	capInputBit Caps = 1 << iota
	capStateBit
	capOutputBit
	capIncrementalBit
)

var capBits = []struct {
	name Capability
	bit  Caps
}{
	{CapInput, capInputBit}, {CapState, capStateBit}, {CapOutput, capOutputBit}, {CapIncremental, capIncrementalBit},
}

// capAll is every defined flag; other bits are invalid.
const capAll = capInputBit | capStateBit | capOutputBit | capIncrementalBit

// Valid reports whether the set holds only defined flags, and incremental
// only with state.
func (c Caps) Valid() bool {
	return c&^capAll == 0 && (!c.Incremental() || c.Has(KindState))
}

// Has reports whether the task checkpoints data of kind k.
func (c Caps) Has(k Kind) bool {
	switch k {
	case KindInput:
		return c&capInputBit != 0
	case KindState:
		return c&capStateBit != 0
	case KindOutput:
		return c&capOutputBit != 0
	}
	return false
}

// Incremental reports whether the task commits incremental deltas.
func (c Caps) Incremental() bool { return c&capIncrementalBit != 0 }

// Expected reports whether an epoch waits for this task's ack: a task is
// expected when it checkpoints at least one kind.
func (c Caps) Expected() bool { return c&(capInputBit|capStateBit|capOutputBit) != 0 }

// MarshalJSON writes the flags as a sorted list of names.
func (c Caps) MarshalJSON() ([]byte, error) {
	names := []string{}
	for _, b := range capBits {
		if c&b.bit != 0 {
			names = append(names, string(b.name))
		}
	}
	return json.Marshal(names)
}

// UnmarshalJSON reads a list of capability names.
func (c *Caps) UnmarshalJSON(data []byte) error {
	var names []string
	if err := json.Unmarshal(data, &names); err != nil {
		return fmt.Errorf("capabilities must be a list of names: %w", err)
	}
	parsed, err := ParseCaps(names)
	if err != nil {
		return err
	}
	*c = parsed
	return nil
}

// ParseCaps parses capability names. Unknown and repeated names are errors,
// and incremental requires state.
func ParseCaps(names []string) (Caps, error) {
	var c Caps
	for _, n := range names {
		found := false
		for _, b := range capBits {
			if Capability(n) == b.name {
				if c&b.bit != 0 {
					return 0, fmt.Errorf("capability %q listed twice", n)
				}
				c |= b.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown capability %q (want input, state, output, incremental)", n)
		}
	}
	if c.Incremental() && !c.Has(KindState) {
		return 0, fmt.Errorf("capability incremental requires state")
	}
	return c, nil
}

// Duration is a time.Duration written in JSON as a Go duration string.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

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
		return ruleErr(CodeInvalid, "config.retained", "must be between 1 and 1000, got %d", c.Retained)
	}
	if time.Duration(c.AckTimeout) < 100*time.Millisecond || time.Duration(c.AckTimeout) > 7*24*time.Hour {
		return ruleErr(CodeInvalid, "config.ack_timeout", "must be between 100ms and 168h, got %s", time.Duration(c.AckTimeout))
	}
	if c.History < 1 || c.History > 10000 {
		return ruleErr(CodeInvalid, "config.history", "must be between 1 and 10000, got %d", c.History)
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

func checkID(field, v string) error {
	if !IDPattern.MatchString(v) {
		return ruleErr(CodeInvalid, field, "%q must match %s", v, IDPattern)
	}
	return nil
}

func checkText(field, v string) error {
	if len(v) > MaxReasonLen {
		return ruleErr(CodeInvalid, field, "longer than %d bytes", MaxReasonLen)
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }) {
		return ruleErr(CodeInvalid, field, "contains control or invalid characters")
	}
	return nil
}

func sortedKinds(m map[Kind][]byte) []Kind {
	ks := make([]Kind, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
