package fsm_test

import (
	"math"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestRestorePlanOfHugeDeclaredSizes: the state machine takes any declared
// blob size (the API refuses more than 5 TiB, api.MaxBlobSize; a log or a
// state written before may hold more). A restore plan of a manifest whose
// ranges pass 2^63 bytes reports the largest count, never a negative one.
func TestRestorePlanOfHugeDeclaredSizes(t *testing.T) {
	h := newHarness(t)
	h.putJob("h", wire.JobConfig{Retained: 2})
	h.start("h", "a1", task(t, "t", "state", "incremental"))
	h.intents("h", 1, "h/t/a", "h/t/b")
	h.begin("h", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "h", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "h/t/a", Size: math.MaxUint64}, {Key: "h/t/b", Size: math.MaxUint64}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{
			{Key: "h/t/a", Offset: 0, Length: 1 << 63, FirstSeq: 1, LastSeq: 1},
			{Key: "h/t/b", Offset: 0, Length: 1 << 63, FirstSeq: 2, LastSeq: 2}}}}}))
	p := h.restore(fsm.RestoreRequest{Job: "h", Task: "t"})
	kr := p.Kinds[wire.KindState]
	if kr.Bytes != math.MaxInt || p.ObjectStoreBytes != math.MaxUint64 {
		t.Fatalf("restore plan of 2^64 bytes of ranges: kind bytes %d, object-store bytes %d; want %d and %d", kr.Bytes, p.ObjectStoreBytes, math.MaxInt, uint64(math.MaxUint64))
	}
}
