package fsm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

func TestRestartSkipsAppliedEntries(t *testing.T) {
	h := newHarness(t)
	fillEverything(h)
	idx, want, wantDump := h.f.AppliedIndex(), h.hash(), h.dump()
	if idx != h.index || idx != uint64(len(h.logs)) {
		t.Fatalf("applied index %d after %d entries", idx, len(h.logs))
	}

	h.reopen()
	if got := h.f.AppliedIndex(); got != idx {
		t.Fatalf("applied index after reopen %d, want %d", got, idx)
	}
	if d := diffDumps(wantDump, h.dump()); d != "" {
		t.Fatalf("state after reopen:\n%s", d)
	}

	// Raft replays the log from its last snapshot: everything at or below
	// the applied index is skipped, whatever it holds.
	resp := h.f.ApplyBatch(h.logs)
	for i, r := range resp {
		if r != nil {
			t.Fatalf("replayed entry %d answered %+v, want nil", h.logs[i].Index, r)
		}
	}
	junk := []*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: []byte("junk")}, {Index: 1, Term: 1, Type: raft.LogCommand}}
	if resp := h.f.ApplyBatch(junk); resp[0] != nil || resp[1] != nil {
		t.Fatalf("old junk entries answered %v", resp)
	}
	if r := h.f.Apply(h.logs[len(h.logs)-1]); r != nil {
		t.Fatalf("Apply of the last applied entry answered %+v", r)
	}
	if h.f.AppliedIndex() != idx || h.hash() != want {
		t.Fatal("replayed entries changed the state")
	}

	// A batch that mixes old and new entries applies only the new ones.
	old := h.logs[len(h.logs)-3:]
	fresh := []*raft.Log{
		h.nextLog(h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "after-restart"})),
		h.nextLog(h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "after-restart-2"})),
	}
	resp = h.f.ApplyBatch(append(slices.Clone(old), fresh...))
	for i := range old {
		if resp[i] != nil {
			t.Fatalf("old entry %d answered %+v", old[i].Index, resp[i])
		}
	}
	for i, l := range fresh {
		res, ok := resp[len(old)+i].(*fsm.Result)
		if !ok || res.Err != nil || res.Index != l.Index {
			t.Fatalf("new entry %d answered %+v", l.Index, resp[len(old)+i])
		}
	}
	if got := h.f.AppliedIndex(); got != idx+2 {
		t.Fatalf("applied index %d, want %d", got, idx+2)
	}
	h.reopen()
	if got := h.f.AppliedIndex(); got != idx+2 {
		t.Fatalf("applied index after second reopen %d, want %d", got, idx+2)
	}
	h.job("after-restart-2")
}

func TestNonCommandEntries(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	before := h.hash()
	for _, typ := range []raft.LogType{raft.LogConfiguration, raft.LogNoop, raft.LogBarrier} {
		h.index++
		if r := h.f.Apply(&raft.Log{Index: h.index, Term: 2, Type: typ, Data: []byte("ignored")}); r != nil {
			t.Fatalf("%s entry answered %+v, want nil", typ, r)
		}
		if got := h.f.AppliedIndex(); got != h.index {
			t.Fatalf("%s entry: applied index %d, want %d", typ, got, h.index)
		}
	}
	if h.hash() != before {
		t.Fatal("non-command entries changed the state")
	}
	h.reopen()
	if got := h.f.AppliedIndex(); got != h.index {
		t.Fatalf("applied index after reopen %d, want %d", got, h.index)
	}
}

