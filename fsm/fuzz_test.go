package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// fuzzState fills h with a state that touches every table: members, two
// jobs, an incremental task with manifests (bases, segments, a
// materialization), a task with inline payloads, completed, pinned,
// aborted and pending epochs, intents, and blobs in every GC state. It
// returns commands that are valid on that state, one per command type, as
// seeds.
func fuzzState(h *harness) [][]byte {
	h.t.Helper()
	h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m1", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"})
	h.putJob("inc", wire.JobConfig{Retained: 2})
	inc := task(h.t, "t0", "state", "incremental")
	h.start("inc", "a1", inc)
	w := &worker{job: "inc", task: "t0", gen: 1, acked: map[uint64]manifests.Manifest{}}
	for epoch := uint64(1); epoch <= 4; epoch++ {
		h.begin("inc", 1, epoch)
		w.step(h, epoch, epoch == 3)
	}
	h.pin("inc", 3, "sp")
	h.begin("inc", 1, 5) // pending

	h.putJob("plain", wire.JobConfig{})
	pt := task(h.t, "p0", "state")
	h.start("plain", "b1", pt)
	h.begin("plain", 1, 1)
	h.ack("plain", 1, 1, "p0", payloadsFor(pt, 1))
	h.begin("plain", 1, 2)
	h.abort("plain", 1, 2, "fuzz seed")
	h.begin("plain", 1, 3) // pending

	h.intents("plain", 1, "plain/p0/orphan-1", "plain/p0/orphan-2")
	h.advance(2 * time.Hour)
	mustOK(h.t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-1", "plain/p0/orphan-2"}}))
	mustOK(h.t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-1", "plain/p0/orphan-2"}}))
	mustOK(h.t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-1"}}))
	h.intents("inc", 1, "inc/t0/next")

	last := w.m.Segments[len(w.m.Segments)-1]
	seeds := []struct {
		typ fsm.CommandType
		p   any
	}{
		{fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m2", RaftAddr: "127.0.0.1:3", HTTPAddr: "127.0.0.1:4"}},
		{fsm.CmdMemberRemove, fsm.MemberRemove{ID: "m1"}},
		{fsm.CmdJobPut, fsm.JobPut{Job: "inc", Config: wire.JobConfig{Retained: 1}}},
		{fsm.CmdAttemptStart, fsm.AttemptStart{Job: "plain", AttemptID: "b2", Tasks: []wire.Task{pt}}},
		{fsm.CmdEpochBegin, fsm.EpochBegin{Job: "plain", Generation: 1, Epoch: 9}},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "plain", Generation: 1, Epoch: 3, Task: "p0", Payloads: payloadsFor(pt, 3)}},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "inc", Generation: 1, Epoch: 5, Task: "t0", Manifest: &fsm.ManifestAck{
			Blobs: []fsm.BlobCommit{{Key: "inc/t0/next", Size: 50}},
			Delta: &manifests.Delta{DropSegments: []manifests.Ref{last.ID()},
				AddSegments: []manifests.Segment{{Key: "inc/t0/next", Offset: 0, Length: 50, FirstSeq: w.seq + 1, LastSeq: w.seq + 2}}},
		}}},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "inc", Generation: 1, Epoch: 5, Task: "t0", Manifest: &fsm.ManifestAck{
			Blobs: []fsm.BlobCommit{{Key: "inc/t0/next", Size: 50}},
			Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{{Key: "inc/t0/next", Length: 50}}, TruncateBefore: w.seq + 1}},
		}}},
		{fsm.CmdEpochAbort, fsm.EpochAbort{Job: "inc", Generation: 1, Epoch: 5, Reason: "r"}},
		{fsm.CmdEpochPin, fsm.EpochPin{Job: "inc", Epoch: 4, Name: "sp2"}},
		{fsm.CmdEpochUnpin, fsm.EpochPin{Job: "inc", Epoch: 3}},
		{fsm.CmdEpochsTimeout, fsm.EpochsTimeout{Epochs: []fsm.EpochRef{{Job: "plain", Epoch: 3}}}},
		{fsm.CmdIntentCreate, fsm.IntentCreate{Job: "plain", Generation: 1, Keys: []string{"plain/p0/new"}, LeaseUntil: h.now.Add(time.Hour)}},
		{fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"inc/t0/next"}}},
		{fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-2"}}},
		{fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-2"}}},
		{fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: []string{"plain/p0/orphan-1"}}},
	}
	var out [][]byte
	for _, s := range seeds {
		out = append(out, h.encode(s.typ, s.p))
	}
	batch, err := fsm.EncodeBatch(h.now, out[:6])
	if err != nil {
		h.t.Fatal(err)
	}
	return append(out, batch)
}

