package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// t0 is the base time of every test. Time only moves when a test says so.
var t0 = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// harness drives one FSM directly, as Raft would: it stamps commands with
// its own clock and hands them to Apply at increasing indexes.
type harness struct {
	t     testing.TB
	path  string
	f     *fsm.FSM
	index uint64
	now   time.Time
	// logs holds every entry handed to Apply, for replays.
	logs []*raft.Log
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	h := &harness{t: t, path: filepath.Join(t.TempDir(), "fsm.db"), now: t0}
	h.f = openFSM(t, h.path)
	t.Cleanup(func() { h.f.Close() })
	return h
}

func openFSM(t testing.TB, path string) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(path, nil)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return f
}

// run runs fn as subtest name of t with the harness reporting to the
// subtest, so that a failed check of the harness (h.reject, h.dump, ...)
// fails that subtest and not its parent.
func (h *harness) run(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		parent := h.t
		h.t = t
		defer func() { h.t = parent }()
		fn(t)
	})
}

// reopen closes the file and opens it again, as a restarted member does.
func (h *harness) reopen() {
	h.t.Helper()
	if err := h.f.Close(); err != nil {
		h.t.Fatalf("close: %v", err)
	}
	h.f = openFSM(h.t, h.path)
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

// encode builds a command stamped with the harness clock.
func (h *harness) encode(typ fsm.CommandType, payload any) []byte {
	h.t.Helper()
	data, err := fsm.Encode(typ, h.now, payload)
	if err != nil {
		h.t.Fatalf("encode %s: %v", typ, err)
	}
	return data
}

// nextLog wraps a command in the next Raft log entry.
func (h *harness) nextLog(data []byte) *raft.Log {
	h.index++
	l := &raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: data}
	h.logs = append(h.logs, l)
	return l
}

// mustApply applies one command at the next index and returns its Result.
func (h *harness) mustApply(typ fsm.CommandType, payload any) *fsm.Result {
	h.t.Helper()
	resp := h.f.Apply(h.nextLog(h.encode(typ, payload)))
	res, ok := resp.(*fsm.Result)
	if !ok {
		h.t.Fatalf("apply %s at index %d: response %T (%v), want *fsm.Result", typ, h.index, resp, resp)
	}
	if res.Index != h.index {
		h.t.Fatalf("apply %s: result index %d, want %d", typ, res.Index, h.index)
	}
	return res
}

// mustOK fails the test unless res has no error, and returns its value.
func mustOK(t testing.TB, res *fsm.Result) any {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("index %d: unexpected error: %v", res.Index, res.Err)
	}
	return res.Value
}

// mustRule fails the test unless res is a rule violation matching sentinel.
func mustRule(t testing.TB, res *fsm.Result, sentinel error) *wire.RuleError {
	t.Helper()
	if res.Err == nil {
		t.Fatalf("index %d: got value %+v, want error %v", res.Index, res.Value, sentinel)
	}
	if !errors.Is(res.Err, sentinel) {
		t.Fatalf("index %d: got error %v, want %v", res.Index, res.Err, sentinel)
	}
	var re *wire.RuleError
	if !errors.As(res.Err, &re) {
		t.Fatalf("index %d: error %T is not a *wire.RuleError", res.Index, res.Err)
	}
	if res.Value != nil {
		t.Fatalf("index %d: rule violation carries a value %+v", res.Index, res.Value)
	}
	return re
}

// hash is the state digest without the applied index.
func (h *harness) hash() string {
	h.t.Helper()
	_, sum, err := h.f.StateHash()
	if err != nil {
		h.t.Fatalf("state hash: %v", err)
	}
	return sum
}

func (h *harness) dump() fsm.Dump {
	h.t.Helper()
	d, err := fsm.DumpBuckets(h.f)
	if err != nil {
		h.t.Fatalf("dump: %v", err)
	}
	return d
}

// reject applies a command that must be refused with sentinel and must
// change nothing but the applied index.
func (h *harness) reject(sentinel error, typ fsm.CommandType, payload any) *wire.RuleError {
	h.t.Helper()
	return h.rejectEncoded(sentinel, typ, h.encode(typ, payload))
}

// rejectVersion is reject for a command of an earlier payload version, as
// an older leader wrote it (replayed under the rules of its version).
func (h *harness) rejectVersion(sentinel error, typ fsm.CommandType, version uint8, payload any) *wire.RuleError {
	h.t.Helper()
	data, err := fsm.EncodeVersion(typ, version, h.now, payload)
	if err != nil {
		h.t.Fatalf("encode %s version %d: %v", typ, version, err)
	}
	return h.rejectEncoded(sentinel, typ, data)
}

