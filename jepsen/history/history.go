// Package history records what the consistency suite's clients did: every
// operation with its invocation and completion time, its arguments, what it
// observed and its outcome (ok, fail, unknown), plus the nemesis's events.
// The checkers (package jepsen/checker) read nothing else from the
// workload: a history saved as JSON can be checked again offline.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Outcome is how an operation ended.
type Outcome string

// Outcomes.
const (
	// OK: the store answered success.
	OK Outcome = "ok"
	// Fail: the operation certainly did not take effect (a 4xx answer, or
	// a refusal the client knows changed nothing).
	Fail Outcome = "fail"
	// Unknown: the operation may or may not have taken effect (timeouts,
	// outcome_unknown, a connection broken after the request was sent).
	Unknown Outcome = "unknown"
)

// Kind is the type of an operation.
type Kind string

// Operation kinds.
const (
	KindPutJob  Kind = "put-job"
	KindAttempt Kind = "attempt"
	KindBegin   Kind = "begin"
	KindAck     Kind = "ack"
	// KindZombieAck is an ack sent on purpose with a superseded
	// generation: it must never succeed.
	KindZombieAck Kind = "zombie-ack"
	KindAbort     Kind = "abort"
	KindAwait     Kind = "await"
	KindPin       Kind = "pin"
	KindUnpin     Kind = "unpin"
	KindUpload    Kind = "upload"
	// KindRead is a linearizable read of a job's latest completed
	// checkpoint (a restore plan of the job's source task).
	KindRead Kind = "read"
	// KindRestore is a task's restore with the reads of its state blobs.
	KindRestore  Kind = "restore"
	KindManifest Kind = "manifest"
	KindGCRun    Kind = "gc-run"
)

// Op is one operation of one client.
type Op struct {
	ID     int    `json:"id"`
	Client int    `json:"client"`
	Kind   Kind   `json:"kind"`
	Job    string `json:"job,omitempty"`
	Task   string `json:"task,omitempty"`
	Gen    uint64 `json:"gen,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// Member is the member a client bound to one member talked to.
	Member string `json:"member,omitempty"`

	// Value is the inline payload written (ack) or read (read, restore).
	Value string `json:"value,omitempty"`
	// Keys are blob keys: an ack's full state manifest after it (the keys
	// of every base and segment), an upload's key, a restore's or
	// manifest read's keys, a pin's checkpoint keys.
	Keys []string `json:"keys,omitempty"`
	// Refs is the manifest of Keys whole (ManifestRefs: every base and
	// segment with its range, checksum and sequence numbers), where Keys
	// is a state manifest; nil in a history written before it was
	// recorded.
	Refs []string `json:"refs,omitempty"`
	// Commits are the blob keys an ack commits (uploads becoming live).
	Commits []string `json:"commits,omitempty"`
	// HasManifest tells whether Keys of an ack or read is a state manifest.
	HasManifest bool `json:"has_manifest,omitempty"`
	// Key is one blob key: an upload's key, or the key whose read failed.
	Key string `json:"key,omitempty"`
	// Expires is an upload slot's lease end.
	Expires *time.Time `json:"expires,omitempty"`

	// ReadEpoch is the epoch a read observed (0: no completed checkpoint).
	ReadEpoch uint64 `json:"read_epoch,omitempty"`
	// Completed is an ack's completed_by_this_ack, or an await that saw
	// the epoch completed.
	Completed bool `json:"completed,omitempty"`
	// Hash is the content hash of an ok ack as the store answered it: the
	// ack record the store must hold for that slot until it forgets the
	// epoch.
	Hash string `json:"hash,omitempty"`
	// State is an await's or abort's observed epoch state.
	State string `json:"state,omitempty"`

	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
	Outcome  Outcome   `json:"outcome"`
	// Code is the API error code (or "transport", "timeout").
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	Note  string `json:"note,omitempty"`
}

// ManifestRefs lists every base and segment of m with its range, CRC32C and
// (a segment's) sequence numbers, sorted: two manifests are the same state
// exactly when their lists are equal. Keys compare only the blobs.
func ManifestRefs(m manifests.Manifest) []string {
	refs := make([]string, 0, len(m.Bases)+len(m.Segments))
	for _, b := range m.Bases {
		refs = append(refs, fmt.Sprintf("base %s@%d+%d crc %s", b.Key, b.Offset, b.Length, b.CRC32C))
	}
	for _, g := range m.Segments {
		refs = append(refs, fmt.Sprintf("segment %s@%d+%d crc %s seq %d-%d", g.Key, g.Offset, g.Length, g.CRC32C, g.FirstSeq, g.LastSeq))
	}
	sort.Strings(refs)
	return refs
}

// Done reports whether the operation completed (it has an outcome).
func (o *Op) Done() bool { return o.Outcome != "" }

// Event is a nemesis step.
type Event struct {
	Time   time.Time `json:"time"`
	Fault  string    `json:"fault"`
	Phase  string    `json:"phase"`
	Detail string    `json:"detail,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// History is the record of one run. It is safe for concurrent use.
type History struct {
	mu     sync.Mutex
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Ops    []*Op     `json:"ops"`
	Events []Event   `json:"events"`
}

// New returns an empty history starting now.
func New() *History { return &History{Start: time.Now()} }

// Invoke records the start of op (its ID and Invoke are set) and returns
// it; Finish records its end.
func (h *History) Invoke(op *Op) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.Ops)
	op.Invoke = time.Now()
	h.Ops = append(h.Ops, op)
	return op
}

