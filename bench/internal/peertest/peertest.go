// Package peertest is the test every baseline system of the benchmark
// (etcd, ZooKeeper) passes against a real cluster: the same checks, so the
// baselines stay comparable. Each system's package calls Run from its own
// test, with the test-only hooks of Peer defined in its export_test.go.
package peertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

// Peer is a baseline system with the hooks the test needs.
type Peer interface {
	sut.System
	// Retries counts compare-and-swap conflicts retried.
	Retries() uint64
	// PeerVersion is the server's version.
	PeerVersion() string
	// SetBeforeCommit sets a function run between an ack's read and its
	// guarded commit (nil: none; compare-and-swap design only).
	SetBeforeCommit(func(job, task string))
	// EpochState reads an epoch's record.
	EpochState(ctx context.Context, job string, epoch uint64) (acks int, completed bool, err error)
	// Segments reads a task's manifest back, decoded, in ack order.
	Segments(ctx context.Context, job, task string) ([]sut.Segment, error)
}

// FencedPeer is a peer of the lean design: acks and epoch begins carry the
// job's generation and are refused once a newer one has been set.
type FencedPeer interface {
	Peer
	// NewGeneration sets the job's next generation, as a new coordinator
	// does, and returns the old and the new one.
	NewGeneration(ctx context.Context, job string) (old, new uint64, err error)
	// AckAs is Ack made for generation generation.
	AckAs(ctx context.Context, generation uint64, job, task string, epoch uint64, add []sut.Segment) error
	// BeginEpochAs is BeginEpoch made for generation generation.
	BeginEpochAs(ctx context.Context, generation uint64, job string, epoch uint64) error
}

// Design tells Run which checks apply to a peer.
type Design int

const (
	// CAS peers read and compare-and-swap records the tasks of a job
	// share: Run forces a conflict and requires a retry.
	CAS Design = iota
	// Lean peers (FencedPeer) share no record between the tasks of a
	// job: Run requires a stale generation to be refused.
	Lean
)

func segments(keys []string, firstSeq uint64) []sut.Segment {
	segs := make([]sut.Segment, len(keys))
	for i, k := range keys {
		segs[i] = sut.Segment{Key: k, Offset: int64(i) * 4096, Length: 4096, FirstSeq: firstSeq + uint64(i)*10, LastSeq: firstSeq + uint64(i)*10 + 9}
	}
	return segs
}

// acked records the segments of the acks that succeeded, per job/task,
// in order.
type acked struct {
	mu   sync.Mutex
	segs map[string][]sut.Segment
}

func (a *acked) add(job, task string, segs []sut.Segment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.segs == nil {
		a.segs = map[string][]sut.Segment{}
	}
	a.segs[job+"/"+task] = append(a.segs[job+"/"+task], segs...)
}

func (a *acked) of(job, task string) []sut.Segment {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.segs[job+"/"+task])
}

func (a *acked) ack(ctx context.Context, t *testing.T, s Peer, job, task string, epoch uint64, n int) {
	t.Helper()
	keys, err := s.Keys(ctx, job, task, n)
	if err != nil {
		t.Error(err)
		return
	}
	segs := segments(keys, epoch*1000)
	if err := s.Ack(ctx, job, task, epoch, segs); err != nil {
		t.Errorf("ack %s epoch %d: %v", task, epoch, err)
		return
	}
	a.add(job, task, segs)
}

// readBack requires the task's manifest, read back decoded, to be exactly
// the segments acknowledged for it.
func (a *acked) readBack(ctx context.Context, t *testing.T, s Peer, job, task string) {
	t.Helper()
	got, err := s.Segments(ctx, job, task)
	if err != nil {
		t.Fatal(err)
	}
	want := a.of(job, task)
	if !slices.Equal(got, want) {
		t.Fatalf("manifest of %s/%s read back: %d segments %v\nwant %d acknowledged %v", job, task, len(got), got, len(want), want)
	}
}