// FuzzApply hands arbitrary bytes to the state machine as the next Raft
// log entry, through the decode and dispatch path of Apply. Every entry
// must end as a typed result (a value or a rule violation) or a fatal
// decode error, never a panic; a refused command changes nothing; an
// accepted one leaves the reference counts consistent; and applying the
// same entry to the same state twice gives the same state (Apply is pure).
func FuzzApply(f *testing.F) {
	h := newHarness(f)
	for _, seed := range fuzzState(h) {
		f.Add(seed)
	}
	for _, bad := range [][]byte{nil, {1}, {byte(fsm.CmdBatch), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {byte(fsm.CmdTaskAck), 1, 0, 0, 0, 0, 0, 0, 0, 0, '{', '}'}} {
		f.Add(bad)
	}
	base := h.hash()
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := fsm.TryApply(h.f, data)
		if err != nil {
			t.Fatalf("trial: %v", err)
		}
		if tr.Err != nil {
			if !errors.Is(tr.Err, fsm.ErrCorruptCommand) && !errors.Is(tr.Err, fsm.ErrUnknownCommand) {
				t.Fatalf("fatal error that is not a corrupt or unknown entry (every member would stop): %v", tr.Err)
			}
			return
		}
		if tr.Before != base {
			t.Fatalf("the state changed between trials")
		}
		if tr.Result == nil {
			t.Fatal("no result and no error")
		}
		refused := tr.Result.Err != nil
		if refused {
			var re *wire.RuleError
			if !errors.As(tr.Result.Err, &re) || re.Code == "" {
				t.Fatalf("refusal %T %v is not a coded *wire.RuleError", tr.Result.Err, tr.Result.Err)
			}
			if tr.Result.Value != nil {
				t.Fatalf("refusal %v carries a value %+v", re, tr.Result.Value)
			}
		}
		if results, ok := tr.Result.Value.(fsm.BatchResults); ok {
			refused = true
			for i, r := range results {
				if r == nil {
					t.Fatalf("batch command %d has no result", i+1)
				}
				refused = refused && r.Err != nil
			}
		}
		if refused && tr.After != tr.Before {
			t.Fatalf("refused command changed the state: %v", tr.Result.Err)
		}
		if !tr.Fsck.OK() {
			t.Fatalf("state after the command fails fsck: mismatches %+v problems %v", tr.Fsck.Mismatches, tr.Fsck.Problems)
		}
		again, err := fsm.TryApply(h.f, data)
		if err != nil || again.Err != nil || again.After != tr.After {
			t.Fatalf("the same entry on the same state gave a different state (err %v, %v)", err, again.Err)
		}
	})
}

// FuzzRestore hands arbitrary bytes, and mutations of a valid snapshot, to
// the snapshot reader (Raft's Restore) and to the backup reader
// (PrepareRestore). Each must answer an error or a usable state, never
// panic; a refused snapshot leaves the running state untouched; on an
// accepted one the readers and the commands of every type run without a
// panic (a corrupt state may make a command fail, as it would stop a
// member, but not crash it).
func FuzzRestore(f *testing.F) {
	h := newHarness(f)
	cmds := fuzzState(h)
	valid := snapshotOf(f, h.f)
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:40])
	f.Add([]byte("METASTORE-SNAP\n"))
	hdr := append([]byte("METASTORE-SNAP\n"), make([]byte, 8)...)
	binary.BigEndian.PutUint64(hdr[15:], fsm.SchemaVersion)
	f.Add(hdr)
	f.Add(append(append([]byte{}, hdr...), make([]byte, 4096)...))
	flipped := append([]byte(nil), valid...)
	flipped[len(hdr)+4096+100] ^= 0xff // in the second meta page
	f.Add(flipped)

	dir := f.TempDir()
	before, beforeIdx := h.dump(), h.f.AppliedIndex()
	f.Fuzz(func(t *testing.T, data []byte) {
		// One state machine serves every input, so each input starts by
		// checking it holds the fuzz state: a failure that left another
		// state behind must not be blamed on the next input (the next
		// refused snapshot would look as if it changed the state, and the
		// fuzzer would save that innocent input).
		if d := diffDumps(before, dumpOf(t, h.f)); d != "" {
			t.Fatalf("the state differs from the fuzz state before this input was given: an earlier input left it changed:\n%s", d)
		}
		err := h.f.RestoreFrom(bytes.NewReader(data))
		if err != nil {
			after, derr := fsm.DumpBuckets(h.f)
			if derr != nil {
				t.Fatalf("reading the state after a refused snapshot (%v): %v", err, derr)
			}
			if d := diffDumps(before, after); d != "" {
				t.Fatalf("a refused snapshot (%v) changed the state:\n%s", err, d)
			}
			if got := h.f.AppliedIndex(); got != beforeIdx {
				t.Fatalf("a refused snapshot (%v) changed the applied index to %d", err, got)
			}
		} else {
			// Accepted: whatever happens next, the fuzz state comes back
			// before the next input.
			defer func() {
				if err := h.f.RestoreFrom(bytes.NewReader(valid)); err != nil {
					t.Errorf("restoring the valid snapshot again: %v", err)
				}
			}()
			exerciseState(t, h.f, cmds)
		}
		var out bytes.Buffer
		if _, err := fsm.PrepareRestore(bytes.NewReader(data), &out, dir); err == nil {
			probe := openFSM(t, filepath.Join(t.TempDir(), "probe.db"))
			defer probe.Close()
			if err := probe.RestoreFrom(&out); err != nil {
				t.Fatalf("a backup PrepareRestore accepted does not restore: %v", err)
			}
		}
	})
}

