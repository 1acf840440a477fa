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
// pinned, in Lineage.Epochs) lies in [added, dropped), or while it is in the
// lineage's current manifest. Each record holds one reference to its blob;
// when a record dies the reference is dropped. The buckets are declared in
// schema.go.

const (
	kindBase    byte = 'b'
	kindSegment byte = 's'
	opAdd       byte = 'a'
	opDrop      byte = 'd'
)

// Lineage is one chain of a task's manifests.
type Lineage struct {
	ID         uint64 `json:"id"`
	Job        string `json:"job"`
	Task       string `json:"task"`
	Generation uint64 `json:"generation"`
	// LastEpoch is the epoch of the latest ack applied to the lineage.
	LastEpoch uint64 `json:"last_epoch"`
	// Epochs lists the live epochs (pending, retained, pinned) the
	// lineage's task acknowledged, ascending.
	Epochs []uint64 `json:"epochs"`
	// Released marks a lineage no attempt extends any more (set by
	// attempt-start version 3, releaseHeads): it holds exactly what its
	// live epochs hold, is rolled back to the newest as newer ones leave,
	// and is deleted with the last. A lineage an attempt continues again
	// (the first ack of an attempt, from its newest epoch) is no longer
	// released.
	Released bool `json:"released,omitempty"`
}

type record struct {
	Length   uint64 `json:"length"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	Added    uint64 `json:"added"`
	Dropped  uint64 `json:"dropped,omitempty"`
	// CRC32C is the checksum the ack declared for the range (empty: none).
	CRC32C string `json:"crc32c,omitempty"`
}

func (r *record) presentAt(e uint64) bool { return r.Added <= e && (r.Dropped == 0 || r.Dropped > e) }

func refSuffix(ref manifests.Ref) []byte {
	return append(append([]byte(ref.Key), 0), u64(ref.Offset)...)
}

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
	return append(append(u64(lid), kind), refSuffix(ref)...)
}

func changeKey(lid, epoch uint64, op, kind byte, ref manifests.Ref) []byte {
	return append(append(append(u64(lid), u64(epoch)...), op, kind), refSuffix(ref)...)
}

func seqKey(lid, lastSeq uint64, ref manifests.Ref) []byte {
	return append(append(u64(lid), u64(lastSeq)...), refSuffix(ref)...)
}

func headKey(job, task string) []byte { return append(jobPrefix(job), task...) }

func (t *txn) lineage(id uint64) (*Lineage, error) {
	var l Lineage
	ok, err := t.getJSON(bucketLineages, u64(id), &l)
	if err != nil || !ok {
		return nil, err
	}
	return &l, nil
}

func (t *txn) putLineage(l *Lineage) error { return t.putJSON(bucketLineages, u64(l.ID), l) }

func (t *txn) head(job, task string) (uint64, error) {
	raw := t.b(bucketHeads).Get(headKey(job, task))
	if raw == nil {
		return 0, nil
	}
	if len(raw) != 8 {
		return 0, &corruptError{"head of " + job + "/" + task}
	}
	return binary.BigEndian.Uint64(raw), nil
}

func (t *txn) record(lid uint64, kind byte, ref manifests.Ref) (*record, error) {
	var r record
	ok, err := t.getJSON(bucketRecords, recKey(lid, kind, ref), &r)
	if err != nil || !ok {
		return nil, err
	}
	return &r, nil
}
