package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestCRC32CKeptAndReturned: the CRC32C an ack declares for a segment or
// base is kept in its lineage record and returned by every restore plan
// of a checkpoint holding it, also after a fork copied the manifest; a
// range declared without one (an older client) has none.
func TestCRC32CKeptAndReturned(t *testing.T) {
	h := newHarness(t)
	h.putJob("c", wire.JobConfig{Retained: 2})
	h.start("c", "a1", task(t, "t", "state", "incremental"))
	h.intents("c", 1, "c/t/log", "c/t/base")
	seg := manifests.Segment{Key: "c/t/log", Offset: 0, Length: 60, FirstSeq: 1, LastSeq: 5, CRC32C: manifests.CRC32C([]byte("sixty"))}
	old := manifests.Segment{Key: "c/t/log", Offset: 60, Length: 40, FirstSeq: 6, LastSeq: 9}
	base := manifests.Base{Key: "c/t/base", Length: 1000, CRC32C: "0a1b2c3d"}
	h.begin("c", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "c", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "c/t/log", Size: 100}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg, old}}}}))
	h.begin("c", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "c", Generation: 1, Epoch: 2, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "c/t/base", Size: 1000}},
		Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{base}}}}}))
	latest := manifests.Manifest{Bases: []manifests.Base{base}, Segments: []manifests.Segment{seg, old}}

	check := func(what string, p *wire.RestorePlan, want manifests.Manifest) {
		t.Helper()
		kr, ok := p.Kinds[wire.KindState]
		if !ok || kr.Manifest == nil {
			t.Fatalf("%s: no state manifest in %+v", what, p)
		}
		if !sameManifest(*kr.Manifest, want) {
			t.Fatalf("%s: manifest %+v, want %+v (with the declared crc32c)", what, *kr.Manifest, want)
		}
	}
	check("latest", h.restore(fsm.RestoreRequest{Job: "c", Task: "t"}), latest)
	check("epoch 1", h.restore(fsm.RestoreRequest{Job: "c", Task: "t", Epoch: 1}), manifests.Manifest{Segments: []manifests.Segment{seg, old}})

	// A fork (of a savepoint: another job's checkpoint) copies the
	// records, checksums included.
	h.pin("c", 2, "")
	h.putJob("f", wire.JobConfig{Retained: 2})
	h.start("f", "a1", task(t, "t", "state", "incremental"))
	h.begin("f", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "f", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Base: &fsm.BaseRef{Job: "c", Task: "t", Epoch: 2}}}))
	check("fork", h.restore(fsm.RestoreRequest{Job: "f", Task: "t"}), latest)

	// A reopened state machine still has them.
	h.reopen()
	check("after reopen", h.restore(fsm.RestoreRequest{Job: "f", Task: "t"}), latest)
	h.fsck()
}

// TestCRC32CShapeRefused: a crc32c that is not 8 lowercase hex digits is
// refused at ack, naming the field, and changes nothing.
func TestCRC32CShapeRefused(t *testing.T) {
	h := newHarness(t)
	h.putJob("c", wire.JobConfig{Retained: 2})
	h.start("c", "a1", task(t, "inc", "state", "incremental"), task(t, "full", "state"))
	h.intents("c", 1, "c/blob")
	h.begin("c", 1, 1)
	commit := []fsm.BlobCommit{{Key: "c/blob", Size: 100}}
	seg := func(crc string) manifests.Segment {
		return manifests.Segment{Key: "c/blob", Length: 10, FirstSeq: 1, LastSeq: 1, CRC32C: crc}
	}
	cases := []struct {
		name, task, field string
		m                 *fsm.ManifestAck
	}{
		{"upper case", "inc", "manifest.delta.add_segments.crc32c", &fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("0A1B2C3D")}}}},
		{"short", "inc", "manifest.delta.add_segments.crc32c", &fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("abc")}}}},
		{"not hex", "inc", "manifest.delta.add_segments.crc32c", &fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("zzzzzzzz")}}}},
		{"base", "inc", "manifest.delta.materialize.bases.crc32c", &fsm.ManifestAck{Blobs: commit, Delta: &manifests.Delta{Materialize: &manifests.Materialization{
			Bases: []manifests.Base{{Key: "c/blob", Length: 10, CRC32C: "0x1b2c3d"}}}}}},
		{"full segment", "full", "manifest.full.segments.crc32c", &fsm.ManifestAck{Blobs: commit, Full: &manifests.Manifest{Segments: []manifests.Segment{seg("123456789")}}}},
		{"full base", "full", "manifest.full.bases.crc32c", &fsm.ManifestAck{Blobs: commit, Full: &manifests.Manifest{Bases: []manifests.Base{{Key: "c/blob", Length: 10, CRC32C: " 1b2c3d4"}}}}},
	}
	for _, tc := range cases {
		h.run(t, tc.name, func(t *testing.T) {
			re := h.reject(wire.ErrInvalid, fsm.CmdTaskAck, fsm.TaskAck{Job: "c", Generation: 1, Epoch: 1, Task: tc.task, Manifest: tc.m})
			if re.Field != tc.field {
				t.Fatalf("refused naming field %q (%v), want %q", re.Field, re, tc.field)
			}
		})
	}
	// Well-formed, it is taken.
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "c", Generation: 1, Epoch: 1, Task: "inc", Manifest: &fsm.ManifestAck{
		Blobs: commit, Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("0a1b2c3d")}}}}))
}