// rejectEncoded is reject for a command already encoded.
func (h *harness) rejectEncoded(sentinel error, typ fsm.CommandType, data []byte) *wire.RuleError {
	h.t.Helper()
	before := h.hash()
	resp := h.f.Apply(h.nextLog(data))
	res, ok := resp.(*fsm.Result)
	if !ok || res.Index != h.index {
		h.t.Fatalf("apply %s at index %d: response %T (%+v), want a *fsm.Result of that index", typ, h.index, resp, resp)
	}
	re := mustRule(h.t, res, sentinel)
	if after := h.hash(); after != before {
		h.t.Fatalf("%s refused with %v but the state changed", typ, re)
	}
	if got := h.f.AppliedIndex(); got != h.index {
		h.t.Fatalf("applied index %d after a refused command, want %d", got, h.index)
	}
	return re
}

// ---- typed command helpers ----

func (h *harness) putJob(job string, cfg wire.JobConfig) *wire.Job {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdJobPut, fsm.JobPut{Job: job, Config: cfg})).(*wire.Job)
}

func (h *harness) start(job, attemptID string, tasks ...wire.Task) *wire.Attempt {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdAttemptStart, fsm.AttemptStart{Job: job, AttemptID: attemptID, Tasks: tasks})).(*wire.Attempt)
}

func (h *harness) begin(job string, gen, epoch uint64) *wire.Epoch {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: gen, Epoch: epoch})).(*wire.Epoch)
}

func (h *harness) ack(job string, gen, epoch uint64, task string, payloads map[fsm.Kind][]byte) *wire.AckResult {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: job, Generation: gen, Epoch: epoch, Task: task, Payloads: payloads})).(*wire.AckResult)
}

func (h *harness) abort(job string, gen, epoch uint64, reason string) *wire.Epoch {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdEpochAbort, fsm.EpochAbort{Job: job, Generation: gen, Epoch: epoch, Reason: reason})).(*wire.Epoch)
}

func (h *harness) pin(job string, epoch uint64, name string) *wire.Epoch {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdEpochPin, fsm.EpochPin{Job: job, Epoch: epoch, Name: name})).(*wire.Epoch)
}

func (h *harness) unpin(job string, epoch uint64) *wire.Epoch {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdEpochUnpin, fsm.EpochPin{Job: job, Epoch: epoch})).(*wire.Epoch)
}

func (h *harness) timeout(refs ...fsm.EpochRef) []fsm.EpochRef {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdEpochsTimeout, fsm.EpochsTimeout{Epochs: refs})).([]fsm.EpochRef)
}

// ---- reads ----

func (h *harness) job(id string) *wire.Job {
	h.t.Helper()
	j, _, err := h.f.Job(id)
	if err != nil {
		h.t.Fatalf("job %s: %v", id, err)
	}
	return j
}

func (h *harness) epoch(job string, n uint64) *wire.EpochDetail {
	h.t.Helper()
	e, _, err := h.f.Epoch(job, n)
	if err != nil {
		h.t.Fatalf("epoch %s/%d: %v", job, n, err)
	}
	return e
}

func (h *harness) restore(req fsm.RestoreRequest) *wire.RestorePlan {
	h.t.Helper()
	p, _, err := h.f.PlanRestore(req)
	if err != nil {
		h.t.Fatalf("restore %+v: %v", req, err)
	}
	return p
}

// ---- model helpers ----

func caps(t testing.TB, names ...string) fsm.Caps {
	t.Helper()
	c, err := wire.ParseCaps(names)
	if err != nil {
		t.Fatalf("caps %v: %v", names, err)
	}
	return c
}

func task(t testing.TB, id string, capNames ...string) wire.Task {
	return wire.Task{ID: id, Caps: caps(t, capNames...)}
}

// payloadsFor builds distinct, binary payloads for every kind a task
// checkpoints, so a restore can be checked byte for byte.
func payloadsFor(tk wire.Task, epoch uint64) map[fsm.Kind][]byte {
	out := map[fsm.Kind][]byte{}
	for _, k := range wire.Kinds {
		if tk.Caps.Has(k) {
			out[k] = append([]byte(fmt.Sprintf("%s/%d/%s:", tk.ID, epoch, k)), 0x00, 0xff, byte(epoch), '\n')
		}
	}
	return out
}

