package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestGroupCommit: batches are applied to one open transaction and
// committed together (commit.go): when the interval passes with no reader
// (the timer), when a reader needs them, before a snapshot, and at close;
// reads always see every applied batch.
func TestGroupCommit(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("a", wire.JobConfig{})
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	start := h.f.CommitStats()
	for i := range 10 {
		h.putJob("j"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != start.Commits {
		t.Fatalf("10 batches committed %d times before any reader, want none", got.Commits-start.Commits)
	}
	if c := h.f.CommittedIndex(); c >= h.f.AppliedIndex() {
		t.Fatalf("committed index %d with applied %d: nothing should be committed yet", c, h.f.AppliedIndex())
	}
	// A read of a list sees them all, committing them in one transaction.
	if jobs, _, err := h.f.Jobs(); err != nil || len(jobs) != 11 || jobs[10].ID != "jj" {
		t.Fatalf("a read misses an applied batch: %d jobs, %v", len(jobs), err)
	}
	got := h.f.CommitStats()
	if got.Commits != start.Commits+1 || got.Entries != start.Entries+10 {
		t.Fatalf("stats %+v after the read, from %+v: want one commit of 10 entries", got, start)
	}
	if c := h.f.CommittedIndex(); c != h.f.AppliedIndex() {
		t.Fatalf("committed index %d after a read, applied %d", c, h.f.AppliedIndex())
	}

	// MaxEntries commits without a reader.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 3})
	before := h.f.CommitStats()
	for i := range 3 {
		h.putJob("m"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != before.Commits+1 {
		t.Fatalf("3 entries with MaxEntries 3: %d commits", got.Commits-before.Commits)
	}

	// MaxWrites commits without a reader, at the first batch that brings
	// the writes held to the bound.
	h.commitByWrites()

	// The interval commits without a reader.
	h.commitByInterval()

	// A snapshot holds everything applied.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("snap", wire.JobConfig{})
	want := h.f.AppliedIndex()
	dst := newHarness(t)
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if got := dst.f.AppliedIndex(); got != want || dst.job("snap") == nil {
		t.Fatalf("restored snapshot at index %d (want %d), job %v", got, want, dst.job("snap"))
	}

	// Close commits: reopened, the file holds every batch.
	h.putJob("closed", wire.JobConfig{})
	want = h.f.AppliedIndex()
	h.reopen()
	if got := h.f.AppliedIndex(); got != want || h.job("closed") == nil {
		t.Fatalf("reopened at %d, want %d", got, want)
	}
}

// commitByWrites checks CommitPolicy.MaxWrites: with a bound of one write
// every batch commits; with a bound of w, a transaction commits at the
// first batch that brings its writes to w or more, and not before.
func (h *harness) commitByWrites() {
	h.t.Helper()
	if err := h.f.Flush(); err != nil {
		h.t.Fatal(err)
	}
	writes := func(s fsm.CommitStats) uint64 { return s.Ops.Puts + s.Ops.Deletes }
	// Each batch alone: what one job's put writes.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000, MaxWrites: 1})
	perBatch := uint64(0)
	for i := range 3 {
		before := h.f.CommitStats()
		h.putJob(fmt.Sprintf("w1-%d", i), wire.JobConfig{})
		got := h.f.CommitStats()
		if got.Commits != before.Commits+1 {
			h.t.Fatalf("a batch with MaxWrites 1 made %d commits, want 1", got.Commits-before.Commits)
		}
		perBatch = max(perBatch, writes(got)-writes(before))
	}
	if perBatch == 0 {
		h.t.Fatal("a job's put wrote nothing")
	}
	// A bound of three batches' writes: commits at the third batch.
	bound := 3*perBatch - perBatch/2
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000, MaxWrites: int(bound)})
	start := h.f.CommitStats()
	last := start
	for i := range 12 {
		h.putJob(fmt.Sprintf("wn-%d", i), wire.JobConfig{})
		got := h.f.CommitStats()
		if got.Commits == last.Commits {
			continue
		}
		if n := writes(got) - writes(last); n < bound || n >= bound+perBatch {
			h.t.Fatalf("a commit with MaxWrites %d held %d writes (a batch writes up to %d)", bound, n, perBatch)
		}
		last = got
	}
	if n := last.Commits - start.Commits; n < 3 {
		h.t.Fatalf("12 batches of up to %d writes each with MaxWrites %d: %d commits, want at least 3", perBatch, bound, n)
	}
	// No bound: nothing commits without a reader.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	if err := h.f.Flush(); err != nil {
		h.t.Fatal(err)
	}
	before := h.f.CommitStats()
	for i := range 12 {
		h.putJob(fmt.Sprintf("w0-%d", i), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != before.Commits {
		h.t.Fatalf("12 batches with no bound of writes made %d commits", got.Commits-before.Commits)
	}
}

// commitByInterval applies one entry under a commit interval of 10 ms
// and waits until the timer committed it, no reader asking.
func (h *harness) commitByInterval() {
	h.t.Helper()
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: 10 * time.Millisecond, MaxEntries: 1000})
	h.putJob("timer", wire.JobConfig{})
	deadline := time.Now().Add(10 * time.Second)
	for h.f.CommittedIndex() != h.f.AppliedIndex() {
		if time.Now().After(deadline) {
			h.t.Fatal("the open transaction was not committed after its interval")
		}
		time.Sleep(time.Millisecond)
	}
}

// commitLog records what SetCommitObserver tells.
type commitLog struct {
	mu   sync.Mutex
	seen []observedCommit
}

type observedCommit struct {
	reason fsm.CommitReason
	took   time.Duration
}

func (l *commitLog) observe(r fsm.CommitReason, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, observedCommit{r, took})
}

