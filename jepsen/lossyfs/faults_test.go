package lossyfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syncedFile creates name in mnt with content, fsynced, and returns it open
// for reading and writing.
func syncedFile(t *testing.T, mnt, name string, content []byte) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return f
}

// EIO fails the writes and fsyncs of the files it matches, leaves the
// others alone, writes nothing of a failed write, counts its hits, and
// clearing it restores normal writes and fsyncs.
func TestFaultEIO(t *testing.T) {
	l, mnt := mountT(t)
	f := syncedFile(t, mnt, "hit.db", []byte("synced"))
	other := syncedFile(t, mnt, "other.db", []byte("synced"))
	if err := l.SetFault(Fault{Kind: EIO, PathMatch: regexp.MustCompile(`^hit\.db$`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("lost"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write under EIO: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync under EIO: %v, want EIO", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "hit.db")); err != nil || string(got) != "synced" {
		t.Errorf("after the failed write the file holds %q (%v)", got, err)
	}
	if _, err := other.WriteAt([]byte("fine"), 0); err != nil {
		t.Errorf("write to a file the fault does not match: %v", err)
	}
	if err := other.Sync(); err != nil {
		t.Errorf("fsync of a file the fault does not match: %v", err)
	}
	if h := l.FaultHits(); h.Writes != 1 || h.Fsyncs != 1 {
		t.Errorf("hits: %+v, want 1 write and 1 fsync", h)
	}
	if h := l.ClearFault(); h.Writes != 1 || h.Fsyncs != 1 {
		t.Errorf("hits returned by ClearFault: %+v", h)
	}
	if _, err := f.WriteAt([]byte("fine"), 0); err != nil {
		t.Errorf("write after the fault was cleared: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("fsync after the fault was cleared: %v", err)
	}
}

// ENOSPC fails what needs new space (appends, writes into a hole,
// any fallocate, a truncation that grows the file), not overwrites, and the
// file system reports no free space; clearing it restores both.
func TestFaultENOSPC(t *testing.T) {
	l, mnt := mountT(t)
	f := syncedFile(t, mnt, "f", bytes.Repeat([]byte("s"), 2*pageSize))
	// A hole: the file grown by truncation, no data written there.
	if err := f.Truncate(4 * pageSize); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFault(Fault{Kind: ENOSPC}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("append"), 4*pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("append under ENOSPC: %v, want ENOSPC", err)
	}
	if _, err := f.WriteAt([]byte("hole"), 3*pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write into a hole under ENOSPC: %v, want ENOSPC", err)
	}
	if _, err := f.WriteAt([]byte("overwrite"), 10); err != nil {
		t.Errorf("overwrite of allocated space under ENOSPC: %v", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("fallocate under ENOSPC: %v, want ENOSPC", err)
	}
	if err := f.Truncate(8 * pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("ftruncate that grows under ENOSPC: %v, want ENOSPC", err)
	}
	if err := os.Truncate(filepath.Join(mnt, "f"), 9*pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("truncate by path that grows under ENOSPC: %v, want ENOSPC", err)
	}
	if err := f.Truncate(4 * pageSize); err != nil {
		t.Errorf("truncate to the same size under ENOSPC: %v", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil || st.Bavail != 0 || st.Bfree != 0 {
		t.Errorf("statfs under ENOSPC: %d blocks available, %d free (%v), want none", st.Bavail, st.Bfree, err)
	}
	if h := l.ClearFault(); h.Writes != 5 {
		t.Errorf("hits: %+v, want 5 writes", h)
	}
	if _, err := f.WriteAt([]byte("append"), 4*pageSize); err != nil {
		t.Errorf("append after the fault was cleared: %v", err)
	}
	if err := f.Truncate(8 * pageSize); err != nil {
		t.Errorf("truncate after the fault was cleared: %v", err)
	}
	if err := syscall.Statfs(mnt, &st); err != nil || st.Bavail == 0 {
		t.Errorf("statfs after the fault was cleared: %d blocks available (%v)", st.Bavail, err)
	}
}

// A fsync stall holds fsyncs until it is cleared (or for its Delay), and
// writes to other files go on meanwhile (the kernel holds the stalled
// file's lock).
func TestFaultFsyncStall(t *testing.T) {
	l, mnt := mountT(t)
	f := syncedFile(t, mnt, "f", []byte("synced"))
	other := syncedFile(t, mnt, "other", []byte("synced"))
	var mst syscall.Stat_t
	if err := syscall.Stat(mnt, &mst); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFault(Fault{Kind: FsyncStall}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("unsynced"), 0); err != nil {
		t.Fatalf("write under a fsync stall: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Sync() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.WaitHits(ctx, func(h Hits) bool { return h.Fsyncs == 1 }); err != nil {
		t.Fatalf("the fsync never reached the stall: %v", err)
	}
	// Held: a write to another file goes through, the fsync does not
	// return.
	if _, err := other.WriteAt([]byte("more"), 0); err != nil {
		t.Errorf("write while a fsync is stalled: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the fsync returned (%v) while the stall was in force", err)
	default:
	}
	if _, files := l.Unsynced(); files != 2 {
		t.Errorf("a stalled fsync made its file synced (%d files unsynced, want 2)", files)
	}
	h := l.ClearFault()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the stalled fsync failed after the clear: %v", err)
		}
	case <-ctx.Done():
		// Abort the connection, or closing the files would wait for
		// the fsync forever.
		abort(unix.Minor(mst.Dev))
		t.Fatal("ClearFault did not release the stalled fsync")
	}
	if h.Fsyncs != 1 || h.Writes != 0 {
		t.Errorf("hits: %+v, want 1 fsync", h)
	}
	if pages, files := l.Unsynced(); pages != 1 || files != 1 {
		t.Errorf("%d pages in %d files unsynced after the stalled fsync returned, want the other file's one", pages, files)
	}

	// With a Delay, the stall ends by itself.
	if err := l.SetFault(Fault{Kind: FsyncStall, Delay: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		t.Errorf("fsync under a stall with a delay: %v", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("fsync under a 100ms stall took %s", took)
	}
	if h := l.ClearFault(); h.Fsyncs != 1 || h.Stalled < 100*time.Millisecond {
		t.Errorf("hits of the delayed stall: %+v", h)
	}
	// Cleared: fsyncs are not held.
	if err := f.Sync(); err != nil {
		t.Errorf("fsync after the stall was cleared: %v", err)
	}
}

// A failed fsync makes nothing durable, and neither does a later fsync
// that succeeds (Linux marks the pages clean after a failed write-back): a
// crash drops every page the failed fsync was to sync unless it was
// written again before a successful one; appended pages come back as
// zeros.
func TestFailedFsyncLeavesPagesLossy(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "f")
	synced := bytes.Repeat([]byte("s"), 2*pageSize)
	f := syncedFile(t, mnt, "f", synced)
	for i, c := range []byte("ABC") { // pages 0 and 1 overwritten, 2 appended
		if _, err := f.WriteAt(bytes.Repeat([]byte{c}, pageSize), int64(i)*pageSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetFault(Fault{Kind: EIO, Ops: OpFsync}); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync under EIO: %v", err)
	}
	l.ClearFault()
	if pages, _ := l.Unsynced(); pages != 3 {
		t.Errorf("%d pages unsynced after the failed fsync, want 3", pages)
	}
	// Page 1 written again, then a fsync that succeeds.
	if _, err := f.WriteAt(bytes.Repeat([]byte("D"), pageSize), pageSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the fault was cleared: %v", err)
	}
	if pages, _ := l.Unsynced(); pages != 2 {
		t.Errorf("%d pages unsynced after the successful fsync, want 2 (0 and 2, whose write-back failed)", pages)
	}
	f.Close()
	if _, err := l.Crash(Lose); err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.Repeat([]byte("s"), pageSize), bytes.Repeat([]byte("D"), pageSize)...), make([]byte, pageSize)...)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("after the crash: %d bytes, pages %q, want %d bytes, pages %q", len(got), pageHeads(got), len(want), pageHeads(want))
	}
}

// pageHeads is the first byte of every page of b.
func pageHeads(b []byte) []byte {
	var out []byte
	for off := 0; off < len(b); off += pageSize {
		out = append(out, b[off])
	}
	return out
}

// Bad faults are refused.
func TestSetFaultValidates(t *testing.T) {
	l := &FS{}
	for _, f := range []Fault{{}, {Kind: FsyncStall, Ops: OpWrite}, {Kind: EIO, Prob: 2}, {Kind: EIO, Ops: 8}, {Kind: FsyncStall, Delay: -1}} {
		if err := l.SetFault(f); err == nil {
			t.Errorf("SetFault(%+v) accepted", f)
		}
	}
	if l.fault.Load() != nil {
		t.Error("a refused fault is in force")
	}
}

// A write that fails leaves nothing behind that a shared mapping sees
// (the kernel copies a write into its page cache before the server
// refuses it: forget). The mapping is read by another process: a process
// that maps a file of a FUSE file system it serves can deadlock.
func TestFailedWriteInvisibleThroughMapping(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte("d"), pageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 4*pageSize); err != nil { // pages 1 to 3: a hole
		t.Fatal(err)
	}
	if err := l.SetFault(Fault{Kind: ENOSPC}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMappingProbe$")
	cmd.Env = append(os.Environ(), "LOSSYFS_MAPPING_PROBE="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	if h := l.ClearFault(); h.Writes != 1 {
		t.Errorf("hits: %+v, want the probe's 1 write", h)
	}
}

// TestMappingProbe is the probe process of
// TestFailedWriteInvisibleThroughMapping: it maps the file, fails to write
// into its hole, and waits until the mapping shows the hole again.
func TestMappingProbe(t *testing.T) {
	path := os.Getenv("LOSSYFS_MAPPING_PROBE")
	if path == "" {
		t.Skip("the probe process of TestFailedWriteInvisibleThroughMapping")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 4*pageSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if m[2*pageSize] != 0 {
		t.Fatalf("the hole maps as %q", m[2*pageSize:2*pageSize+8])
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("X"), pageSize), 2*pageSize); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write into the hole: %v, want ENOSPC", err)
	}
	// The invalidation follows the failed write's answer.
	deadline := time.Now().Add(10 * time.Second)
	for m[2*pageSize] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10s after the failed write the mapping still shows its bytes: %q", m[2*pageSize:2*pageSize+8])
		}
		runtime.Gosched()
	}
}
