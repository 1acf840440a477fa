package fsm_test

import (
	"testing"

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