// TestBatchResults: one batch, one transaction, but each entry is answered
// on its own; a refused entry writes nothing and does not undo the others.
func TestBatchResults(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "s", "state"))
	base := h.index
	cmd := func(i uint64, typ fsm.CommandType, payload any) *raft.Log {
		return &raft.Log{Index: base + i, Term: 1, Type: raft.LogCommand, Data: h.encode(typ, payload)}
	}
	batch := []*raft.Log{
		cmd(1, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 1}),
		cmd(2, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 2}),
		{Index: base + 3, Term: 1, Type: raft.LogConfiguration},
		cmd(4, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "s", Payloads: map[fsm.Kind][]byte{wire.KindState: []byte("x")}}),
		cmd(5, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "s", Payloads: map[fsm.Kind][]byte{wire.KindState: []byte("y")}}),
	}
	h.index = base + uint64(len(batch))
	resp := h.f.ApplyBatch(batch)
	want := []error{nil, wire.ErrInvalid, nil, nil, wire.ErrConflict}
	for i, r := range resp {
		if batch[i].Type != raft.LogCommand {
			if r != nil {
				t.Fatalf("entry %d: %+v", i, r)
			}
			continue
		}
		res := r.(*fsm.Result)
		if res.Index != batch[i].Index {
			t.Fatalf("entry %d answered for index %d", batch[i].Index, res.Index)
		}
		if want[i] == nil {
			mustOK(t, res)
		} else {
			mustRule(t, res, want[i])
		}
	}
	if !resp[3].(*fsm.Result).Value.(*wire.AckResult).Completed {
		t.Fatal("ack in the batch did not complete the epoch")
	}
	p := h.restore(fsm.RestoreRequest{Job: "j", Task: "s"})
	if string(p.Kinds[wire.KindState].Payload) != "x" {
		t.Fatalf("restored %q, want the first ack's payload", p.Kinds[wire.KindState].Payload)
	}
	if h.f.AppliedIndex() != h.index {
		t.Fatalf("applied index %d, want %d", h.f.AppliedIndex(), h.index)
	}
}

// TestDeterminism: the same entries give the same state and the same
// answers, applied one by one or in batches of any size.
func TestDeterminism(t *testing.T) {
	one := newHarness(t)
	fillEverything(one)
	again := newHarness(t)
	fillEverything(again)
	// The proposer's encoding is deterministic too.
	if len(one.logs) != len(again.logs) {
		t.Fatalf("%d and %d entries", len(one.logs), len(again.logs))
	}
	for i := range one.logs {
		if !bytes.Equal(one.logs[i].Data, again.logs[i].Data) {
			t.Fatalf("entry %d encoded differently", one.logs[i].Index)
		}
	}

	singles := make([]any, len(one.logs))
	replay := newHarness(t)
	for i, l := range one.logs {
		singles[i] = replay.f.Apply(l)
	}
	batched := newHarness(t)
	var answers []any
	for i, size := 0, 1; i < len(one.logs); size = size%7 + 1 {
		end := min(i+size, len(one.logs))
		answers = append(answers, batched.f.ApplyBatch(one.logs[i:end])...)
		i = end
	}
	want := one.hash()
	for name, h := range map[string]*harness{"again": again, "replay": replay, "batched": batched} {
		if got := h.hash(); got != want {
			t.Errorf("%s: state hash %s, want %s", name, got, want)
		}
		if h.f.AppliedIndex() != one.f.AppliedIndex() {
			t.Errorf("%s: applied index %d, want %d", name, h.f.AppliedIndex(), one.f.AppliedIndex())
		}
		if d := diffDumps(one.dump(), h.dump()); d != "" {
			t.Errorf("%s differs:\n%s", name, d)
		}
	}
	for i := range singles {
		a, _ := json.Marshal(singles[i])
		b, _ := json.Marshal(answers[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("entry %d answered %s alone and %s in a batch", one.logs[i].Index, a, b)
		}
	}

	// Time comes from the command: the same entries stamped later give a
	// different state (the hash covers times), so nothing reads the clock.
	late := newHarness(t)
	late.now = t0.Add(24 * time.Hour)
	fillEverything(late)
	if late.hash() == want {
		t.Fatal("the state does not depend on the command's time")
	}
}

func TestWaitApplied(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Already applied: returns at once.
	if err := h.f.WaitApplied(ctx, h.index); err != nil {
		t.Fatal(err)
	}
	if err := h.f.WaitApplied(ctx, 0); err != nil {
		t.Fatal(err)
	}

	// Applied later, by another goroutine.
	target := h.index + 3
	logs := []*raft.Log{
		h.nextLog(h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "k1"})),
		h.nextLog(h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "k2"})),
		h.nextLog(h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "k3"})),
	}
	step := make(chan struct{})
	applied := make(chan uint64, len(logs))
	go func() {
		for _, l := range logs {
			<-step
			h.f.Apply(l)
			applied <- l.Index
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- h.f.WaitApplied(ctx, target) }()
	for range logs[:2] {
		step <- struct{}{}
		<-applied
		select {
		case err := <-waited:
			t.Fatalf("WaitApplied(%d) returned %v at index %d", target, err, h.f.AppliedIndex())
		default:
		}
	}
	step <- struct{}{}
	if got := <-applied; got != target {
		t.Fatalf("applied %d", got)
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitApplied: %v", err)
	}

	// Cancelled: returns the context's error.
	cctx, ccancel := context.WithCancel(ctx)
	go func() { waited <- h.f.WaitApplied(cctx, target+100) }()
	ccancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled WaitApplied: %v", err)
	}
	dctx, dcancel := context.WithDeadline(ctx, t0)
	defer dcancel()
	if err := h.f.WaitApplied(dctx, target+100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired WaitApplied: %v", err)
	}

	// WaitChange wakes at a batch applied after the call. The waiter may
	// not be parked yet when an entry is applied, so apply until it wakes.
	changed := make(chan struct{})
	go func() { h.f.WaitChange(ctx); close(changed) }()
	for woke := false; !woke; {
		h.index++
		h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogNoop})
		select {
		case <-changed:
			woke = true
		case <-ctx.Done():
			t.Fatal("WaitChange never woke")
		default:
		}
	}
	cctx2, ccancel2 := context.WithCancel(ctx)
	ccancel2()
	h.f.WaitChange(cctx2) // returns

	// A restore wakes waiters too.
	src := newHarness(t)
	for src.index <= h.index { // h applied as many no-ops as WaitChange needed
		src.putJob("x", wire.JobConfig{Retained: 1 + int(src.index)%1000})
	}
	snap := snapshotOf(t, src.f)
	if src.index <= h.index {
		t.Fatalf("snapshot index %d is not ahead of %d", src.index, h.index)
	}
	go func() { waited <- h.f.WaitApplied(ctx, src.index) }()
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitApplied across a restore: %v", err)
	}
}

