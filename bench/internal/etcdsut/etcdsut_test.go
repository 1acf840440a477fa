package etcdsut

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"

	"github.com/metastore/metastore/bench/internal/peertest"
)

func TestCluster(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	peertest.Run(t, "etcd", peertest.Lean, func() peertest.Peer { return New() })
}

func TestClusterCAS(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	peertest.Run(t, "etcd-cas", peertest.CAS, func() peertest.Peer { return NewCAS() })
}

// TestClusterBatched: the lean design with its acks batched, one ack
// request in flight at most, so that the second of two concurrent acks
// travels in a batch (a nested transaction).
func TestClusterBatched(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	var made []*System // Run makes more than the one it drives
	peertest.Run(t, "etcd-batched", peertest.Lean, func() peertest.Peer { s := newBatched(1); made = append(made, s); return s })
	var batches int64
	for _, s := range made {
		batches += s.acks.batches.Load()
	}
	if batches == 0 {
		t.Error("no ack travelled in a batch")
	}
	t.Logf("%d batches", batches)
}

// TestBatchedAckFenced: an ack of a superseded generation that travels in
// a batch beside a current one is fenced by its own nested guard; the
// other is applied.
func TestBatchedAckFenced(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newBatched(1)
	if err := s.Start(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	const job = "j"
	if err := s.CreateJob(ctx, job, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	old, _, err := s.newGeneration(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginEpoch(ctx, job, 1); err != nil {
		t.Fatal(err)
	}
	cli, err := s.client()
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	s.acks.mu.Lock()
	s.acks.gate = gate
	s.acks.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- s.Ack(ctx, job, "a", 1, nil) }() // alone, held at the gate
	waitUntil(t, func() bool { s.acks.mu.Lock(); defer s.acks.mu.Unlock(); return s.acks.inflight == 1 })
	second := make(chan error, 1)
	go func() { second <- s.ackAs(ctx, cli, job, "b", old, 1, nil) }()
	waitUntil(t, func() bool { s.acks.mu.Lock(); defer s.acks.mu.Unlock(); return len(s.acks.queue) == 1 })
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("the current generation's ack: %v", err)
	}
	if err := <-second; !errors.Is(err, sut.ErrFenced) {
		t.Fatalf("the superseded generation's ack in a batch: %v, want fenced", err)
	}
	if s.acks.batches.Load() != 1 {
		t.Fatalf("%d batches, want 1", s.acks.batches.Load())
	}
}

// waitUntil waits for cond, checked every millisecond, for at most 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
