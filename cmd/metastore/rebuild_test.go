package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/boltcheck"
)

func TestQuarantineDirIsNew(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 6, 41, 17, 0, time.UTC)
	var got []string
	for range 3 {
		q, err := quarantineDir(dir, now)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, filepath.Base(q))
	}
	want := []string{"quarantine-20261130T064117Z", "quarantine-20261130T064117Z-2", "quarantine-20261130T064117Z-3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("quarantine directories %v, want %v", got, want)
	}
}

func TestRebuildRefusesFilesInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := boltcheck.NotInUse(path); err != nil {
		t.Fatalf("unlocked file: %v", err)
	}
	if err := boltcheck.NotInUse(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	// Another open file description holding the lock, as a running
	// member's bbolt does.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := boltcheck.NotInUse(path); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("locked file: %v, want an error saying it is in use", err)
	}
}

func TestRebuildNeedsJoin(t *testing.T) {
	code, _, errOut := runBinary(t, t.TempDir(), nil, "rebuild", "--node-id", "n3", "--data-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(errOut, "--join is required") {
		t.Fatalf("rebuild without --join: exit %d: %s", code, errOut)
	}
}