// take returns the commits observed since the last take.
func (l *commitLog) take() []observedCommit {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.seen
	l.seen = nil
	return out
}

// TestCommitObserverReasons: each commit is reported once, with why it
// was made and a time, as CommitStats counts it.
func TestCommitObserverReasons(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	var log commitLog
	h.f.SetCommitObserver(log.observe)
	last := h.f.CommitStats()
	expect := func(step string, reason fsm.CommitReason, entries uint64) {
		t.Helper()
		got, now := log.take(), h.f.CommitStats()
		if len(got) != 1 || got[0].reason != reason || got[0].took <= 0 {
			t.Fatalf("%s: observed %+v, want one %q commit taking some time", step, got, reason)
		}
		if now.Commits != last.Commits+1 || now.Entries != last.Entries+entries {
			t.Fatalf("%s: CommitStats moved by %d commits of %d entries, want 1 of %d",
				step, now.Commits-last.Commits, now.Entries-last.Entries, entries)
		}
		last = now
	}

	for i := range 4 {
		h.putJob("r"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := log.take(); len(got) != 0 {
		t.Fatalf("commits observed before any was due: %+v", got)
	}
	if _, _, err := h.f.Jobs(); err != nil {
		t.Fatal(err)
	}
	expect("a list read", fsm.CommitRead, 4)

	h.putJob("flushed", wire.JobConfig{})
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	expect("Flush", fsm.CommitRead, 1)

	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 3})
	for i := range 3 {
		h.putJob("m"+string(rune('a'+i)), wire.JobConfig{})
	}
	expect("MaxEntries", fsm.CommitDue, 3)

	h.commitByInterval()
	expect("the interval", fsm.CommitDue, 1)

	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("snap", wire.JobConfig{})
	snap := snapshotOf(t, h.f)
	expect("a snapshot", fsm.CommitSnapshot, 1)

	dst := newHarness(t)
	dst.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	var dstLog commitLog
	dst.f.SetCommitObserver(dstLog.observe)
	dst.putJob("overwritten", wire.JobConfig{})
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := dstLog.take(); len(got) != 1 || got[0].reason != fsm.CommitRestore {
		t.Fatalf("a restore: observed %+v, want one restore commit", got)
	}

	h.putJob("closed", wire.JobConfig{})
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	expect("close", fsm.CommitClose, 1)
	h.f = openFSM(t, h.path)
}

