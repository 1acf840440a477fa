package client

import (
	"fmt"
	"slices"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TaskState keeps the state manifest of one task (materialized bases plus
// changelog segments) and builds what the task's next ack carries, so a
// worker never computes a delta by hand:
//
//	ts, _ := client.NewTaskState(restored, caps) // restored may be nil
//	key, _ := c.Upload(ctx, job, gen, task, bytes.NewReader(chunk), int64(len(chunk)))
//	ts.AddBlob(key, uint64(len(chunk)), "")
//	ts.AddSegment(key, 0, uint64(len(chunk)), firstSeq, lastSeq)
//	_, err := c.Ack(ctx, job, gen, epoch, task, client.AckRequest{Manifest: ts.Manifest()})
//	if err == nil {
//		ts.Acked()
//	}
//
// The acknowledged manifest is the base; the operations since (AddBlob,
// AddSegment, DropSegment, Materialize) are the pending delta, which
// Manifest returns for the next ack (with the restore point as its base on
// the first ack of an attempt) and Acked folds into the base, with
// manifests.Apply as the model. A task with the incremental capability acks
// the delta; one without acks the whole manifest (Full), which the store
// diffs itself.
//
// Call Acked only after the ack succeeded, and change nothing between
// Manifest and Acked. After ErrOutcomeUnknown repeat the same ack (Manifest
// answers the same until the state changes), and after a definite failure
// (the epoch was aborted: ErrEpochNotPending) keep going: the pending delta
// is sent with the next epoch's ack. A successful ack counts even if its
// epoch is aborted later: within an attempt the store's manifest carries on
// from the task's last successful ack, as TaskState does.
//
// A TaskState is not safe for concurrent use.
type TaskState struct {
	incremental bool
	base        *wire.BaseRef
	acked       manifests.Manifest
	ackedSegs   map[manifests.Ref]manifests.Segment

	// The pending delta: a materialization applies first, then the drops
	// (of acknowledged segments), then the additions.
	mat   *manifests.Materialization
	drops []manifests.Ref
	adds  []manifests.Segment
	blobs []wire.BlobCommit
}

// NewTaskState returns the state of a task with capabilities caps (which
// must include state) in a new attempt, continuing from restored: the
// manifest it restored, named as the base of the first ack. With restored
// nil, or a restore without a state manifest (nothing to recover, no prior
// state), the task starts from an empty manifest.
func NewTaskState(restored *Restore, caps wire.Caps) (*TaskState, error) {
	if !caps.Has(wire.KindState) {
		return nil, fmt.Errorf("client: TaskState needs the state capability")
	}
	s := &TaskState{incremental: caps.Incremental()}
	if restored != nil {
		if m := restored.StateManifest(); m != nil {
			s.acked = cloneManifest(*m)
			s.acked.Sort()
			s.base = restored.Base()
		}
	}
	s.index()
	return s, nil
}

func cloneManifest(m manifests.Manifest) manifests.Manifest {
	return manifests.Manifest{Bases: slices.Clone(m.Bases), Segments: slices.Clone(m.Segments)}
}

func (s *TaskState) index() {
	s.ackedSegs = make(map[manifests.Ref]manifests.Segment, len(s.acked.Segments))
	for _, sg := range s.acked.Segments {
		s.ackedSegs[sg.ID()] = sg
	}
}

// Incremental reports whether acks carry deltas (else whole manifests).
func (s *TaskState) Incremental() bool { return s.incremental }

// Base is the restore point the next ack names, nil once an ack of the
// attempt succeeded (or when the task did not restore a manifest).
func (s *TaskState) Base() *wire.BaseRef { return s.base }

// AckedManifest is the manifest as of the last successful ack (or the
// restore).
func (s *TaskState) AckedManifest() manifests.Manifest { return cloneManifest(s.acked) }

// Pending reports whether the next ack has a manifest change to carry.
func (s *TaskState) Pending() bool {
	return s.base != nil || s.mat != nil || len(s.drops) > 0 || len(s.adds) > 0 || len(s.blobs) > 0
}

func (s *TaskState) truncated(sg manifests.Segment) bool {
	return s.mat != nil && sg.LastSeq < s.mat.TruncateBefore
}

func (s *TaskState) dropped(ref manifests.Ref) bool { return slices.Contains(s.drops, ref) }

func (s *TaskState) addIndex(ref manifests.Ref) int {
	return slices.IndexFunc(s.adds, func(sg manifests.Segment) bool { return sg.ID() == ref })
}

// ackedPresent reports whether an acknowledged segment is still in the
// current manifest.
func (s *TaskState) ackedPresent(ref manifests.Ref) bool {
	sg, ok := s.ackedSegs[ref]
	return ok && !s.truncated(sg) && !s.dropped(ref)
}

// Has reports whether the current manifest holds the segment.
func (s *TaskState) Has(ref manifests.Ref) bool { return s.addIndex(ref) >= 0 || s.ackedPresent(ref) }

// Current is the manifest with the pending delta applied, sorted.
func (s *TaskState) Current() manifests.Manifest {
	var m manifests.Manifest
	if s.mat != nil {
		m.Bases = slices.Clone(s.mat.Bases)
	} else {
		m.Bases = slices.Clone(s.acked.Bases)
	}
	for _, sg := range s.acked.Segments {
		if s.ackedPresent(sg.ID()) {
			m.Segments = append(m.Segments, sg)
		}
	}
	m.Segments = append(m.Segments, s.adds...)
	if m.Bases == nil {
		m.Bases = []manifests.Base{}
	}
	if m.Segments == nil {
		m.Segments = []manifests.Segment{}
	}
	m.Sort()
	return m
}

// AddBlob commits an upload (a key from Upload or UploadSlots) with its
// size and optional checksum: the next ack turns its intent into a live
// blob. Reference it with AddSegment or Materialize; a committed blob
// nothing references is garbage.
func (s *TaskState) AddBlob(key string, size uint64, checksum string) error {
	if err := manifests.ValidateKey(key); err != nil {
		return err
	}
	for _, b := range s.blobs {
		if b.Key == key {
			if b.Size != size {
				return &manifests.Error{Code: manifests.CodeDuplicate, Ref: key, Message: fmt.Sprintf("blob already added with size %d, not %d", b.Size, size)}
			}
			return nil
		}
	}
	s.blobs = append(s.blobs, wire.BlobCommit{Key: key, Size: size, Checksum: checksum})
	return nil
}

// AddSegment adds a changelog segment: length bytes of blob key at offset,
// holding the state changes with sequence numbers firstSeq..lastSeq.
func (s *TaskState) AddSegment(key string, offset, length, firstSeq, lastSeq uint64) error {
	return s.AddSegmentCRC(key, offset, length, firstSeq, lastSeq, "")
}

// AddSegmentCRC is AddSegment with the CRC32C of the segment's bytes
// (manifests.CRC32C), which the ack declares and every restore verifies
// when it reads them back ("": none).
func (s *TaskState) AddSegmentCRC(key string, offset, length, firstSeq, lastSeq uint64, crc32c string) error {
	sg := manifests.Segment{Key: key, Offset: offset, Length: length, FirstSeq: firstSeq, LastSeq: lastSeq, CRC32C: crc32c}
	if err := (manifests.Delta{AddSegments: []manifests.Segment{sg}}).Validate(); err != nil {
		return err
	}
	if s.Has(sg.ID()) {
		return &manifests.Error{Code: manifests.CodeAlreadyPresent, Ref: sg.ID().String(), Message: "segment is already in the manifest"}
	}
	if s.mat != nil && slices.ContainsFunc(s.mat.Bases, func(b manifests.Base) bool { return b.ID() == sg.ID() }) {
		return &manifests.Error{Code: manifests.CodeDuplicate, Ref: sg.ID().String(), Message: "segment at the offset of a new base"}
	}
	s.adds = append(s.adds, sg)
	return nil
}

// DropSegment removes a segment from the manifest.
func (s *TaskState) DropSegment(ref manifests.Ref) error {
	if i := s.addIndex(ref); i >= 0 {
		s.adds = slices.Delete(s.adds, i, i+1)
		return nil
	}
	if !s.ackedPresent(ref) {
		return &manifests.Error{Code: manifests.CodeNotInManifest, Ref: ref.String(), Message: "dropped segment is not in the manifest"}
	}
	s.drops = append(s.drops, ref)
	return nil
}

// Materialize replaces the bases with a materialized snapshot of the state
// and truncates the changelog: every segment whose LastSeq is below
// truncateBefore leaves the manifest.
func (s *TaskState) Materialize(bases []manifests.Base, truncateBefore uint64) error {
	m := &manifests.Materialization{Bases: slices.Clone(bases), TruncateBefore: truncateBefore}
	if err := (manifests.Delta{Materialize: m}).Validate(); err != nil {
		return err
	}
	for _, sg := range s.adds {
		if sg.LastSeq < truncateBefore {
			continue
		}
		if slices.ContainsFunc(bases, func(b manifests.Base) bool { return b.ID() == sg.ID() }) {
			return &manifests.Error{Code: manifests.CodeDuplicate, Ref: sg.ID().String(), Message: "base at the offset of a segment in the manifest"}
		}
	}
	if s.mat != nil {
		// The acknowledged segments the earlier materialization truncated
		// stay truncated.
		m.TruncateBefore = max(m.TruncateBefore, s.mat.TruncateBefore)
	}
	s.mat = m
	// Acknowledged segments the materialization truncates are no longer
	// dropped one by one (the store refuses both), and pending additions
	// it truncates never happen.
	s.drops = slices.DeleteFunc(s.drops, func(ref manifests.Ref) bool { return s.truncated(s.ackedSegs[ref]) })
	s.adds = slices.DeleteFunc(s.adds, func(sg manifests.Segment) bool { return sg.LastSeq < truncateBefore })
	return nil
}

// Delta is the pending delta against the acknowledged manifest.
func (s *TaskState) Delta() manifests.Delta {
	d := manifests.Delta{DropSegments: slices.Clone(s.drops), AddSegments: slices.Clone(s.adds)}
	if s.mat != nil {
		d.Materialize = &manifests.Materialization{Bases: slices.Clone(s.mat.Bases), TruncateBefore: s.mat.TruncateBefore}
	}
	return d
}

// Manifest is the manifest part of the next ack: the restore point as base
// on the first ack of an attempt, the blobs to commit, and the delta (or,
// without the incremental capability, the whole manifest). It is nil when
// nothing changed since the last ack, which keeps the manifest as it is.
// It answers the same until the state changes, so a repeated ack is
// recognised as the same ack.
func (s *TaskState) Manifest() *wire.ManifestAck {
	if !s.Pending() {
		return nil
	}
	ack := &wire.ManifestAck{Blobs: slices.Clone(s.blobs)}
	if s.base != nil {
		b := *s.base
		ack.Base = &b
	}
	if s.incremental {
		if d := s.Delta(); d.Materialize != nil || d.Size() > 0 {
			ack.Delta = &d
		}
	} else {
		cur := s.Current()
		ack.Full = &cur
	}
	return ack
}

// Acked folds the pending delta into the acknowledged manifest, after the
// ack carrying Manifest succeeded.
func (s *TaskState) Acked() {
	next, err := manifests.Apply(s.acked, s.Delta())
	if err != nil {
		// The operations were checked one by one against the manifest, so
		// the model cannot refuse their delta.
		panic(fmt.Sprintf("client: TaskState: the pending delta does not apply to the acknowledged manifest: %v", err))
	}
	if next.Bases == nil {
		next.Bases = []manifests.Base{}
	}
	if next.Segments == nil {
		next.Segments = []manifests.Segment{}
	}
	s.acked = next
	s.index()
	s.base, s.mat, s.drops, s.adds, s.blobs = nil, nil, nil, nil, nil
}
