package fsm_test

import (
	"os"
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// The state machine file is written without fsync; a marker records the
// boot it was open under. A restart of the process keeps the file; a
// restart of the machine while it was open sets it aside, to be rebuilt
// from the Raft snapshot and log.
func TestUnsyncedFileSetAsideAfterMachineRestart(t *testing.T) {
	fsm.SetBootID(t, "boot-1")
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	idx := h.f.AppliedIndex()

	readMarker := func() string {
		t.Helper()
		raw, err := os.ReadFile(h.path + ".state")
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	if m := readMarker(); !strings.Contains(m, `"boot_id":"boot-1"`) || !strings.Contains(m, `"state":"open"`) {
		t.Fatalf("marker while open: %s", m)
	}

	// The process dies (no Close) and starts again on the same boot: the
	// file is kept, at its last commit.
	if err := h.f.CloseAsCrash(); err != nil {
		t.Fatal(err)
	}
	h.f = openFSM(t, h.path)
	h.f.ApplyBatch(h.logs) // Raft replays the log; what the file holds is skipped
	if h.f.AppliedIndex() != idx || h.job("j") == nil {
		t.Fatalf("after a process restart: index %d (want %d), job %v", h.f.AppliedIndex(), idx, h.job("j"))
	}

	// A clean close syncs and marks the file closed: a later boot keeps it.
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if m := readMarker(); !strings.Contains(m, `"state":"closed"`) {
		t.Fatalf("marker after close: %s", m)
	}
	fsm.SetBootID(t, "boot-2")
	h.f = openFSM(t, h.path)
	if h.f.AppliedIndex() != idx || h.job("j") == nil {
		t.Fatalf("after a clean close and a machine restart: index %d (want %d)", h.f.AppliedIndex(), idx)
	}

	// The machine goes down while the file is open: the next boot sets the
	// file aside and starts from an empty one.
	h.putJob("k", wire.JobConfig{})
	if err := h.f.CloseAsCrash(); err != nil {
		t.Fatal(err)
	}
	fsm.SetBootID(t, "boot-3")
	h.f = openFSM(t, h.path)
	if _, _, err := h.f.Job("j"); h.f.AppliedIndex() != 0 || err == nil {
		t.Fatalf("after a machine crash: index %d, job lookup %v; want an empty state machine", h.f.AppliedIndex(), err)
	}
	if _, err := os.Stat(h.path + ".discarded"); err != nil {
		t.Fatalf("the untrusted file was not kept aside: %v", err)
	}
}

// A data directory from a release that synced every commit has no marker:
// its file is kept whatever the boot.
func TestFileWithoutMarkerIsKept(t *testing.T) {
	fsm.SetBootID(t, "boot-1")
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	idx := h.f.AppliedIndex()
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.path + ".state"); err != nil {
		t.Fatal(err)
	}
	fsm.SetBootID(t, "boot-2")
	h.f = openFSM(t, h.path)
	if h.f.AppliedIndex() != idx || h.job("j") == nil {
		t.Fatalf("index %d (want %d), job %v", h.f.AppliedIndex(), idx, h.job("j"))
	}
}