// TestLeaderLoopReadsDoNotCommit: the scans of the leader's loops (new
// blobs to observe, expired epochs and intents, GC candidates, blobs
// being deleted, tombstones) see every applied entry without committing
// the open transaction (viewLatest): they run every pass, and a commit for
// each pass cost more than the apply it would have shared.
func TestLeaderLoopReadsDoNotCommit(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "t", "state", "incremental"), task(t, "u", "state"))
	h.intents("j", 1, "j/t/a", "j/t/b")
	h.begin("j", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "j/t/a", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}}))
	if c := h.f.CommittedIndex(); c >= h.f.AppliedIndex() {
		t.Fatalf("committed index %d with applied %d: the ack should be in the open transaction", c, h.f.AppliedIndex())
	}
	committed, stats := h.f.CommittedIndex(), h.f.CommitStats()
	later := h.now.Add(24 * time.Hour)

	if keys, err := h.f.Unobserved(10); err != nil || len(keys) != 1 || keys[0] != "j/t/a" {
		t.Fatalf("Unobserved = %v %v, want the blob the open transaction committed", keys, err)
	}
	if exp, err := h.f.ExpiredEpochs(later, 10); err != nil || len(exp) != 1 || exp[0].Epoch != 1 {
		t.Fatalf("ExpiredEpochs = %v %v, want epoch 1 (begun in the open transaction)", exp, err)
	}
	if _, ok := h.f.NextDeadline(); !ok {
		t.Fatal("NextDeadline misses the epoch begun in the open transaction")
	}
	if keys, err := h.f.ExpiredIntents(later, 10); err != nil || len(keys) != 1 || keys[0] != "j/t/b" {
		t.Fatalf("ExpiredIntents = %v %v, want the intent the ack left", keys, err)
	}
	if _, err := h.f.GCCandidates(later, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := h.f.Deleting(10); err != nil {
		t.Fatal(err)
	}
	if _, err := h.f.GoneBefore(later, 10); err != nil {
		t.Fatal(err)
	}
	if got := h.f.CommitStats(); got.Commits != stats.Commits || h.f.CommittedIndex() != committed {
		t.Fatalf("the leader's scans committed: %d commits, committed index %d -> %d", got.Commits-stats.Commits, committed, h.f.CommittedIndex())
	}
}