// Run tests the peer system newSys makes (name is for the logs; design
// says which design it is): a cluster started once (and refused a second
// time, or in a used directory), a job of two tasks whose first epoch's
// acks conflict and are retried (CAS) or are fenced by a stale generation
// (Lean), 30 epochs acknowledged concurrently and completed, manifests
// read back from the leader and a follower, a preload of 5,000 segments,
// the leader killed, a new one serving writes, the killed member
// restarted.
func Run(t *testing.T, name string, design Design, newSys func() Peer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, dir := newSys(), t.TempDir()
	start := time.Now()
	if err := s.Start(ctx, dir); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := s.Start(ctx, t.TempDir()); err == nil {
		t.Fatal("a second Start of a started system succeeded")
	}
	if other := newSys(); other.Start(ctx, dir) == nil {
		other.Stop()
		t.Fatal("Start in a directory that holds a cluster's data succeeded")
	}
	t.Logf("%s %s: three members up in %v", name, s.PeerVersion(), time.Since(start).Round(time.Millisecond))
	if got := len(s.Members()); got != 3 {
		t.Fatalf("%d members running, want 3", got)
	}

	var a acked
	const job, perAck = "job", 3
	if err := s.CreateJob(ctx, job, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJob(ctx, job, []string{"a"}); err == nil {
		t.Fatal("a second CreateJob of the same job succeeded")
	}

	if err := s.BeginEpoch(ctx, job, 1); err != nil {
		t.Fatal(err)
	}
	switch design {
	case CAS:
		// Epoch 1: task b's ack commits between task a's read and its
		// commit, so a's guarded transaction must fail once and be
		// redone.
		var once sync.Once
		s.SetBeforeCommit(func(_, task string) {
			if task == "a" {
				once.Do(func() { a.ack(ctx, t, s, job, "b", 1, perAck) })
			}
		})
		a.ack(ctx, t, s, job, "a", 1, perAck)
		s.SetBeforeCommit(nil)
		if s.Retries() == 0 {
			t.Error("a forced conflict was not counted as a retry")
		}
	case Lean:
		var wg sync.WaitGroup
		for _, task := range []string{"a", "b"} {
			wg.Go(func() { a.ack(ctx, t, s, job, task, 1, perAck) })
		}
		wg.Wait()
		if s.Retries() != 0 {
			t.Errorf("%d compare-and-swap retries in the lean design", s.Retries())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if err := s.Ack(ctx, job, "a", 1, nil); err == nil {
		t.Error("a second ack of epoch 1 by task a succeeded")
	}

	// Epochs 2..epochs: both tasks ack each epoch at once.
	const epochs = 30
	begun := time.Now()
	for e := uint64(2); e <= epochs; e++ {
		if err := s.BeginEpoch(ctx, job, e); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, task := range []string{"a", "b"} {
			wg.Go(func() { a.ack(ctx, t, s, job, task, e, perAck) })
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	elapsed := time.Since(begun)
	t.Logf("%d concurrent acks in %v (%.0f acks/s with epoch begins), %d CAS retries", 2*(epochs-1), elapsed.Round(time.Millisecond), float64(2*(epochs-1))/elapsed.Seconds(), s.Retries())
	if err := s.BeginEpoch(ctx, job, epochs); err == nil {
		t.Error("beginning an epoch again succeeded")
	}
	if err := s.BeginEpoch(ctx, job, epochs+1); err != nil {
		t.Fatal(err)
	}
	a.ack(ctx, t, s, job, "a", epochs+1, perAck)
	for e := uint64(1); e <= epochs+1; e++ {
		wantAcks := 2
		if e == epochs+1 {
			wantAcks = 1
		}
		checkEpoch(ctx, t, s, job, e, wantAcks, wantAcks == 2)
	}
	checkManifest(ctx, t, s, job, "a", (epochs+1)*perAck)
	checkManifest(ctx, t, s, job, "b", epochs*perAck)
	a.readBack(ctx, t, s, job, "a")
	a.readBack(ctx, t, s, job, "b")

	if design == Lean {
		fence(ctx, t, s.(FencedPeer), &a)
	}

	// Preload 5,000 segments and read them back.
	const preloaded = 5000
	if _, err := s.Preload(ctx, "big", "only", preloaded); err == nil {
		t.Fatal("Preload of a job that does not exist succeeded")
	}
	if err := s.CreateJob(ctx, "big", []string{"only"}); err != nil {
		t.Fatal(err)
	}
	begun = time.Now()
	next, err := s.Preload(ctx, "big", "only", preloaded)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("preloaded %d segments in %v, next epoch %d", preloaded, time.Since(begun).Round(time.Millisecond), next)
	checkManifest(ctx, t, s, "big", "only", preloaded)
	for _, stale := range []bool{false, true} {
		begun = time.Now()
		n, err := s.ReadManifest(ctx, "big", "only", stale)
		if err != nil || n != preloaded {
			t.Fatalf("ReadManifest(stale=%v) = %d, %v", stale, n, err)
		}
		t.Logf("read %d segments (stale=%v) in %v", n, stale, time.Since(begun).Round(time.Millisecond))
	}

	// Kill the leader: another member leads and serves writes.
	old, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(old); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members() {
		if m.ID == old.ID {
			t.Fatalf("killed %s is listed as running", old.ID)
		}
	}
	begun = time.Now()
	leader, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader.ID == old.ID {
		t.Fatalf("killed %s still leads", old.ID)
	}
	if err := s.BeginEpoch(ctx, "big", next); err != nil {
		t.Fatal(err)
	}
	a.ack(ctx, t, s, "big", "only", next, perAck)
	t.Logf("%s killed; %s leads and committed an epoch after %v", old.ID, leader.ID, time.Since(begun).Round(time.Millisecond))
	checkManifest(ctx, t, s, "big", "only", preloaded+perAck)
	checkEpoch(ctx, t, s, "big", next, 1, true)

	// Restart the killed member: it rejoins and serves.
	begun = time.Now()
	if err := s.Restart(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s restarted and rejoined in %v", old.ID, time.Since(begun).Round(time.Millisecond))
	if got := len(s.Members()); got != 3 {
		t.Fatalf("%d members running after the restart, want 3", got)
	}
	checkManifest(ctx, t, s, "big", "only", preloaded+perAck)
}

// fence checks the lean design's fence on a job of two tasks: task a acks
// epoch 1, a new generation takes over, and then task b's ack of epoch 1
// and an epoch begun for the old generation are refused and write
// nothing, while the new generation's epoch 2 is acknowledged by both and
// completes.
func fence(ctx context.Context, t *testing.T, s FencedPeer, a *acked) {
	t.Helper()
	const job, perAck = "fenced", 3
	if err := s.CreateJob(ctx, job, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginEpoch(ctx, job, 1); err != nil {
		t.Fatal(err)
	}
	a.ack(ctx, t, s, job, "a", 1, perAck)
	if t.Failed() {
		t.FailNow()
	}
	old, gen, err := s.NewGeneration(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if gen <= old {
		t.Fatalf("new generation %d after %d", gen, old)
	}
	keys, err := s.Keys(ctx, job, "b", perAck)
	if err != nil {
		t.Fatal(err)
	}
	for _, epoch := range []uint64{1, 2} {
		err := s.AckAs(ctx, old, job, "b", epoch, segments(keys, 1))
		if !errors.Is(err, sut.ErrFenced) {
			t.Errorf("ack of epoch %d by task b at the superseded generation %d: %v, want %v", epoch, old, err, sut.ErrFenced)
		}
	}
	if err := s.BeginEpochAs(ctx, old, job, 2); !errors.Is(err, sut.ErrFenced) {
		t.Errorf("epoch 2 begun at the superseded generation %d: %v, want %v", old, err, sut.ErrFenced)
	}
	a.readBack(ctx, t, s, job, "b") // nothing acknowledged: nothing written
	if t.Failed() {
		t.FailNow()
	}
	if err := s.BeginEpoch(ctx, job, 2); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{"a", "b"} {
		a.ack(ctx, t, s, job, task, 2, perAck)
	}
	checkEpoch(ctx, t, s, job, 1, 1, false)
	checkEpoch(ctx, t, s, job, 2, 2, true)
	a.readBack(ctx, t, s, job, "a")
	a.readBack(ctx, t, s, job, "b")
}

// checkEpoch waits until the epoch has acks acks and is completed or not
// as complete says: a lean peer's coordinator writes the completion after
// its watch has seen the last ack.
func checkEpoch(ctx context.Context, t *testing.T, s Peer, job string, epoch uint64, acks int, complete bool) {
	t.Helper()
	var gotAcks int
	var gotComplete bool
	err := sut.WaitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		var err error
		gotAcks, gotComplete, err = s.EpochState(ctx, job, epoch)
		if gotAcks > acks || (gotComplete && !complete) {
			return false, fmt.Errorf("%d acks, completed %v", gotAcks, gotComplete)
		}
		return gotAcks == acks && gotComplete == complete, err
	})
	if err != nil {
		t.Fatalf("epoch %d of %s: %v (last read: %d acks, completed %v; want %d acks, completed %v)", epoch, job, err, gotAcks, gotComplete, acks, complete)
	}
}

// checkManifest waits until the manifest read from a follower has n
// segments (a follower may lag) and requires the linearizable read to have
// exactly n.
func checkManifest(ctx context.Context, t *testing.T, s Peer, job, task string, n int) {
	t.Helper()
	got, err := s.ReadManifest(ctx, job, task, false)
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("manifest of %s/%s has %d segments, want %d", job, task, got, n)
	}
	err = sut.WaitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		got, err = s.ReadManifest(ctx, job, task, true)
		if got > n {
			return false, fmt.Errorf("stale manifest of %s/%s has %d segments, more than %d", job, task, got, n)
		}
		return got == n, err
	})
	if err != nil {
		t.Fatalf("stale manifest of %s/%s: %v (last read %d segments, want %d)", job, task, err, got, n)
	}
}
