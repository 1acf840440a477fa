package fsm

import (
	"github.com/metastore/metastore/manifests"
)

// Reading a lineage: the manifest of a lineage at an epoch, as the
// manifests package plans against it and as queries return it.

// lineageView is the manifest of a lineage at an epoch (0: its current
// manifest), as a manifests.View.
type lineageView struct {
	t   *txn
	lid uint64 // 0: the empty manifest
	at  uint64
	// read, when not nil, keeps the records the view read (nil: absent).
	// Planning an ack reads the record of each segment it adds twice (is
	// it present: manifests.Plan; may its reference be reused:
	// checkReuse) and writes nothing until it is done, so the second read
	// costs no seek.
	read map[recordID]*record
}

// recordID names a record within a lineage.
type recordID struct {
	kind byte
	ref  manifests.Ref
}

// record reads a record of the view's lineage (nil: none).
func (v lineageView) record(kind byte, ref manifests.Ref) (*record, error) {
	if v.read == nil {
		return v.t.record(v.lid, kind, ref)
	}
	id := recordID{kind, ref}
	if r, ok := v.read[id]; ok {
		return r, nil
	}
	r, err := v.t.record(v.lid, kind, ref)
	if err == nil {
		v.read[id] = r
	}
	return r, err
}

// noteUnreferenced records as absent in read the records of the
// segments and bases d adds whose blob holds no reference: a blob's Refs
// counts the records naming it in every lineage (fsck checks the count;
// the collector deletes by it), so no record names such a blob, and none
// can be found without a seek. That is every segment of a blob the ack
// commits: planning it seeks nothing in records. The blobs are read
// anyway by the checks of the ack's ranges and commits, which read them
// again from the command's blob cache. A reference to a blob that holds
// references is read as before.
func (v lineageView) noteUnreferenced(d manifests.Delta) error {
	if v.lid == 0 || v.read == nil {
		return nil
	}
	note := func(ref manifests.Ref, kinds ...byte) error {
		b, err := v.t.blob(ref.Key)
		if err != nil {
			return err
		}
		if b == nil || b.Refs == 0 {
			for _, kind := range kinds {
				v.read[recordID{kind, ref}] = nil
			}
		}
		return nil
	}
	// A reference the delta adds is looked up as both kinds: present
	// (manifests.Plan) and at a reference of the other kind (the distinct
	// rule, task-ack version 4).
	for _, s := range d.AddSegments {
		if err := note(s.ID(), kindSegment, kindBase); err != nil {
			return err
		}
	}
	if m := d.Materialize; m != nil {
		for _, b := range m.Bases {
			if err := note(b.ID(), kindBase, kindSegment); err != nil {
				return err
			}
		}
	}
	return nil
}

func (v lineageView) present(r *record) bool {
	if v.at == 0 {
		return r.Dropped == 0
	}
	return r.presentAt(v.at)
}

func (v lineageView) HasSegment(ref manifests.Ref) (bool, error) {
	if v.lid == 0 {
		return false, nil
	}
	r, err := v.record(kindSegment, ref)
	if err != nil || r == nil {
		return false, err
	}
	return v.present(r), nil
}

func (v lineageView) HasBase(ref manifests.Ref) (bool, error) {
	if v.lid == 0 {
		return false, nil
	}
	r, err := v.record(kindBase, ref)
	if err != nil || r == nil {
		return false, err
	}
	return v.present(r), nil
}

// SegmentsBefore lists the present segments whose last sequence number is
// below seq (a materialization truncates them), in key order. It reads
// every present segment of the view: a materialization usually truncates
// nearly all of them.
func (v lineageView) SegmentsBefore(seq uint64, fn func(manifests.Segment) error) error {
	if v.lid == 0 {
		return nil
	}
	return v.each(kindSegment, func(ref manifests.Ref, r *record) error {
		if r.LastSeq < seq {
			return fn(segmentOf(ref, r))
		}
		return nil
	})
}

func (v lineageView) Bases(fn func(manifests.Base) error) error {
	if v.lid == 0 {
		return nil
	}
	return v.each(kindBase, func(ref manifests.Ref, r *record) error {
		return fn(manifests.Base{Key: ref.Key, Offset: ref.Offset, Length: r.Length, CRC32C: r.CRC32C})
	})
}

// each calls fn for every present record of a kind, in key order.
func (v lineageView) each(kind byte, fn func(manifests.Ref, *record) error) error {
	prefix := append(u64(v.lid), kind)
	return v.t.scan(bucketRecords, prefix, func(k, val []byte) (bool, error) {
		var r record
		if err := decodeRecord(val, &r); err != nil {
			return false, err
		}
		if !v.present(&r) {
			return true, nil
		}
		ref, ok := parseRecordKey(k)
		if !ok {
			return false, &corruptError{"record key"}
		}
		return true, fn(ref, &r)
	})
}

// manifest reads the whole manifest of the view.
func (v lineageView) manifest() (*manifests.Manifest, error) {
	m := &manifests.Manifest{Bases: []manifests.Base{}, Segments: []manifests.Segment{}}
	if err := v.Bases(func(b manifests.Base) error { m.Bases = append(m.Bases, b); return nil }); err != nil {
		return nil, err
	}
	err := v.each(kindSegment, func(ref manifests.Ref, r *record) error {
		m.Segments = append(m.Segments, segmentOf(ref, r))
		return nil
	})
	return m, err
}

func segmentOf(ref manifests.Ref, r *record) manifests.Segment {
	return manifests.Segment{Key: ref.Key, Offset: ref.Offset, Length: r.Length, FirstSeq: r.FirstSeq, LastSeq: r.LastSeq, CRC32C: r.CRC32C}
}

// readManifest returns the manifest a task acknowledged in an epoch.
func readManifest(t *txn, lid, epoch uint64) (*manifests.Manifest, error) {
	return lineageView{t: t, lid: lid, at: epoch}.manifest()
}
