// Package smallfs gives tests a small file system to fill up: a tmpfs
// mounted on a fresh directory (as root), and helpers to fill it.
//
// tmpfs rather than a loop-mounted ext4 image: bbolt (the Raft log and the
// state machine) extends its files with ftruncate, which allocates nothing
// on either file system, and writes pages with pwrite, which fails with
// ENOSPC on both at the write that needs a block; it never writes through
// its read-only mmap, so a full tmpfs cannot SIGBUS it. ext4's delayed
// allocation reserves blocks at write time, so it too reports ENOSPC at the
// write, not at a later fsync. A tmpfs needs no loop device and no mkfs,
// which CI containers often lack.
package smallfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a fresh directory and unmounts it
// at cleanup (cleanups run last in, first out: call it before starting
// processes that use it, so they are stopped first). It skips the test
// unless it runs as root and mount works.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Free returns the bytes available to an unprivileged writer on dir's file
// system.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Fill appends zeros to the file at path until about keep bytes remain
// free on its file system (or the file system is full).
func Fill(t testing.TB, path string, keep int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := Free(t, filepath.Dir(path)) - keep; n > 0; n -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), n)]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}