// exerciseState runs the readers and a command of every type (in trial
// transactions, rolled back) on a state that may be corrupt: each must
// answer, with an error if it must, and not panic.
func exerciseState(t *testing.T, f *fsm.FSM, cmds [][]byte) {
	t.Helper()
	_, _, _ = f.StateHash()
	_, _ = f.Fsck()
	_, _ = fsm.DumpBuckets(f)
	jobs, _, _ := f.Jobs()
	for _, j := range jobs {
		_, _, _ = f.Epochs(j.ID, "")
	}
	for _, job := range []string{"inc", "plain"} {
		_, _, _ = f.PlanRestore(fsm.RestoreRequest{Job: job, Task: "t0"})
		_, _, _ = f.PlanRestore(fsm.RestoreRequest{Job: job, Task: "p0"})
	}
	for _, cmd := range cmds {
		_, _ = fsm.TryApply(f, cmd)
	}
}

// dumpOf reads every bucket of f.
func dumpOf(t *testing.T, f *fsm.FSM) fsm.Dump {
	t.Helper()
	d, err := fsm.DumpBuckets(f)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return d
}

// TestRestoreAcceptsLargeSnapshots: the page check refuses no file bbolt
// writes, here one with branch pages several levels deep, reshaped by
// deletions (members added, then most removed).
func TestRestoreAcceptsLargeSnapshots(t *testing.T) {
	h := newHarness(t)
	fuzzState(h)
	const n = 4000
	// In batches of 500 entries, as Raft hands them over under load: the
	// member list (members.go) is published once per batch.
	var batch []*raft.Log
	apply := func(typ fsm.CommandType, payload any) {
		batch = append(batch, h.nextLog(h.encode(typ, payload)))
		if len(batch) == 500 {
			for i, r := range h.f.ApplyBatch(batch) {
				if res, ok := r.(*fsm.Result); !ok || res.Err != nil {
					t.Fatalf("entry %d: %v", batch[i].Index, r)
				}
			}
			batch = batch[:0]
		}
	}
	for i := range n {
		apply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: fmt.Sprintf("member-%05d-%s", i, strings.Repeat("x", 40)), RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"})
	}
	for i := 0; i < n; i++ {
		if i%7 != 0 {
			apply(fsm.CmdMemberRemove, fsm.MemberRemove{ID: fmt.Sprintf("member-%05d-%s", i, strings.Repeat("x", 40))})
		}
	}
	for len(batch) > 0 {
		apply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "member-last", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"})
	}
	snap := snapshotOf(t, h.f)
	other := openFSM(t, filepath.Join(t.TempDir(), "other.db"))
	defer other.Close()
	if err := other.RestoreFrom(bytes.NewReader(snap)); err != nil {
		t.Fatalf("restoring a valid snapshot of %d bytes: %v", len(snap), err)
	}
	_, want, _ := h.f.StateHash()
	if _, got, _ := other.StateHash(); got != want {
		t.Fatal("restored state differs")
	}
}
