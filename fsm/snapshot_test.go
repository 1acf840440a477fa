package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// fillEverything applies a history that leaves records of every kind:
// members, several jobs, attempts of several generations, tasks, pending,
// completed, aborted (on request, by a new attempt, by timeout), subsumed
// and pinned epochs, acks, payloads and deadlines.
func fillEverything(h *harness) {
	t := h.t
	h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "node-1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:8080"})
	h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "node-2", RaftAddr: "10.0.0.2:7000", HTTPAddr: "10.0.0.2:8080"})
	h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "node-3", RaftAddr: "10.0.0.3:7000", HTTPAddr: "10.0.0.3:8080"})
	h.mustApply(fsm.CmdMemberRemove, fsm.MemberRemove{ID: "node-3"})

	// auth: tokens (one revoked) and the object-URL signing key.
	h.mustApply(fsm.CmdTokenCreate, fsm.TokenCreate{Accessor: "00000000000000a1", Hash: wire.TokenHash("op-secret"), Role: wire.RoleOperator, Bootstrap: true})
	h.mustApply(fsm.CmdTokenCreate, fsm.TokenCreate{Accessor: "00000000000000b1", Hash: wire.TokenHash("w-secret"), Role: wire.RoleWorker, Job: "alpha", Description: "alpha worker"})
	h.mustApply(fsm.CmdTokenCreate, fsm.TokenCreate{Accessor: "00000000000000b2", Hash: wire.TokenHash("w2-secret"), Role: wire.RoleWorker, JobPrefix: "be"})
	h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: "00000000000000b2"})
	h.mustApply(fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: bytes.Repeat([]byte{7}, fsm.URLKeyLen)})

	// alpha: two attempts, retention 2 with a savepoint, short history.
	h.putJob("alpha", wire.JobConfig{Retained: 2, AckTimeout: fsm.Duration(30 * time.Second), History: 3})
	src := task(t, "src", "input")
	op := task(t, "op", "state", "incremental")
	sink := task(t, "sink", "output")
	idle := task(t, "idle")
	h.start("alpha", "alpha-1", src, op, sink, idle)
	for n := uint64(1); n <= 4; n++ {
		h.advance(time.Second)
		h.begin("alpha", 1, n)
		for _, tk := range []wire.Task{src, op, sink} {
			h.advance(time.Millisecond)
			h.ack("alpha", 1, n, tk.ID, payloadsFor(tk, n))
		}
		if n == 1 {
			h.pin("alpha", 1, "savepoint-1")
		}
	}
	h.advance(time.Second)
	h.begin("alpha", 1, 5)
	h.ack("alpha", 1, 5, "op", payloadsFor(op, 5))
	h.abort("alpha", 1, 5, "operator asked")
	h.begin("alpha", 1, 6)
	h.ack("alpha", 1, 6, "src", payloadsFor(src, 6))
	h.advance(time.Second)
	sink2 := task(t, "sink-2", "output", "state")
	h.start("alpha", "alpha-2", src, op, sink2) // aborts 6
	h.begin("alpha", 2, 7)
	h.ack("alpha", 2, 7, "src", payloadsFor(src, 7))
	h.begin("alpha", 2, 8)

	// beta: default retention, epochs subsumed, one timed out, one pending.
	h.putJob("beta", wire.JobConfig{AckTimeout: fsm.Duration(5 * time.Second)})
	st := task(t, "state-0", "state")
	h.start("beta", "beta-1", st, task(t, "map-0"))
	for n := uint64(10); n <= 30; n += 10 {
		h.advance(time.Second)
		h.begin("beta", 1, n)
		h.ack("beta", 1, n, st.ID, payloadsFor(st, n))
	}
	h.begin("beta", 1, 40)
	h.advance(6 * time.Second)
	h.timeout(fsm.EpochRef{Job: "beta", Epoch: 40})
	h.begin("beta", 1, 50)
	h.ack("beta", 1, 50, st.ID, map[fsm.Kind][]byte{wire.KindState: bytes.Repeat([]byte{0xa5}, wire.MaxInlinePayload)})
	h.begin("beta", 1, 60)

	// gamma: only stateless tasks, so an epoch completes as it begins.
	h.putJob("gamma", wire.JobConfig{Retained: 2})
	h.start("gamma", "gamma-1", task(t, "m1"), task(t, "m2"))
	for n := uint64(1); n <= 3; n++ {
		h.begin("gamma", 1, n)
	}

	// delta: a job with no attempt, restoring from alpha's savepoint.
	h.putJob("delta", wire.JobConfig{History: 7})

	// inc: incremental manifests in the object store: intents committed,
	// one expired, a materialization, a dropped segment held by a retained
	// epoch, blobs deleting and gone.
	h.putJob("inc", wire.JobConfig{Retained: 2})
	w := &worker{job: "inc", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.start("inc", "inc-1", task(t, "w", "state", "incremental"))
	for n := uint64(1); n <= 12; n++ {
		h.begin("inc", 1, n)
		w.step(h, n, n == 10)
	}
	h.intents("inc", 1, "inc/w/never-committed", "inc/w/pending-upload")
	h.advance(2 * time.Hour)
	h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"inc/w/never-committed"}})
	h.intents("inc", 1, "inc/w/live-intent")
	marked := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{"inc/w/log-1-1", "inc/w/log-1-2", "inc/w/never-committed"}})).([]string)
	if len(marked) != 3 {
		t.Fatalf("marked %v", marked)
	}
	h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked[:1]})
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
	failWrites        bool
}

