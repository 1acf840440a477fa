package fsm_test

import (
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckCommitChecks: an ack commits only its own job's uploads, a
// blob already live only at its size, and references an upload only when
// it commits it; each refusal names manifest.blobs and writes nothing.
func TestAuditAckCommitChecks(t *testing.T) {
	h := oneIncrementalTask(t, "c", 2, "c/t/a", "c/t/b")
	h.putJob("other", wire.JobConfig{})
	h.start("other", "o1", task(t, "t", "state", "incremental"))
	h.intents("other", 1, "other/t/x")
	h.begin("c", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("c", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "c/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/a", 0, 1)}}})))
	h.begin("c", 1, 2)
	for _, tc := range []struct {
		name    string
		version uint8
		m       fsm.ManifestAck
		want    error
	}{
		// Version 1 has no cross-job rules: the commit check alone refuses.
		{"another job's upload", 1, fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "other/t/x", Size: 10}},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("other/t/x", 0, 2)}}}, wire.ErrInvalid},
		{"live blob at another size", 3, fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "c/t/a", Size: 20}},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/a", 10, 2)}}}, wire.ErrConflict},
		{"upload referenced without its commit", 3, fsm.ManifestAck{
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/b", 0, 2)}}}, wire.ErrInvalid},
	} {
		h.run(t, tc.name, func(t *testing.T) {
			if re := h.rejectVersion(tc.want, fsm.CmdTaskAck, tc.version, auditAck("c", 1, 2, &tc.m)); re.Field != "manifest.blobs" {
				t.Fatalf("%v, want a refusal naming manifest.blobs", re)
			}
		})
	}
	h.fsck()
}

// TestAuditAckLiveBlobCommittedAgain: a blob already live may be listed
// again in a later ack's commits at its size: the commit changes nothing
// of the blob, and the ack's new segment of it takes its reference.
func TestAuditAckLiveBlobCommittedAgain(t *testing.T) {
	h := oneIncrementalTask(t, "c", 2, "c/t/a")
	commit := []fsm.BlobCommit{{Key: "c/t/a", Size: 20, Checksum: "sha256:aa"}}
	h.begin("c", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("c", 1, 1, &fsm.ManifestAck{Blobs: commit,
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/a", 0, 1)}}})))
	first, _, err := h.f.Blob("c/t/a")
	if err != nil {
		t.Fatal(err)
	}
	h.advance(time.Minute)
	h.begin("c", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("c", 1, 2, &fsm.ManifestAck{Blobs: commit,
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/a", 10, 2)}}})))
	b, _, err := h.f.Blob("c/t/a")
	if err != nil || b.State != wire.BlobLive || b.Size != 20 || b.Checksum != "sha256:aa" || b.Refs != 2 || !b.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("blob committed again: %+v %v, want live, size 20, two references, as first committed (%+v)", b, err, first)
	}
	h.fsck()
}
