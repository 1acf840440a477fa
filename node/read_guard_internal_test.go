package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
)

// startUnled starts a member alone, bootstrapped, without calling Lead, and
// waits until it leads.
func startUnled(t *testing.T) *Node {
	t.Helper()
	n := startAlone(t, func(*config.Config) {})
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

// pendingFuture is a raft.Future: Error waits for ch.
type pendingFuture struct{ ch chan error }

func (f pendingFuture) Error() error { return <-f.ch }

// answeredFuture is a raft.Future that answers nil at once, closing called
// first.
type answeredFuture struct{ called chan struct{} }

func (f answeredFuture) Error() error { close(f.called); return nil }

// doneWhenAnswered is a context already cancelled whose Done waits until
// the future has been asked for its answer: waitFuture then finds both
// ready.
type doneWhenAnswered struct {
	context.Context
	called chan struct{}
}

func (c doneWhenAnswered) Done() <-chan struct{} {
	<-c.called
	return c.Context.Done()
}

// TestWaitFuture: waitFuture gives up when ctx is done on a future that
// does not answer, and prefers the future's answer when both are ready.
func TestWaitFuture(t *testing.T) {
	pending := pendingFuture{ch: make(chan error, 1)}
	defer func() { pending.ch <- nil }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wait, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	if err := within(t, wait, "waitFuture on a done context", func() error { return waitFuture(ctx, pending) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitFuture with ctx done, future pending: %v, want context.Canceled", err)
	}
	for i := range 20 {
		f := answeredFuture{called: make(chan struct{})}
		if err := waitFuture(doneWhenAnswered{Context: ctx, called: f.called}, f); err != nil {
			t.Fatalf("attempt %d: ctx done and the future answered: %v, want the future's answer", i, err)
		}
	}
}