func (s *memSink) ID() string { return "mem" }

func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrites {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}

func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// snapshotOf persists a snapshot of f and returns its bytes.
func snapshotOf(t testing.TB, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v after a good persist", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

// fillEverythingAndDelete is fillEverything plus a job deleted with its
// pinned savepoint (forced), which leaves a tombstone: the records of
// buckets added after fillEverythingHash was fixed.
func fillEverythingAndDelete(h *harness) {
	fillEverything(h)
	h.putJob("omega", wire.JobConfig{Retained: 1})
	w := &worker{job: "omega", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.start("omega", "omega-1", task(h.t, "w", "state", "incremental"))
	h.begin("omega", 1, 1)
	w.step(h, 1, false)
	h.pin("omega", 1, "keep")
	h.intents("omega", 1, "omega/w/open-upload")
	h.begin("omega", 1, 2)
	mustOK(h.t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "omega", Force: true}))
	// An upload batch of alpha's current attempt (schema version 3).
	h.batch("alpha", 2, "op", "00000000000000010123456789abcdef", 3)
}

// fillEverythingAndDeleteHash is the state hash of fillEverythingAndDelete.
const fillEverythingAndDeleteHash = "4740c5edae8617ebb45d574a26e5d23617a3ba50d2279a47eed958519e6c2adb"

func TestStateHashWithTombstoneIsStable(t *testing.T) {
	h := newHarness(t)
	fillEverythingAndDelete(h)
	if got := h.hash(); got != fillEverythingAndDeleteHash {
		t.Fatalf("state hash of fillEverythingAndDelete = %s, want %s: the bucket order or a record encoding changed", got, fillEverythingAndDeleteHash)
	}
	h.fsck()
}

func TestFillEverythingTouchesEveryBucket(t *testing.T) {
	h := newHarness(t)
	fillEverythingAndDelete(h)
	d := h.dump()
	for _, name := range fsm.BucketNames() {
		if len(d[name]) == 0 {
			t.Errorf("bucket %s is empty: the snapshot test would not cover it", name)
		}
	}
	states := map[wire.EpochState]int{}
	pinned := 0
	for _, job := range []string{"alpha", "beta", "gamma"} {
		es, _, err := h.f.Epochs(job, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			states[e.State]++
			if e.Pinned {
				pinned++
			}
		}
	}
	for _, s := range []wire.EpochState{wire.EpochPending, wire.EpochCompleted, wire.EpochAborted, wire.EpochSubsumed} {
		if states[s] == 0 {
			t.Errorf("no %s epoch", s)
		}
	}
	if pinned == 0 {
		t.Error("no pinned epoch")
	}
}

