package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
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

// enospcFiler creates the segment file, then fails like a preallocation
// on a full file system, fails times times.
type enospcFiler struct {
	types.SegmentFiler
	dir   string
	fails int
	calls int
}

func (f *enospcFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	f.calls++
	if f.calls <= f.fails {
		path := filepath.Join(f.dir, segment.FileName(info))
		file, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err // the previous attempt's file was left behind
		}
		file.Close()
		return nil, &os.PathError{Op: "fallocate", Path: path, Err: syscall.ENOSPC}
	}
	return f.SegmentFiler.Create(info)
}

// TestSegmentCreationWaitsForSpace: once the WAL runs, a segment that
// cannot be created for lack of space is retried (its half-made file
// removed first) until it can, with the member marked stalled meanwhile;
// at open, the error is returned at once; a shutdown ends the wait.
func TestSegmentCreationWaitsForSpace(t *testing.T) {
	info := types.SegmentInfo{ID: 3, BaseIndex: 100, SizeLimit: 1 << 20}
	newFiler := func(fails int) (*stallingFiler, *enospcFiler, *atomic.Bool, chan struct{}) {
		dir := t.TempDir()
		inner := &enospcFiler{SegmentFiler: segment.NewFiler(dir, walfs.New()), dir: dir, fails: fails}
		stalled, stop := &atomic.Bool{}, make(chan struct{})
		return &stallingFiler{SegmentFiler: inner, dir: dir, space: spaceWait{log: slog.New(slog.DiscardHandler), stop: stop, stalled: stalled}}, inner, stalled, stop
	}

	f, inner, stalled, _ := newFiler(3)
	f.running.Store(true)
	w, err := f.Create(info)
	if err != nil {
		t.Fatalf("create after 3 full-disk failures: %v", err)
	}
	w.Close()
	if inner.calls != 4 || stalled.Load() {
		t.Fatalf("calls %d (want 4), stalled %v after success", inner.calls, stalled.Load())
	}

	f, inner, _, _ = newFiler(1)
	if _, err := f.Create(info); !isNoSpace(err) || inner.calls != 1 {
		t.Fatalf("create while opening: %v after %d calls, want ENOSPC after 1", err, inner.calls)
	}

	f, _, stalled, stop := newFiler(1 << 30)
	f.running.Store(true)
	done := make(chan error, 1)
	go func() { _, err := f.Create(info); done <- err }()
	for !stalled.Load() {
		runtime.Gosched() // the waiter marks the member stalled at its first failure
	}
	close(stop)
	if err := <-done; !isNoSpace(err) {
		t.Fatalf("create ended by shutdown: %v, want the ENOSPC", err)
	}
}

// TestDamagedSealedSegmentRefused: raft-wal checks a sealed segment's
// frames only as it reads them, so the open reads every entry once
// (checkWAL) and a damaged one makes the member refuse to start.
func TestDamagedSealedSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 1<<20, slog.New(slog.DiscardHandler), spaceWait{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8<<10)
	for i := uint64(1); i <= 300; i++ { // 2.4 MB: two sealed segments
		if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) < 2 {
		t.Fatalf("want a sealed segment, found %v", segs)
	}
	slices.Sort(segs)
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Frame headers every 8 KiB and a little: some land in this range.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64<<10), 256<<10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err = openWAL(dir, 1<<20, slog.New(slog.DiscardHandler), spaceWait{})
	var ce *CorruptError
	if !errors.As(err, &ce) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open with a damaged sealed segment: %v, want a CorruptError", err)
	}
	t.Logf("refused: %v", err)
}
