package fsm

import (
	"bytes"
	"encoding/binary"

	"github.com/metastore/metastore/manifests"
)

// Manifests are stored structurally, so that an ack costs what its delta
// costs. A task's manifests form a lineage: one record per segment or base
// with the epoch it was added in and the epoch it was dropped in (0: still
// present). The manifest of epoch E is every record with added <= E and
// (dropped == 0 or dropped > E). Acks of one attempt extend the task's
// lineage; the first ack of a new attempt continues it from the latest
// checkpoint (undoing what aborted epochs added), or forks a new lineage
// from another checkpoint (copying that manifest's references once).
//
// A record lives while a live epoch of its lineage (pending, retained or
// pinned, in lineageRecord.Epochs) lies in [added, dropped), or while it is in the
// lineage's current manifest. Each record holds one reference to its blob;
// when a record dies the reference is dropped. The buckets are declared in
// schema.go.

const (
	kindBase    byte = 'b'
	kindSegment byte = 's'
	opAdd       byte = 'a'
	opDrop      byte = 'd'
)

func (r *record) presentAt(e uint64) bool { return r.Added <= e && (r.Dropped == 0 || r.Dropped > e) }

// The key builders below allocate each key once, at its length: an ack
// builds two keys per segment it adds (its record and its change). (bbolt
// keeps the key slices it is given until the transaction ends, so no
// buffer is reused.)

// refLen is the length of a reference's suffix: key, zero byte, offset.
func refLen(ref manifests.Ref) int { return len(ref.Key) + 9 }

func appendRef(b []byte, ref manifests.Ref) []byte {
	b = append(append(b, ref.Key...), 0)
	return binary.BigEndian.AppendUint64(b, ref.Offset)
}

func refSuffix(ref manifests.Ref) []byte { return appendRef(make([]byte, 0, refLen(ref)), ref) }

func parseRefSuffix(b []byte) (manifests.Ref, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 || len(b) != i+1+8 {
		return manifests.Ref{}, false
	}
	return manifests.Ref{Key: string(b[:i]), Offset: binary.BigEndian.Uint64(b[i+1:])}, true
}

// parseRecordKey parses the reference of a records key (lineage id, kind
// byte, reference); false if the key is not one.
func parseRecordKey(k []byte) (manifests.Ref, bool) {
	if len(k) < 9 {
		return manifests.Ref{}, false
	}
	return parseRefSuffix(k[9:])
}

func recKey(lid uint64, kind byte, ref manifests.Ref) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 9+refLen(ref)), lid)
	return appendRef(append(b, kind), ref)
}

func changeKey(lid, epoch uint64, op, kind byte, ref manifests.Ref) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 18+refLen(ref)), lid)
	b = binary.BigEndian.AppendUint64(b, epoch)
	return appendRef(append(b, op, kind), ref)
}

func headKey(job, task string) []byte {
	return append(append(append(make([]byte, 0, len(job)+1+len(task)), job...), 0), task...)
}

func (t *txn) record(lid uint64, kind byte, ref manifests.Ref) (*record, error) {
	var r record
	ok, err := t.getRecord(bucketRecords, recKey(lid, kind, ref), &r)
	if err != nil || !ok {
		return nil, err
	}
	return &r, nil
}

// The accessors of a lineage's records and of the changes by epoch, each
// by its parts rather than its key (recKey, changeKey).

func (t *txn) putRec(lid uint64, kind byte, ref manifests.Ref, r *record) error {
	return t.putRecord(bucketRecords, recKey(lid, kind, ref), r)
}

func (t *txn) delRec(lid uint64, kind byte, ref manifests.Ref) error {
	return t.del(bucketRecords, recKey(lid, kind, ref))
}

func (t *txn) putChange(lid, epoch uint64, op, kind byte, ref manifests.Ref) error {
	return t.put(bucketRecChanges, changeKey(lid, epoch, op, kind, ref), nil)
}

func (t *txn) delChange(lid, epoch uint64, op, kind byte, ref manifests.Ref) error {
	return t.del(bucketRecChanges, changeKey(lid, epoch, op, kind, ref))
}
