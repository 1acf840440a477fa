package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// proposeMembers proposes count member upserts at once and returns, when
// all are answered, the index each was applied at, and the errors.
func proposeMembers(n *Node, prefix string, count int) ([]uint64, []error) {
	idx, errs := make([]uint64, count), make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, idx[i], errs[i] = n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: fmt.Sprintf("%s%d", prefix, i), RaftAddr: "x.example:1", HTTPAddr: "x.example:2"})
		})
	}
	wg.Wait()
	return idx, errs
}

// TestApplyInflightGroupsCommands: with --apply-inflight 1 and an entry in
// flight (its slot held here), commands proposed meanwhile are not handed
// to Raft: they wait queued and, once the slot frees, all go in ONE entry.
func TestApplyInflightGroupsCommands(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyInflight = 1 })
	n.inflight <- struct{}{} // an entry in flight
	before := n.fsm.AppliedIndex()
	const count = 10
	var (
		idx  []uint64
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		idx, errs = proposeMembers(n, "m", count)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.proposals) < count-1 { // the proposer holds one, waiting for the slot; the rest queue
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands queued; applied index %d -> %d", len(n.proposals), count, before, n.fsm.AppliedIndex())
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	if got := n.fsm.AppliedIndex(); got != before {
		t.Fatalf("applied index moved %d -> %d with the slot held", before, got)
	}
	<-n.inflight // the entry in flight is answered
	<-done
	for i := range count {
		if errs[i] != nil {
			t.Fatalf("command %d: %v", i, errs[i])
		}
		if idx[i] != idx[0] {
			t.Fatalf("commands answered at indexes %v, want one entry", idx)
		}
	}
}

// TestApplyInflightShutdown: commands waiting for an in-flight slot when
// the member shuts down are answered ErrShutdown (never proposed), and
// the proposer does not hang.
func TestApplyInflightShutdown(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyInflight = 1 })
	n.inflight <- struct{}{}
	var (
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		_, errs = proposeMembers(n, "s", 5)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.proposals) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 commands queued", len(n.proposals))
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = n.Shutdown(ctx) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("commands waiting for a slot not answered at shutdown")
	}
	for i, err := range errs {
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("command %d: %v, want ErrShutdown", i, err)
		}
	}
}

// TestApplyInflightNotWithoutGrouping: with --apply-batch 1 every command
// is its own entry, and the in-flight bound is off: it would only make
// the commands wait for each other.
func TestApplyInflightNotWithoutGrouping(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyInflight, c.ApplyBatch = 1, 1 })
	if n.inflight != nil {
		t.Fatal("an in-flight bound with --apply-batch 1")
	}
	_, errs := proposeMembers(n, "b", 4)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
}
