package fsm_test

import (
	"fmt"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckManifestShapeRefused: each check of a manifest's form
// refuses the ack before the proposal (Validate) and again at apply,
// naming its field, and the refused ack writes nothing.
func TestAuditAckManifestShapeRefused(t *testing.T) {
	h := oneIncrementalTask(t, "v", 2, "v/t/a")
	h.begin("v", 1, 1)
	seg := auditSeg("v/t/a", 0, 1)
	badCRC := seg
	badCRC.CRC32C = "NOTHEX!!"
	base := manifests.Base{Key: "v/t/a", Offset: 0, Length: 10}
	badBase := base
	badBase.CRC32C = "NOTHEX!!"
	commit := []fsm.BlobCommit{{Key: "v/t/a", Size: 10}}
	many := make([]fsm.BlobCommit, wire.MaxIntents+1)
	for i := range many {
		many[i] = fsm.BlobCommit{Key: fmt.Sprintf("v/t/k%d", i), Size: 1}
	}
	for _, tc := range []struct {
		name  string
		m     fsm.ManifestAck
		want  error
		field string
	}{
		{"delta and full", fsm.ManifestAck{Delta: &manifests.Delta{}, Full: &manifests.Manifest{}}, wire.ErrInvalid, "manifest"},
		{"base epoch 0", fsm.ManifestAck{Base: &fsm.BaseRef{Job: "v", Task: "t"}}, wire.ErrInvalid, "manifest.base.epoch"},
		{"base bad job", fsm.ManifestAck{Base: &fsm.BaseRef{Job: "a job", Task: "t", Epoch: 1}}, wire.ErrInvalid, "manifest.base.job"},
		{"base bad task", fsm.ManifestAck{Base: &fsm.BaseRef{Job: "v", Task: "-t", Epoch: 1}}, wire.ErrInvalid, "manifest.base.task"},
		{"too many blobs", fsm.ManifestAck{Blobs: many}, wire.ErrInvalid, "manifest.blobs"},
		{"blob committed twice", fsm.ManifestAck{Blobs: append(commit, commit...), Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg}}}, wire.ErrInvalid, "manifest.blobs"},
		{"blob key escaping", fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "v/../x", Size: 1}}}, wire.ErrInvalid, "manifest.blobs"},
		{"blob checksum with control characters", fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "v/t/a", Size: 10, Checksum: "a\x00b"}}}, wire.ErrInvalid, "manifest.blobs.checksum"},
		{"segment crc", fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{badCRC}}}, wire.ErrInvalid, "manifest.delta.add_segments.crc32c"},
		{"materialized base crc", fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{badBase}, TruncateBefore: 1}}}, wire.ErrInvalid, "manifest.delta.materialize.bases.crc32c"},
		{"full segment crc", fsm.ManifestAck{Blobs: commit, Full: &manifests.Manifest{Segments: []manifests.Segment{badCRC}}}, wire.ErrInvalid, "manifest.full.segments.crc32c"},
		{"full base crc", fsm.ManifestAck{Blobs: commit, Full: &manifests.Manifest{Bases: []manifests.Base{badBase}}}, wire.ErrInvalid, "manifest.full.bases.crc32c"},
		{"segment without length", fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "v/t/a", FirstSeq: 1, LastSeq: 1}}}}, wire.ErrInvalid, "manifest.delta"},
		{"full segment twice", fsm.ManifestAck{Blobs: commit, Full: &manifests.Manifest{Segments: []manifests.Segment{seg, seg}}}, wire.ErrInvalid, "manifest.full"},
	} {
		h.run(t, tc.name, func(t *testing.T) {
			ack := auditAck("v", 1, 1, &tc.m)
			if err := ack.Validate(); !isRule(err, tc.want) || err.(*wire.RuleError).Field != tc.field {
				t.Fatalf("Validate: %v, want %v naming %s", err, tc.want, tc.field)
			}
			if re := h.reject(tc.want, fsm.CmdTaskAck, ack); re.Field != tc.field {
				t.Fatalf("apply: %v, want a refusal naming %s", re, tc.field)
			}
		})
	}
	// A range past the end of its blob is invalid input, not a mismatch
	// with the stored manifest.
	long := seg
	long.Length = 11
	h.reject(wire.ErrInvalid, fsm.CmdTaskAck, auditAck("v", 1, 1, &fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{long}}}))
}
