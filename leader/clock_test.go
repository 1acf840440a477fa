package leader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/leader"
)

// behind is a proposer whose clock runs a day behind the wall clock, as
// a member's clock with skew does (node.Node.Now is the clock package's,
// which a faultinject build skews). It records when the task reads it.
type behind struct {
	*proposer
	mu    sync.Mutex
	reads []time.Time
	read  chan struct{}
}

const skew = -24 * time.Hour

func (b *behind) Now() time.Time {
	b.mu.Lock()
	b.reads = append(b.reads, time.Now())
	b.mu.Unlock()
	select {
	case b.read <- struct{}{}:
	default:
	}
	return time.Now().Add(skew)
}

func (b *behind) readTimes() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.reads...)
}

// TestEpochTimeoutsWaitByProposerClock: the task waits for the next
// deadline as its proposer's clock tells, the clock it reads deadlines by:
// with a deadline a minute away by that clock it looks again after its
// idle second, not every 10 ms because the wall clock says the deadline
// passed a day ago.
func TestEpochTimeoutsWaitByProposerClock(t *testing.T) {
	b := &behind{proposer: newProposer(t), read: make(chan struct{}, 1)}
	b.now = time.Now().Add(skew).UTC()
	b.pendingEpoch(t, "j", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader.EpochTimeouts(b, b.f, nil)(ctx)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.After(20 * time.Second)
	for len(b.readTimes()) < 5 {
		select {
		case <-b.read:
		case <-deadline:
			t.Fatalf("the task read its clock %d times in 20 s", len(b.readTimes()))
		}
	}
	reads := b.readTimes()
	if span := reads[4].Sub(reads[0]); span < time.Second {
		t.Fatalf("5 clock reads within %s: the task polls while the next deadline is a minute away by its clock", span)
	}
	if n := b.proposed(); n != 3 {
		t.Fatalf("%d commands in all, want only the 3 of the setup", n)
	}
}
