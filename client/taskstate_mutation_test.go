package client_test

import (
	"errors"
	"testing"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
)

// TestTaskStateChecks pins TaskState's checks that its model test does not
// reach: the state capability, a blob committed alone, a blob added twice,
// and references that clash with a pending materialization.
func TestTaskStateChecks(t *testing.T) {
	if _, err := client.NewTaskState(nil, mustCaps(t, "input")); err == nil {
		t.Error("a TaskState for a task without the state capability")
	}
	ts, err := client.NewTaskState(nil, mustCaps(t, "state", "incremental"))
	if err != nil {
		t.Fatal(err)
	}
	// A blob alone is a change the next ack carries.
	if err := ts.AddBlob("j/t/b1", 10, ""); err != nil {
		t.Fatal(err)
	}
	if ma := ts.Manifest(); !ts.Pending() || ma == nil || len(ma.Blobs) != 1 {
		t.Fatalf("after AddBlob alone: pending %v, manifest %+v; want the blob in the next ack", ts.Pending(), ma)
	}
	// The same blob again: once; with another size: refused.
	if err := ts.AddBlob("j/t/b1", 10, ""); err != nil || len(ts.Manifest().Blobs) != 1 {
		t.Fatalf("the same blob added again: %v, %d blobs", err, len(ts.Manifest().Blobs))
	}
	var me *manifests.Error
	if err := ts.AddBlob("j/t/b1", 11, ""); !errors.As(err, &me) || me.Code != manifests.CodeDuplicate {
		t.Fatalf("the blob added again with another size: %v; want a duplicate_reference", err)
	}
	// A segment kept by a materialization (LastSeq at its truncation
	// point) at the offset of one of its bases is refused, and so is a
	// segment added at the offset of a pending base.
	if err := ts.AddSegment("j/t/b1", 0, 10, 1, 5); err != nil {
		t.Fatal(err)
	}
	if err := ts.Materialize([]manifests.Base{{Key: "j/t/b1", Length: 10}}, 5); !errors.As(err, &me) || me.Code != manifests.CodeDuplicate {
		t.Fatalf("a base at the offset of a segment it keeps: %v; want a duplicate_reference", err)
	}
	if err := ts.Materialize([]manifests.Base{{Key: "j/t/b2", Length: 10}}, 6); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegment("j/t/b2", 0, 10, 6, 7); !errors.As(err, &me) || me.Code != manifests.CodeDuplicate {
		t.Fatalf("a segment at the offset of a pending base: %v; want a duplicate_reference", err)
	}
}

// TestTaskStateTruncationOnly: a materialization without bases (a
// truncation of the changelog) is a delta the next ack carries.
func TestTaskStateTruncationOnly(t *testing.T) {
	ts, err := client.NewTaskState(nil, mustCaps(t, "state", "incremental"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegment("j/t/b1", 0, 10, 1, 3); err != nil {
		t.Fatal(err)
	}
	ts.Acked()
	if err := ts.Materialize(nil, 4); err != nil {
		t.Skipf("a materialization without bases is refused (%v): nothing to carry", err)
	}
	ma := ts.Manifest()
	if ma == nil || ma.Delta == nil || ma.Delta.Materialize == nil || ma.Delta.Materialize.TruncateBefore != 4 {
		t.Fatalf("manifest after a truncation only: %+v; want a delta with the materialization", ma)
	}
}
