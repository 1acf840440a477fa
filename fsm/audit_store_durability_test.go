package fsm_test

import (
	"os"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestAuditNoBootIDSyncsEveryCommit: where the machine's boot id cannot be
// read, the file is synced at every commit instead of written without
// sync, so it keeps no marker of unsynced writes (a marker under an
// unknown boot could never tell a machine crash), and a crash of the
// process leaves the file as its last commit made it.
func TestAuditNoBootIDSyncsEveryCommit(t *testing.T) {
	fsm.SetBootID(t, "")
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	idx := h.f.AppliedIndex()
	if _, err := os.Stat(h.path + ".state"); !os.IsNotExist(err) {
		t.Fatalf("a marker of unsynced writes is kept without a boot id: %v", err)
	}
	if err := h.f.CloseAsCrash(); err != nil {
		t.Fatal(err)
	}
	h.f = openFSM(t, h.path)
	if h.f.AppliedIndex() != idx || h.job("j") == nil {
		t.Fatalf("after a crash without a boot id: index %d (want %d)", h.f.AppliedIndex(), idx)
	}
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.path + ".state"); !os.IsNotExist(err) {
		t.Fatalf("a marker is written at close without a boot id: %v", err)
	}
}