// Finish records the completion of op with the outcome err implies for a
// mutation (mutation true) or a read.
func (h *History) Finish(op *Op, err error, mutation bool) {
	out, code := Classify(err, mutation)
	h.FinishAs(op, out, code, err)
}

// FinishAs records the completion of op with an explicit outcome.
func (h *History) FinishAs(op *Op, out Outcome, code string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Complete = time.Now()
	op.Outcome = out
	op.Code = code
	if err != nil {
		op.Error = err.Error()
	}
}

// AddEvent records a nemesis step.
func (h *History) AddEvent(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Events = append(h.Events, e)
}

// Snapshot returns copies of the operations, sorted by ID; operations
// still in flight get the outcome unknown and no completion time.
func (h *History) Snapshot() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.Ops))
	for i, o := range h.Ops {
		out[i] = *o
		if out[i].Outcome == "" {
			out[i].Outcome = Unknown
			out[i].Code = "in-flight"
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Counts are the numbers of operations by outcome.
type Counts struct {
	Total, OK, Fail, Unknown int
}

// Count counts ops by outcome.
func Count(ops []Op) Counts {
	var c Counts
	for _, o := range ops {
		c.Total++
		switch o.Outcome {
		case OK:
			c.OK++
		case Fail:
			c.Fail++
		default:
			c.Unknown++
		}
	}
	return c
}

// Save writes the history as JSON.
func (h *History) Save(path string) error {
	h.mu.Lock()
	events := append([]Event(nil), h.Events...)
	start, end := h.Start, h.End
	h.mu.Unlock()
	doc := struct {
		Start  time.Time `json:"start"`
		End    time.Time `json:"end"`
		Ops    []Op      `json:"ops"`
		Events []Event   `json:"events"`
	}{start, end, h.Snapshot(), events}
	raw, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// Load reads a history written by Save.
func Load(path string) (*History, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Start  time.Time `json:"start"`
		End    time.Time `json:"end"`
		Ops    []*Op     `json:"ops"`
		Events []Event   `json:"events"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return &History{Start: doc.Start, End: doc.End, Ops: doc.Ops, Events: doc.Events}, nil
}

// Classify maps a client error to an outcome and a code. For a read every
// failure is Fail (a read changes nothing). For a mutation, only answers
// that prove the request was not applied are Fail: a 4xx API error, or
// the client's ErrUnavailable (every attempt was refused before it could
// take effect), or the caller's context error alone (the call ended before
// its request went out). Everything else, ErrOutcomeUnknown (with or
// without the caller's context error), 5xx answers other than those, an
// error the client does not describe, is Unknown.
func Classify(err error, mutation bool) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	code := "error"
	var ae *client.APIError
	if errors.As(err, &ae) {
		code = string(ae.Code)
	}
	var re *client.RetryError
	if errors.As(err, &re) {
		if re.Unknown {
			code = string(wire.CodeOutcomeUnknown)
		} else {
			code = string(wire.CodeUnavailable)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if code == "error" {
			code = "timeout"
		}
	}
	if !mutation {
		return Fail, code
	}
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		return Unknown, code
	case re == nil && ae == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// The client answers the caller's context error alone only for
		// a call that ended before its request went out (an ack still
		// queued, a backoff after refusals); one that may have landed
		// matches ErrOutcomeUnknown (client package doc).
		return Fail, code
	case ae != nil && ae.Status >= 400 && ae.Status < 500:
		return Fail, code
	case errors.Is(err, client.ErrUnavailable) && re != nil && !re.Unknown:
		return Fail, code
	case ae != nil && ae.Status == http.StatusServiceUnavailable && !isUnknownCode(string(ae.Code)) && ae.Retryable:
		// no_leader, not_leader, unavailable, not_ready: refused before
		// proposal.
		return Fail, code
	}
	return Unknown, code
}

func isUnknownCode(code string) bool {
	return code == string(wire.CodeOutcomeUnknown) || code == string(wire.CodeTimeout) || code == string(wire.CodeInternal) || code == ""
}
