package fsm_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestAuditRestoreSetsCommittedIndex: after a restore the file's last
// commit is the snapshot's, so CommittedIndex (what a process that died
// now would restart from) is the snapshot's applied index, whether the
// member was behind it or ahead of it.
func TestAuditRestoreSetsCommittedIndex(t *testing.T) {
	src := newHarness(t)
	fillEverything(src)
	snap, idx := snapshotOf(t, src.f), src.f.AppliedIndex()

	behind := newHarness(t)
	behind.putJob("behind", wire.JobConfig{})
	if err := behind.f.Flush(); err != nil {
		t.Fatal(err)
	}
	ahead := newHarness(t)
	fillEverything(ahead)
	ahead.putJob("ahead", wire.JobConfig{})
	if err := ahead.f.Flush(); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*harness{"behind": behind, "ahead": ahead} {
		if h.f.CommittedIndex() == idx {
			t.Fatalf("%s: committed index %d already the snapshot's", name, idx)
		}
		if err := h.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatal(err)
		}
		if got := h.f.CommittedIndex(); got != idx {
			t.Errorf("%s: committed index %d after the restore, want the snapshot's %d", name, got, idx)
		}
		if got := h.f.AppliedIndex(); got != idx {
			t.Errorf("%s: applied index %d after the restore, want %d", name, got, idx)
		}
	}
}

// TestAuditSnapshotHeaderNamesSchemaVersion: a snapshot starts with the
// magic and the schema version of the file it streams, so that a build
// that reads only earlier versions refuses it at the header, before it
// writes anything (readSnapshotHeader).
func TestAuditSnapshotHeaderNamesSchemaVersion(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	snap := snapshotOf(t, h.f)
	want := binary.BigEndian.AppendUint64([]byte("METASTORE-SNAP\n"), fsm.SchemaVersion)
	if !bytes.HasPrefix(snap, want) {
		t.Fatalf("snapshot header %q, want %q", snap[:min(len(snap), len(want))], want)
	}
}
