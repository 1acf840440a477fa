package fsm_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
)

// TestAuditBackupRestores: a backup prepared from a snapshot restores into
// a fresh state machine as the same state, but for what PrepareRestore
// clears: the applied index (the cluster it goes into numbers its log
// afresh) and the member records (of the cluster it was taken from). It
// answers the index the snapshot was taken at.
func TestAuditBackupRestores(t *testing.T) {
	src := newHarness(t)
	fillEverythingAndDelete(src)
	want := src.dump()
	if len(want["members"]) == 0 {
		t.Fatal("the source state has no member record")
	}
	var out bytes.Buffer
	idx, err := fsm.PrepareRestore(bytes.NewReader(snapshotOf(t, src.f)), &out, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if idx != src.f.AppliedIndex() {
		t.Fatalf("PrepareRestore answered index %d, want the snapshot's %d", idx, src.f.AppliedIndex())
	}
	dst := newHarness(t)
	if err := dst.f.RestoreFrom(&out); err != nil {
		t.Fatal(err)
	}
	if got := dst.f.AppliedIndex(); got != 0 {
		t.Fatalf("restored backup at applied index %d, want 0", got)
	}
	if m, err := dst.f.Members(); err != nil || len(m) != 0 {
		t.Fatalf("members of the restored backup: %v %v, want none", m, err)
	}
	got := dst.dump()
	if len(got["members"]) != 0 {
		t.Fatalf("member records in the restored backup: %v", got["members"])
	}
	delete(want, "members")
	delete(got, "members")
	delete(want["meta"], "applied_index")
	if _, ok := got["meta"]["applied_index"]; ok {
		t.Fatalf("the restored backup's meta holds an applied index: %q", got["meta"]["applied_index"])
	}
	if d := diffDumps(want, got); d != "" {
		t.Fatalf("restored backup differs from the source:\n%s", d)
	}
	dst.fsck()
}

// TestAuditBackupRefusesForeignFile: a snapshot whose file is a whole
// bbolt file but not a state machine's (no schema version) is refused.
func TestAuditBackupRefusesForeignFile(t *testing.T) {
	data := append(binary.BigEndian.AppendUint64([]byte("METASTORE-SNAP\n"), fsm.SchemaVersion), foreignBolt(t)...)
	var out bytes.Buffer
	if _, err := fsm.PrepareRestore(bytes.NewReader(data), &out, t.TempDir()); err == nil {
		t.Fatal("PrepareRestore accepted a bbolt file that is not a state machine's")
	}
	if out.Len() != 0 {
		t.Fatalf("PrepareRestore wrote %d bytes for a refused snapshot", out.Len())
	}
}

// TestBackupWithALeaseIndexFaultRestores: the backup's content check
// leaves out the lease index (fsckLeases): a stale lease entry leaves an
// upload uncollected and stops no member, so a backup holding one is
// restored, while the member's own fsck reports it.
func TestBackupWithALeaseIndexFaultRestores(t *testing.T) {
	src := newHarness(t)
	fillEverythingAndDelete(src)
	if err := fsm.RawUpdate(src.f, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("blob_leases")).Put(append(make([]byte, 8), "alpha/op/none"...), nil)
	}); err != nil {
		t.Fatal(err)
	}
	if rep, err := src.f.Fsck(); err != nil || len(rep.Problems) != 1 {
		t.Fatalf("fsck of the source: %+v %v, want the stale lease entry", rep, err)
	}
	var out bytes.Buffer
	if _, err := fsm.PrepareRestore(bytes.NewReader(snapshotOf(t, src.f)), &out, t.TempDir()); err != nil {
		t.Fatalf("a backup with a stale lease entry refused: %v", err)
	}
}