// TestConcurrentReadsDuringApplyAndRestore runs the read API while Apply,
// Snapshot and Restore run, for the race detector.
func TestConcurrentReadsDuringApplyAndRestore(t *testing.T) {
	h := newHarness(t)
	fillEverything(h)
	good := snapshotOf(t, h.f)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				check := func(err error) {
					var re *wire.RuleError
					if err != nil && !errors.As(err, &re) {
						select {
						case errs <- err:
						default:
						}
					}
				}
				_, _, err := h.f.Job("alpha")
				check(err)
				_, _, err = h.f.Epochs("beta", "")
				check(err)
				_, _, err = h.f.PlanRestore(fsm.RestoreRequest{Job: "alpha", Task: "src"})
				check(err)
				_, _, err = h.f.StateHash()
				check(err)
				_, err = h.f.ExpiredEpochs(t0.Add(time.Hour), 10)
				check(err)
				h.f.NextDeadline()
				_ = h.f.AppliedIndex()
			}
		}()
	}
	for round := range 5 {
		snap, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		persisted := make(chan error, 1)
		go func() {
			sink := &memSink{}
			persisted <- snap.Persist(sink)
		}()
		for i := range 20 {
			h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m", RaftAddr: "r:1", HTTPAddr: "h:" + string(rune('a'+i))})
		}
		if err := <-persisted; err != nil {
			t.Fatal(err)
		}
		snap.Release()
		if round%2 == 1 {
			if err := h.f.Restore(io.NopCloser(bytes.NewReader(good))); err != nil {
				t.Fatal(err)
			}
			h.index = h.f.AppliedIndex()
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("read failed: %v", err)
	}
}

// TestNewerSchemaRefused: a file, or a snapshot, written by a build with a
// newer schema is refused rather than misread.
func TestNewerSchemaRefused(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(h.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, fsm.SchemaVersion+1))
	})
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	if err := db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&body); return err }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err := fsm.Open(h.path, nil); err == nil {
		f.Close()
		t.Fatal("Open accepted a file of a newer schema")
	}

	// The same content as a snapshot with a current header.
	other := newHarness(t)
	other.putJob("mine", wire.JobConfig{})
	before := other.dump()
	snap := append(binary.BigEndian.AppendUint64([]byte("METASTORE-SNAP\n"), fsm.SchemaVersion), body.Bytes()...)
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(snap))); err == nil {
		t.Fatal("Restore accepted a snapshot of a newer schema")
	}
	if d := diffDumps(before, other.dump()); d != "" {
		t.Fatalf("failed restore changed the state:\n%s", d)
	}
}
