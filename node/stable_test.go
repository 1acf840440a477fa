package node

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// failingStable fails its first fails writes with err.
type failingStable struct {
	raft.StableStore
	fails  int
	err    error
	writes int
}

func (f *failingStable) SetUint64(key []byte, val uint64) error {
	f.writes++
	if f.writes <= f.fails {
		return f.err
	}
	return f.StableStore.SetUint64(key, val)
}

func (f *failingStable) Set(key, val []byte) error {
	f.writes++
	if f.writes <= f.fails {
		return f.err
	}
	return f.StableStore.Set(key, val)
}

func TestStallingStableWaitsForSpace(t *testing.T) {
	enospc := fmt.Errorf("write raft.db: %w", syscall.ENOSPC)
	inner := &failingStable{StableStore: raft.NewInmemStore(), fails: 3, err: enospc}
	var stalled atomic.Bool
	s := stallingStable{StableStore: inner, spaceWait: spaceWait{log: slog.New(slog.DiscardHandler), stop: make(chan struct{}), stalled: &stalled}}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatalf("SetUint64: %v", err)
	}
	if inner.writes != 4 || stalled.Load() {
		t.Fatalf("%d writes, stalled %v; want 4 writes (3 refused) and no stall left", inner.writes, stalled.Load())
	}
	if v, err := inner.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("term %d %v", v, err)
	}

	// Other errors are returned at once.
	other := errors.New("disk on fire")
	inner = &failingStable{StableStore: raft.NewInmemStore(), fails: 1, err: other}
	s.StableStore = inner
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); !errors.Is(err, other) || inner.writes != 1 {
		t.Fatalf("Set = %v after %d writes, want the error at once", err, inner.writes)
	}

	// Shutdown ends the wait with the error.
	stop := make(chan struct{})
	close(stop)
	inner = &failingStable{StableStore: raft.NewInmemStore(), fails: 1 << 30, err: enospc}
	s = stallingStable{StableStore: inner, spaceWait: spaceWait{log: slog.New(slog.DiscardHandler), stop: stop, stalled: &stalled}}
	if err := s.SetUint64([]byte("CurrentTerm"), 8); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("SetUint64 after stop = %v, want ENOSPC", err)
	}
}
