package node

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/freeport"
)

// startUnled starts a member alone, bootstrapped, without calling Lead, and
// waits until it leads.
func startUnled(t *testing.T) *Node {
	t.Helper()
	var n *Node
	var f *fsm.FSM
	for attempt := 0; n == nil; attempt++ {
		addr := freeport.Addr(t)
		cfg := config.DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAddr = "n1", t.TempDir(), addr, "127.0.0.1:1"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		var err error
		if f, err = fsm.Open(cfg.FSMPath(), nil); err != nil {
			t.Fatal(err)
		}
		n, err = New(cfg, Deps{FSM: f})
		if err != nil {
			f.Close()
			if errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
				continue
			}
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := n.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		f.Close()
	})
	pollUntil(t, 10*time.Second, "leader", n.IsLeader)
	return n
}

// TestNoLinearizableReadBeforeTheLeadersBarrier: a leader whose barrier of
// the current term has not completed (here: Lead not yet called) refuses
// linearizable reads with ErrTryAgain, and serves them once it has; a
// readiness mark of an earlier term does not count.
func TestNoLinearizableReadBeforeTheLeadersBarrier(t *testing.T) {
	n := startUnled(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.LinearizableRead(ctx); !errors.Is(err, ErrTryAgain) {
		t.Fatalf("read before the barrier: %v, want ErrTryAgain", err)
	}
	n.Lead(nil)
	pollUntil(t, 5*time.Second, "barrier done", func() bool { return n.readyTerm.Load() == n.raft.CurrentTerm() })
	if _, err := n.LinearizableRead(ctx); err != nil {
		t.Fatalf("read after the barrier: %v", err)
	}
	n.readyTerm.Store(n.raft.CurrentTerm() - 1) // as if this term's session had not started yet
	if _, err := n.LinearizableRead(ctx); !errors.Is(err, ErrTryAgain) {
		t.Fatalf("read with the barrier of an earlier term only: %v, want ErrTryAgain", err)
	}
}