// TestFollowerCommitsLessOften: while the member follows, the open
// transaction is committed by CommitPolicy.FollowerInterval; once it
// leads, by Interval.
func TestFollowerCommitsLessOften(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Nanosecond, FollowerInterval: time.Hour, MaxEntries: 1000})
	start := h.f.CommitStats()
	for i := range 3 {
		h.putJob("f"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != start.Commits {
		t.Fatalf("a follower committed %d times within its hour-long interval", got.Commits-start.Commits)
	}
	h.f.SetLeading(true)
	h.putJob("leader", wire.JobConfig{})
	if got := h.f.CommitStats(); got.Commits == start.Commits || h.f.CommittedIndex() != h.f.AppliedIndex() {
		t.Fatalf("a leader with a 1ns interval did not commit its batch: %+v, committed %d of %d", got, h.f.CommittedIndex(), h.f.AppliedIndex())
	}
	h.f.SetLeading(false)
	led := h.f.CommitStats()
	h.putJob("follower-again", wire.JobConfig{})
	if got := h.f.CommitStats(); got.Commits != led.Commits {
		t.Fatal("a member that stopped leading committed at the leader's interval")
	}
}

// TestRequestPathReadsDoNotCommit: the point reads made on a request's
// path (the token of an authenticated request, the URL and slot keys, an
// upload-slot call's job check) see every applied entry, a revocation at
// once, without committing the open transaction: with a commit per
// request, the leader's state file would be committed per request instead
// of per interval.
func TestRequestPathReadsDoNotCommit(t *testing.T) {
	h := newHarness(t)
	committed, stats := h.committedJob("j")

	// All of these are applied to the open transaction only.
	h.start("j", "a1", task(t, "t", "state"))
	mustOK(t, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey}))
	urlKey := bytes.Repeat([]byte{7}, 32)
	mustOK(t, h.mustApply(fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: urlKey}))
	tok := fsm.TokenCreate{Accessor: "0123456789abcdef", Hash: wire.TokenHash("s-w"), Role: wire.RoleWorker, Job: "j"}
	mustOK(t, h.mustApply(fsm.CmdTokenCreate, tok))

	if _, err := h.f.CheckUploadSlots("j", 1); err != nil {
		t.Fatalf("CheckUploadSlots of the attempt started in the open transaction: %v", err)
	}
	if key, err := h.f.SlotKey(); err != nil || !bytes.Equal(key, testSlotKey) {
		t.Fatalf("SlotKey = %x, %v", key, err)
	}
	if key, err := h.f.URLKey(); err != nil || !bytes.Equal(key, urlKey) {
		t.Fatalf("URLKey = %x, %v", key, err)
	}
	if got, err := h.f.TokenByHash(tok.Hash); err != nil || got == nil || got.Accessor != tok.Accessor {
		t.Fatalf("TokenByHash = %+v, %v", got, err)
	}
	mustOK(t, h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: tok.Accessor}))
	if got, err := h.f.TokenByHash(tok.Hash); err != nil || got != nil {
		t.Fatalf("TokenByHash after the revocation = %+v, %v", got, err)
	}
	h.start("j", "a2", task(t, "t", "state"))
	if _, err := h.f.CheckUploadSlots("j", 1); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("CheckUploadSlots of the attempt superseded in the open transaction: %v, want fenced", err)
	}
	if got := h.f.CommitStats(); got.Commits != stats.Commits || h.f.CommittedIndex() != committed {
		t.Fatalf("request-path reads committed: %d commits, committed index %d -> %d", got.Commits-stats.Commits, committed, h.f.CommittedIndex())
	}
}

// TestPointReadsDoNotCommit: the API's point reads of a job (the job, an
// attempt, an epoch with its acks, a blob) see every applied entry
// without committing the open transaction: a coordinator polling or
// blocking on an epoch would otherwise commit the state file once per
// read (every applied batch wakes a blocking read).
func TestPointReadsDoNotCommit(t *testing.T) {
	h := newHarness(t)
	committed, stats := h.committedJob("j")

	// All of these are applied to the open transaction only.
	h.start("j", "a1", task(t, "t", "state"), task(t, "u", "state"))
	h.begin("j", 1, 1)
	h.ack("j", 1, 1, "t", map[fsm.Kind][]byte{"state": []byte("x")})
	mustOK(t, h.mustApply(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Keys: []string{"j/t/k1"}, LeaseUntil: h.now.Add(time.Hour)}))

	for i := range 3 { // polling
		if j, _, err := h.f.Job("j"); err != nil || j.Generation != 1 || j.LastEpoch != 1 {
			t.Fatalf("Job, poll %d: %+v, %v", i, j, err)
		}
		if a, _, err := h.f.Attempt("j", 0); err != nil || a.Generation != 1 || len(a.TaskList) != 2 {
			t.Fatalf("Attempt, poll %d: %+v, %v", i, a, err)
		}
		if e, _, err := h.f.Epoch("j", 1); err != nil || len(e.Acks) != 1 || len(e.Stragglers) != 1 || e.Stragglers[0] != "u" {
			t.Fatalf("Epoch, poll %d: %+v, %v", i, e, err)
		}
		if b, _, err := h.f.Blob("j/t/k1"); err != nil || b.State != wire.BlobIntent {
			t.Fatalf("Blob, poll %d: %+v, %v", i, b, err)
		}
	}
	if got := h.f.CommitStats(); got.Commits != stats.Commits || h.f.CommittedIndex() != committed {
		t.Fatalf("point reads committed: %d commits, committed index %d -> %d", got.Commits-stats.Commits, committed, h.f.CommittedIndex())
	}
}

