package node

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
)

// TestWALStoreAnswersOnlyItsRange: entries deleted from the head (after a
// snapshot) or the whole log (after a snapshot install) are not found,
// though raft-wal keeps them in its tail segment; entries in range are.
func TestWALStoreAnswersOnlyItsRange(t *testing.T) {
	s, err := openWAL(t.TempDir(), 1<<20, slog.New(slog.DiscardHandler), spaceWait{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d", i)})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	for _, i := range []uint64{1, 4, 11} {
		if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) outside 5..10: %v, want ErrLogNotFound", i, err)
		}
	}
	if err := s.GetLog(5, &l); err != nil || string(l.Data) != "entry 5" {
		t.Fatalf("GetLog(5): %q, %v", l.Data, err)
	}
	// A snapshot install deletes the whole log of a monotonic store.
	if err := s.DeleteRange(5, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(7, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(7) from an emptied log: %v, want ErrLogNotFound", err)
	}
}
