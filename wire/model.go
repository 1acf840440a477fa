package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// Limits of the API (docs/openapi.json). The state machine enforces the
// same numbers when it applies a command.
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
	// MaxIntents bounds the upload slots of one request and the blobs one
	// ack commits.
	MaxIntents = 1000
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

// CheckID refuses an id that does not match IDPattern; field names it.
func CheckID(field, v string) error {
	if !ValidID(v) {
		return Errorf(CodeInvalid, field, "%q must match %s", v, IDPattern)
	}
	return nil
}

// ValidID reports whether v matches IDPattern, written out as a loop:
// every request and every command checks its ids, and the expression
// cost more than the rest of the check.
func ValidID(v string) bool {
	if len(v) == 0 || len(v) > 128 || !idStart(v[0]) {
		return false
	}
	for i := 1; i < len(v); i++ {
		if c := v[i]; !idStart(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// idStart reports whether c is in [A-Za-z0-9], what an id starts with.
func idStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// CheckText refuses free text (a reason, a savepoint name) longer than
// MaxReasonLen or holding control or invalid characters.
func CheckText(field, v string) error {
	if len(v) > MaxReasonLen {
		return Errorf(CodeInvalid, field, "longer than %d bytes", MaxReasonLen)
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }) {
		return Errorf(CodeInvalid, field, "contains control or invalid characters")
	}
	return nil
}

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

// Caps is the set of capability flags of a task, as a bit set. In JSON it
// is a sorted list of names.
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

// TokenHash is the form in which the cluster knows a token secret: hex
// SHA-256.
func TokenHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