// committedJob creates job, commits it, and sets a commit policy under
// which nothing applied after is committed unless a read commits it; it
// returns the committed index and the commit counts then.
func (h *harness) committedJob(job string) (uint64, fsm.CommitStats) {
	h.t.Helper()
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob(job, wire.JobConfig{})
	if err := h.f.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return h.f.CommittedIndex(), h.f.CommitStats()
}

// replayLoad applies, as a leader, every table of fuzzState, the ack load
// with observations, a job's deletion and more acks, and returns the
// harness (its entries in h.logs), every bucket and the state hash.
func replayLoad(t *testing.T) (*harness, fsm.Dump, string) {
	l := newAckLoad(t, fsm.DefaultCommitPolicy, nil, true)
	h := l.h
	h.f.SetLeading(true)
	if err := h.f.Flush(); err != nil { // the next transaction is a leader's
		t.Fatal(err)
	}
	fuzzState(h)
	l.observe = true
	l.run(t, 6*ackLoadJobs*ackLoadTasks)
	mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "j3", Force: true}))
	l.deleted = map[int]bool{3: true}
	l.run(t, 4*(ackLoadJobs-1)*ackLoadTasks)
	return h, h.dump(), h.hash()
}

// TestReplayUnderEveryRoleAndPolicy: the entries of a state that touches
// every table (fuzzState: manifests with materializations and dropped
// segments, inline payloads, pinned, aborted and pending epochs, intents,
// blobs in every GC state) and of the ack load with observations, with one
// of its jobs deleted halfway (its blobs read by a scan and released),
// applied
// again to new members that lead or follow, commit after every entry,
// every few entries or by the hour, in batches of random sizes, leave
// each the state the first one has: the same hash, every bucket byte for
// byte. Group commits and the buckets whose puts wait for the commit
// (deferredBuckets, more of them in a follower's transactions) change
// when the file is written, never what it holds.
func TestReplayUnderEveryRoleAndPolicy(t *testing.T) {
	h, want, wantHash := replayLoad(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, leading := range []bool{true, false} {
		for _, p := range []fsm.CommitPolicy{
			{Interval: 0, MaxEntries: 1},
			{Interval: time.Hour, MaxEntries: 7},
			{Interval: time.Hour, MaxEntries: 1_000_000},
		} {
			name := fmt.Sprintf("leading=%v/entries=%d", leading, p.MaxEntries)
			f := openFSM(t, filepath.Join(t.TempDir(), "fsm.db"))
			f.SetLeading(leading)
			f.SetCommitPolicy(p)
			for i := 0; i < len(h.logs); {
				n := min(1+r.IntN(40), len(h.logs)-i)
				f.ApplyBatch(h.logs[i : i+n])
				i += n
			}
			got, err := fsm.DumpBuckets(f)
			if err != nil {
				t.Fatal(err)
			}
			_, sum, err := f.StateHash()
			if err != nil {
				t.Fatal(err)
			}
			if sum != wantHash {
				t.Errorf("%s: state hash %s, want %s", name, sum, wantHash)
			}
			for b, kv := range want {
				if !maps.Equal(kv, got[b]) {
					t.Errorf("%s: bucket %s holds %d keys, want %d, or values differ", name, b, len(got[b]), len(kv))
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(want["blobs"]) == 0 || len(want["records"]) == 0 {
		t.Fatal("the state holds no blob or lineage record")
	}
}
