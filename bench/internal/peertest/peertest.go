// Package peertest is the test every baseline system of the benchmark
// (etcd, ZooKeeper) passes against a real cluster: the same checks, so the
// baselines stay comparable. Each system's package calls Run from its own
// test, with the test-only hooks of Peer defined in its export_test.go.
package peertest

import (
	"context"
	"fmt"
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
	// guarded commit (nil: none).
	SetBeforeCommit(func(job, task string))
	// EpochState reads an epoch's record.
	EpochState(ctx context.Context, job string, epoch uint64) (acks int, completed bool, err error)
}

func segments(keys []string, firstSeq uint64) []sut.Segment {
	segs := make([]sut.Segment, len(keys))
	for i, k := range keys {
		segs[i] = sut.Segment{Key: k, Offset: int64(i) * 4096, Length: 4096, FirstSeq: firstSeq + uint64(i)*10, LastSeq: firstSeq + uint64(i)*10 + 9}
	}
	return segs
}

func ack(ctx context.Context, t *testing.T, s Peer, job, task string, epoch uint64, n int) {
	t.Helper()
	keys, err := s.Keys(ctx, job, task, n)
	if err != nil {
		t.Error(err)
		return
	}
	if err := s.Ack(ctx, job, task, epoch, segments(keys, epoch*1000)); err != nil {
		t.Errorf("ack %s epoch %d: %v", task, epoch, err)
	}
}

// Run tests the peer system newSys makes (name is for the logs): a
// cluster started once (and refused a second time, or in a used
// directory), a job of two tasks whose acks conflict and are retried, 30
// epochs acknowledged concurrently, manifests read from the leader and a
// follower, a preload of 5,000 segments, the leader killed, a new one
// serving writes, the killed member restarted.
func Run(t *testing.T, name string, newSys func() Peer) {
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

	const job, perAck = "job", 3
	if err := s.CreateJob(ctx, job, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJob(ctx, job, []string{"a"}); err == nil {
		t.Fatal("a second CreateJob of the same job succeeded")
	}

	// Epoch 1: task b's ack commits between task a's read and its
	// commit, so a's guarded transaction must fail once and be redone.
	if err := s.BeginEpoch(ctx, job, 1); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	s.SetBeforeCommit(func(_, task string) {
		if task == "a" {
			once.Do(func() { ack(ctx, t, s, job, "b", 1, perAck) })
		}
	})
	ack(ctx, t, s, job, "a", 1, perAck)
	s.SetBeforeCommit(nil)
	if s.Retries() == 0 {
		t.Error("a forced conflict was not counted as a retry")
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
			wg.Go(func() { ack(ctx, t, s, job, task, e, perAck) })
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
	ack(ctx, t, s, job, "a", epochs+1, perAck)
	for e := uint64(1); e <= epochs+1; e++ {
		acks, completed, err := s.EpochState(ctx, job, e)
		if err != nil {
			t.Fatal(err)
		}
		wantAcks := 2
		if e == epochs+1 {
			wantAcks = 1
		}
		if acks != wantAcks || completed != (wantAcks == 2) {
			t.Errorf("epoch %d: %d acks (completed %v), want %d acks", e, acks, completed, wantAcks)
		}
	}
	checkManifest(ctx, t, s, job, "a", (epochs+1)*perAck)
	checkManifest(ctx, t, s, job, "b", epochs*perAck)

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
	ack(ctx, t, s, "big", "only", next, perAck)
	t.Logf("%s killed; %s leads and committed an epoch after %v", old.ID, leader.ID, time.Since(begun).Round(time.Millisecond))
	checkManifest(ctx, t, s, "big", "only", preloaded+perAck)

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