// TestSnapshotRestoreRoundTrip: Snapshot -> Persist -> Restore into a fresh
// FSM reproduces the state byte for byte, as of the moment of Snapshot even
// though Apply went on while the snapshot was persisted; replaying the later
// entries then converges with the source.
func TestSnapshotRestoreRoundTrip(t *testing.T) {
	src := newHarness(t)
	fillEverything(src)
	want, wantHash, wantIdx := src.dump(), src.hash(), src.f.AppliedIndex()

	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Apply goes on while the snapshot is open.
	mark := len(src.logs)
	src.advance(time.Second)
	src.ack("alpha", 2, 7, "op", payloadsFor(task(t, "op", "state", "incremental"), 7))
	src.pin("alpha", 4, "savepoint-4")
	src.mustApply(fsm.CmdMemberRemove, fsm.MemberRemove{ID: "node-1"})
	later := slices.Clone(src.logs[mark:])

	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	snap.Release() // twice is harmless

	dst := newHarness(t)
	dst.putJob("unrelated", wire.JobConfig{}) // replaced by the restore
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(want, dst.dump()); d != "" {
		t.Fatalf("restored content differs:\n%s", d)
	}
	if got := dst.hash(); got != wantHash {
		t.Fatalf("state hash %s, want %s", got, wantHash)
	}
	if got := dst.f.AppliedIndex(); got != wantIdx {
		t.Fatalf("applied index %d, want %d", got, wantIdx)
	}
	if idx, _, _ := dst.f.StateHash(); idx != wantIdx {
		t.Fatalf("state hash index %d, want %d", idx, wantIdx)
	}
	if _, _, err := dst.f.Job("unrelated"); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("job of the replaced state: %v", err)
	}

	// The restored state answers queries.
	sp := dst.restore(fsm.RestoreRequest{Job: "delta", Task: "sink", SourceJob: "alpha", Pin: "savepoint-1"})
	checkPlan(t, sp, task(t, "sink", "output"), payloadsFor(task(t, "sink", "output"), 1))
	if exp, err := dst.f.ExpiredEpochs(dst.now.Add(time.Hour), 100); err != nil || len(exp) != 3 {
		t.Fatalf("expired epochs of the restored state: %v %v", exp, err)
	}

	// Replaying the entries applied after the snapshot converges.
	for _, l := range later {
		if _, ok := dst.f.Apply(l).(*fsm.Result); !ok {
			t.Fatalf("replay of %d did not give a result", l.Index)
		}
	}
	if d := diffDumps(src.dump(), dst.dump()); d != "" {
		t.Fatalf("after replay the states differ:\n%s", d)
	}

	// The restored file is the member's file from now on.
	dst.reopen()
	if d := diffDumps(src.dump(), dst.dump()); d != "" {
		t.Fatalf("after reopen the states differ:\n%s", d)
	}
	if _, err := os.Stat(dst.path + ".restore"); !os.IsNotExist(err) {
		t.Fatalf("restore left its temporary file: %v", err)
	}
}

func TestSnapshotPersistFailureCancelsSink(t *testing.T) {
	h := newHarness(t)
	fillEverything(h)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &memSink{failWrites: true}
	if err := snap.Persist(sink); err == nil {
		t.Fatal("Persist succeeded on a failing sink")
	}
	if !sink.cancelled || sink.closed {
		t.Fatalf("sink cancelled=%v closed=%v, want cancelled only", sink.cancelled, sink.closed)
	}
}

// TestRestoreRejectsBadSnapshots: a snapshot that is not one, or is damaged,
// fails the restore and leaves the current state intact and usable.
func TestRestoreRejectsBadSnapshots(t *testing.T) {
	donor := newHarness(t)
	fillEverything(donor)
	good := snapshotOf(t, donor.f)

	magic := []byte("METASTORE-SNAP\n")
	header := func(version uint64) []byte {
		return binary.BigEndian.AppendUint64(slices.Clone(magic), version)
	}
	hdrLen := len(header(1))
	body := good[hdrLen:]
	corruptMeta := slices.Clone(good)
	for i := hdrLen; i < hdrLen+2*4096 && i < len(corruptMeta); i++ {
		corruptMeta[i] ^= 0x5a
	}

	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", bytes.Repeat([]byte("not a snapshot "), 1000)},
		{"short header", magic[:10]},
		{"magic only", magic},
		{"wrong magic", append([]byte("METASTORE-SNAQ\n\x00\x00\x00\x00\x00\x00\x00\x01"), body...)},
		{"newer schema", append(header(fsm.SchemaVersion+1), body...)},
		{"header only", header(1)},
		{"garbage body", append(header(1), bytes.Repeat([]byte{0xab}, 64<<10)...)},
		{"short body", append(header(1), body[:100]...)},
		{"corrupt meta pages", corruptMeta},
		{"truncated body", append(header(1), body[:len(body)/2]...)},
		{"truncated to the meta pages", append(header(1), body[:2*4096]...)},
		{"last page missing", append(header(1), body[:len(body)-4096]...)},
		{"foreign bbolt file", append(header(1), foreignBolt(t)...)},
	}
	h := newHarness(t)
	fillEverything(h)
	h.putJob("mine", wire.JobConfig{})
	for _, tc := range cases {
		h.run(t, tc.name, func(t *testing.T) {
			before, idx := h.dump(), h.f.AppliedIndex()
			if err := h.f.Restore(io.NopCloser(bytes.NewReader(tc.data))); err == nil {
				t.Fatal("restore succeeded")
			}
			if got := h.f.AppliedIndex(); got != idx {
				t.Fatalf("applied index %d, want %d", got, idx)
			}
			if d := diffDumps(before, h.dump()); d != "" {
				t.Fatalf("state changed:\n%s", d)
			}
			if _, err := os.Stat(h.path + ".restore"); !os.IsNotExist(err) {
				t.Fatalf("failed restore left its temporary file: %v", err)
			}
			if j, _, err := h.f.Job("mine"); err != nil || j.ID != "mine" {
				t.Fatalf("job after a failed restore: %+v %v", j, err)
			}
		})
	}
	// Still writable, and a good snapshot still restores.
	h.putJob("after", wire.JobConfig{})
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(good))); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(donor.dump(), h.dump()); d != "" {
		t.Fatalf("good restore after failed ones differs:\n%s", d)
	}
}