// checkPlan checks a restore plan against the payloads the task acked (nil
// when the task had no capabilities).
func checkPlan(t testing.TB, p *wire.RestorePlan, tk wire.Task, want map[fsm.Kind][]byte) {
	t.Helper()
	wantStatus := wire.RestoreRestored
	if !tk.Caps.Expected() {
		wantStatus = wire.RestoreNothing
	}
	if p.Status != wantStatus {
		t.Fatalf("restore %s: status %q, want %q", tk.ID, p.Status, wantStatus)
	}
	if p.ObjectStoreReads != 0 {
		t.Errorf("restore %s: %d object-store reads, want 0", tk.ID, p.ObjectStoreReads)
	}
	if p.Capabilities == nil || *p.Capabilities != tk.Caps {
		t.Errorf("restore %s: capabilities %v, want %v", tk.ID, p.Capabilities, tk.Caps)
	}
	if len(p.Kinds) != len(wire.Kinds) {
		t.Errorf("restore %s: %d kinds answered, want %d", tk.ID, len(p.Kinds), len(wire.Kinds))
	}
	total := 0
	for _, k := range wire.Kinds {
		kr := p.Kinds[k]
		if !tk.Caps.Has(k) {
			if kr.Status != wire.RestoreNothing || kr.Payload != nil || kr.Bytes != 0 {
				t.Errorf("restore %s kind %s: %+v, want %s with no payload", tk.ID, k, kr, wire.RestoreNothing)
			}
			continue
		}
		if kr.Status != wire.RestoreRestored {
			t.Errorf("restore %s kind %s: status %q, want %q", tk.ID, k, kr.Status, wire.RestoreRestored)
		}
		if !bytes.Equal(kr.Payload, want[k]) || kr.Bytes != len(want[k]) {
			t.Errorf("restore %s kind %s: payload %q (%d bytes), want %q", tk.ID, k, kr.Payload, kr.Bytes, want[k])
		}
		total += len(want[k])
	}
	if p.InlineBytes != total {
		t.Errorf("restore %s: inline bytes %d, want %d", tk.ID, p.InlineBytes, total)
	}
}

func checkNoPriorState(t testing.TB, p *wire.RestorePlan) {
	t.Helper()
	if p.Status != wire.RestoreNoPriorState {
		t.Fatalf("restore %s: status %q, want %q", p.Task, p.Status, wire.RestoreNoPriorState)
	}
	for _, k := range wire.Kinds {
		if kr := p.Kinds[k]; kr.Status != wire.RestoreNoPriorState || kr.Payload != nil {
			t.Errorf("restore %s kind %s: %+v, want %s", p.Task, k, kr, wire.RestoreNoPriorState)
		}
	}
	if p.Capabilities != nil || p.InlineBytes != 0 || p.ObjectStoreReads != 0 {
		t.Errorf("restore %s: no prior state but caps %v, %d inline bytes, %d reads", p.Task, p.Capabilities, p.InlineBytes, p.ObjectStoreReads)
	}
}

// diffDumps describes how two dumps differ ("" when they are equal).
func diffDumps(a, b fsm.Dump) string {
	var out []string
	names := slices.Sorted(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	for _, n := range names {
		ka, okA := a[n]
		kb, okB := b[n]
		if !okA || !okB {
			out = append(out, fmt.Sprintf("bucket %q only on one side", n))
			continue
		}
		for k, va := range ka {
			if vb, ok := kb[k]; !ok {
				out = append(out, fmt.Sprintf("%s/%q missing on the right", n, k))
			} else if va != vb {
				out = append(out, fmt.Sprintf("%s/%q: %q != %q", n, k, va, vb))
			}
		}
		for k := range kb {
			if _, ok := ka[k]; !ok {
				out = append(out, fmt.Sprintf("%s/%q missing on the left", n, k))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// keysWithPrefix counts the keys of a bucket starting with prefix.
func keysWithPrefix(d fsm.Dump, bucket, prefix string) int {
	n := 0
	for k := range d[bucket] {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// isRule reports whether err is a *wire.RuleError matching sentinel.
func isRule(err, sentinel error) bool {
	var re *wire.RuleError
	return errors.As(err, &re) && errors.Is(err, sentinel)
}

// plantBlobRecords writes n blob records around the commands, with the
// keys key returns and the value of the file's first blob record (one
// must exist), 50,000 to a transaction.
func plantBlobRecords(tb testing.TB, f *fsm.FSM, n int, key func() string) {
	tb.Helper()
	var value []byte
	err := fsm.RawView(f, func(tx *bolt.Tx) error {
		_, v := tx.Bucket([]byte("blobs")).Cursor().First()
		value = bytes.Clone(v)
		return nil
	})
	if err != nil || value == nil {
		tb.Fatalf("no blob record to copy (%v)", err)
	}
	for done := 0; done < n; {
		err := fsm.RawUpdate(f, func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("blobs"))
			for i := 0; i < 50_000 && done < n; i++ {
				if err := b.Put([]byte(key()), value); err != nil {
					return err
				}
				done++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}