// foreignBolt is a valid bbolt file that is not a state machine file.
func foreignBolt(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("things"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&buf); return err }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreWhileSnapshotPersists: Raft may persist the member's own
// snapshot while it installs one from the leader. Whatever the order, the
// persisted snapshot holds the state it was taken from, and the member ends
// with the installed state.
func TestRestoreWhileSnapshotPersists(t *testing.T) {
	h := newHarness(t)
	fillEverything(h)
	mine := h.dump()
	leader := newHarness(t)
	leader.putJob("from-leader", wire.JobConfig{})
	installed := snapshotOf(t, leader.f)

	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := make(chan error, 1)
	go func() { restored <- h.f.Restore(io.NopCloser(bytes.NewReader(installed))) }()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(leader.dump(), h.dump()); d != "" {
		t.Fatalf("member after install:\n%s", d)
	}
	again := newHarness(t)
	if err := again.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(mine, again.dump()); d != "" {
		t.Fatalf("snapshot persisted during the install:\n%s", d)
	}
}

// A restore must not wait for a snapshot still being persisted: Raft's
// snapshot goroutine holds the snapshot's read transaction while it waits
// for Raft's main goroutine, which waits for the restore. The held snapshot
// still persists the state it was taken from.
func TestRestoreWhileSnapshotHeld(t *testing.T) {
	h := newHarness(t)
	h.putJob("before", wire.JobConfig{})
	held, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	src := newHarness(t)
	for src.index <= h.index {
		src.putJob("restored", wire.JobConfig{Retained: int(src.index) + 1})
	}
	data := snapshotOf(t, src.f)

	done := make(chan error, 1)
	go func() { done <- h.f.Restore(io.NopCloser(bytes.NewReader(data))) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		held.Release()
		t.Fatal("Restore waited for a held snapshot's read transaction")
	}
	if h.f.AppliedIndex() != src.index || h.job("restored") == nil {
		t.Fatalf("after the restore: index %d (want %d)", h.f.AppliedIndex(), src.index)
	}
	sink := &memSink{}
	if err := held.Persist(sink); err != nil {
		t.Fatal(err)
	}
	held.Release()
	old := newHarness(t)
	if err := old.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatalf("restoring the held snapshot: %v", err)
	}
	if old.job("before") == nil {
		t.Fatal("the held snapshot did not persist the state it was taken from")
	}
}

// fillEverythingHash is the state hash of fillEverything's state. The hash
// is compared between members and across releases of one schema version (a
// member that upgrades must hash the state it shares with the others as
// they do), so it depends only on the records and on the order of
// allBuckets (fsm/schema.go), never on how the code that declares the
// buckets is arranged. Schema version 2 changed it (records.go's records
// became MessagePack), and so did version 3 (the version is a record of
// the meta bucket, which the hash digests), version 4 (attempts, tasks
// and acks MessagePack), version 5 (no rec_seq), version 6 (no
// blob_unobserved: the blob records say it) and version 7 (the blob
// records without their keys); a file of an earlier version hashes to it
// once opened (TestJSONRecordsMigrated, TestBlobRecordsWithoutKeys).
const fillEverythingHash = "4c5ae03e0b9e4fd5fbbfdaf32b3724a6b4193feec1df7de259327d36d2ea8273"

func TestStateHashIsStable(t *testing.T) {
	h := newHarness(t)
	fillEverything(h)
	if got := h.hash(); got != fillEverythingHash {
		t.Fatalf("state hash of fillEverything = %s, want %s: the bucket order or a record encoding changed", got, fillEverythingHash)
	}
}
