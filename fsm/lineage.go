package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

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

// lineageView is the manifest of a lineage at an epoch (0: its current
// manifest), as a manifests.View.
type lineageView struct {
	t   *txn
	lid uint64 // 0: the empty manifest
	at  uint64
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
	r, err := v.t.record(v.lid, kindSegment, ref)
	if err != nil || r == nil {
		return false, err
	}
	return v.present(r), nil
}

func (v lineageView) SegmentsBefore(seq uint64, fn func(manifests.Segment) error) error {
	if v.lid == 0 {
		return nil
	}
	if v.at == 0 {
		// Present segments are indexed by last sequence number.
		var refs []manifests.Ref
		err := v.t.scan(bucketRecSeq, u64(v.lid), func(k, _ []byte) (bool, error) {
			if len(k) < 16 {
				return false, &corruptError{"rec_seq key"}
			}
			if binary.BigEndian.Uint64(k[8:16]) >= seq {
				return false, nil
			}
			ref, ok := parseRefSuffix(k[16:])
			if !ok {
				return false, &corruptError{"rec_seq key"}
			}
			refs = append(refs, ref)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, ref := range refs {
			r, err := v.t.record(v.lid, kindSegment, ref)
			if err != nil {
				return err
			}
			if r == nil {
				return &corruptError{"rec_seq names a missing record " + ref.String()}
			}
			if err := fn(segmentOf(ref, r)); err != nil {
				return err
			}
		}
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
		if err := json.Unmarshal(val, &r); err != nil {
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

// ManifestAck is the manifest part of a state ack.
type ManifestAck struct {
	// Base names the checkpoint the task restored from, on the first ack of
	// an attempt; absent there, the task starts from an empty manifest.
	// Later acks of the attempt extend the previous ack and omit it.
	Base *BaseRef `json:"base,omitempty"`
	// Blobs commits uploads (held by intents) that this ack references.
	Blobs []BlobCommit `json:"blobs,omitempty"`
	// Delta is the change from the previous manifest (tasks with the
	// incremental flag); Full the whole manifest (tasks without it).
	Delta *manifests.Delta    `json:"delta,omitempty"`
	Full  *manifests.Manifest `json:"full,omitempty"`
}

// BaseRef names the checkpoint a task restored from.
type BaseRef struct {
	Job   string `json:"job"`
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
}

// BlobCommit turns an upload intent into a live blob.
type BlobCommit struct {
	Key      string `json:"key"`
	Size     uint64 `json:"size"`
	Checksum string `json:"checksum,omitempty"`
}

// Validate checks the manifest part on its own.
func (m *ManifestAck) Validate() error {
	if m.Delta != nil && m.Full != nil {
		return ruleErr(CodeInvalid, "manifest", "send a delta or a full manifest, not both")
	}
	if m.Base != nil {
		if err := checkID("manifest.base.job", m.Base.Job); err != nil {
			return err
		}
		if err := checkID("manifest.base.task", m.Base.Task); err != nil {
			return err
		}
		if m.Base.Epoch == 0 {
			return ruleErr(CodeInvalid, "manifest.base.epoch", "must be a positive integer")
		}
	}
	if len(m.Blobs) > MaxIntents {
		return ruleErr(CodeInvalid, "manifest.blobs", "at most %d blobs per ack", MaxIntents)
	}
	seen := map[string]bool{}
	for _, b := range m.Blobs {
		if err := manifests.ValidateKey(b.Key); err != nil {
			return manifestErr("manifest.blobs", err)
		}
		if seen[b.Key] {
			return ruleErr(CodeInvalid, "manifest.blobs", "blob %q committed twice", b.Key)
		}
		seen[b.Key] = true
		if err := checkText("manifest.blobs.checksum", b.Checksum); err != nil {
			return err
		}
	}
	if err := m.checkCRCs(); err != nil {
		return err
	}
	if err := m.delta().Validate(); err != nil {
		field := "manifest.delta"
		if m.Full != nil {
			field = "manifest.full"
		}
		return manifestErr(field, err)
	}
	return nil
}

// checkCRCs checks the shape of every declared CRC32C (8 lowercase hex
// digits, or absent), naming the field; the bytes are the client's to
// verify when it reads them back.
func (m *ManifestAck) checkCRCs() error {
	check := func(field string, ref manifests.Ref, v string) error {
		if manifests.ValidCRC32C(v) {
			return nil
		}
		return ruleErr(CodeInvalid, field, "%s: a crc32c is 8 lowercase hex digits (CRC32C, Castagnoli, of the range's bytes), not %q", ref, v)
	}
	if d := m.Delta; d != nil {
		if d.Materialize != nil {
			for _, b := range d.Materialize.Bases {
				if err := check("manifest.delta.materialize.bases.crc32c", b.ID(), b.CRC32C); err != nil {
					return err
				}
			}
		}
		for _, s := range d.AddSegments {
			if err := check("manifest.delta.add_segments.crc32c", s.ID(), s.CRC32C); err != nil {
				return err
			}
		}
	}
	if f := m.Full; f != nil {
		for _, b := range f.Bases {
			if err := check("manifest.full.bases.crc32c", b.ID(), b.CRC32C); err != nil {
				return err
			}
		}
		for _, s := range f.Segments {
			if err := check("manifest.full.segments.crc32c", s.ID(), s.CRC32C); err != nil {
				return err
			}
		}
	}
	return nil
}

// delta is the delta the ack carries against an empty manifest when Full
// is set; see applyManifest for the diff against the current one.
func (m *ManifestAck) delta() manifests.Delta {
	switch {
	case m.Delta != nil:
		return *m.Delta
	case m.Full != nil:
		return manifests.Full(*m.Full)
	}
	return manifests.Delta{}
}

// manifestErr turns a manifests rule violation into a RuleError naming the
// reference.
func manifestErr(field string, err error) error {
	var me *manifests.Error
	if !errors.As(err, &me) {
		return err
	}
	code := CodeManifestMismatch
	if me.Code == manifests.CodeInvalid || me.Code == manifests.CodeDuplicate || me.Code == manifests.CodeOutOfRange {
		code = CodeInvalid
	}
	msg := me.Message
	if me.Ref != "" {
		msg = me.Ref + ": " + msg
	}
	return &RuleError{Code: code, Field: field, Message: msg}
}

// manifestPlan is what applyManifest decided, before it writes.
type manifestPlan struct {
	mode   string // continue, rollback, fork, fresh
	head   *Lineage
	source *Lineage // fork: the lineage copied from
	at     uint64   // rollback, fork: the base epoch
	change manifests.Change
	commit []BlobCommit
	strict bool // task-ack version 2 rules
}

// planManifest checks a state ack's manifest against the stored state and
// decides what to write. It writes nothing. strict applies the rules of
// task-ack version 2 (crossjob.go): another job's checkpoint is a base only
// when it is pinned, another job's blobs are referenced only when inherited
// from such a base, and upload slots of an earlier attempt are refused.
func planManifest(t *txn, j *Job, gen, epoch uint64, tk *Task, m *ManifestAck, now time.Time, strict bool) (*manifestPlan, error) {
	if m.Delta != nil && !tk.Caps.Incremental() {
		return nil, ruleErr(CodeInvalid, "manifest.delta", "task %q does not have the incremental capability: send the full manifest", tk.ID)
	}
	if m.Full != nil && tk.Caps.Incremental() {
		return nil, ruleErr(CodeInvalid, "manifest.full", "task %q has the incremental capability: send a delta", tk.ID)
	}
	p := &manifestPlan{commit: m.Blobs, strict: strict}
	hid, err := t.head(j.ID, tk.ID)
	if err != nil {
		return nil, err
	}
	if hid != 0 {
		if p.head, err = t.lineage(hid); err != nil {
			return nil, err
		}
	}
	view := lineageView{t: t}
	switch {
	case p.head != nil && p.head.Generation == gen:
		if m.Base != nil {
			return nil, ruleErr(CodeConflict, "manifest.base", "the base is given on the first ack of an attempt only; this attempt already acknowledged epoch %d", p.head.LastEpoch)
		}
		if epoch <= p.head.LastEpoch {
			return nil, ruleErr(CodeEpochNotIncreasing, "epoch", "task %q already acknowledged epoch %d; acks of a task go in epoch order", tk.ID, p.head.LastEpoch)
		}
		p.mode, view.lid = "continue", p.head.ID
	case m.Base == nil:
		p.mode = "fresh"
	default:
		src, err := baseLineage(t, j.ID, m.Base, strict)
		if err != nil {
			return nil, err
		}
		p.source, p.at = src, m.Base.Epoch
		view.lid, view.at = src.ID, m.Base.Epoch
		p.mode = "fork"
		if p.head != nil && src.ID == p.head.ID && len(src.Epochs) > 0 && src.Epochs[len(src.Epochs)-1] == m.Base.Epoch {
			p.mode = "rollback"
		}
	}
	d := m.delta()
	if m.Full != nil && view.lid != 0 {
		cur, err := view.manifest()
		if err != nil {
			return nil, err
		}
		d = manifests.Diff(*cur, *m.Full)
	}
	if p.change, err = manifests.Plan(view, d); err != nil {
		return nil, manifestErr("manifest", err)
	}
	if strict {
		if err := checkForeignBlobs(t, j.ID, view, p.change, m.Blobs); err != nil {
			return nil, err
		}
	}
	if p.mode == "continue" || p.mode == "rollback" {
		if err := checkReuse(t, p, view); err != nil {
			return nil, err
		}
	}
	committing := map[string]BlobCommit{}
	for _, bc := range m.Blobs {
		b, err := t.blob(bc.Key)
		if err != nil {
			return nil, err
		}
		if err := checkCommit(b, bc, j.ID, gen, now, strict); err != nil {
			return nil, err
		}
		committing[bc.Key] = bc
	}
	err = p.change.CheckRanges(func(key string) (uint64, error) {
		if bc, ok := committing[key]; ok {
			return bc.Size, nil
		}
		b, err := t.blob(key)
		if err != nil {
			return 0, err
		}
		return referenceable(b, key, now)
	})
	if err != nil {
		return nil, manifestErr("manifest", err)
	}
	return p, nil
}

// checkReuse refuses to add a segment or base whose reference (blob key and
// offset) still has a record in the lineage: a record dropped from the
// current manifest but held by an older live checkpoint, or one this very
// change drops. A record is keyed by its reference, so reusing one would
// overwrite the interval an older checkpoint depends on. Records a rollback
// is about to delete do not count.
func checkReuse(t *txn, p *manifestPlan, view lineageView) error {
	dropped := map[manifests.Ref]bool{}
	for _, r := range p.change.DropSegments {
		dropped[r] = true
	}
	for _, b := range p.change.DropBases {
		dropped[b.ID()] = true
	}
	check := func(kind byte, ref manifests.Ref) error {
		r, err := t.record(view.lid, kind, ref)
		if err != nil || r == nil {
			return err
		}
		if p.mode == "rollback" && r.Added > p.at {
			return nil
		}
		if !view.present(r) || dropped[ref] {
			return ruleErr(CodeManifestMismatch, "manifest", "%s: this reference was dropped from the task's manifest and an older checkpoint still holds it; a reference cannot be reused: write the data at a new key or offset", ref)
		}
		return nil
	}
	for _, b := range p.change.AddBases {
		if err := check(kindBase, b.ID()); err != nil {
			return err
		}
	}
	for _, sg := range p.change.AddSegments {
		if err := check(kindSegment, sg.ID()); err != nil {
			return err
		}
	}
	return nil
}

// baseLineage resolves the checkpoint a task restored from to the lineage
// holding its manifest.
func baseLineage(t *txn, job string, base *BaseRef, strict bool) (*Lineage, error) {
	if strict && base.Job != job {
		if err := checkForeignBase(t, job, base); err != nil {
			return nil, err
		}
	}
	bj, err := t.job(base.Job)
	if err != nil {
		return nil, err
	}
	if bj == nil {
		return nil, ruleErr(CodeNotFound, "manifest.base.job", "job %q does not exist", base.Job)
	}
	e, err := t.epoch(base.Job, base.Epoch)
	if err != nil {
		return nil, err
	}
	if e == nil || e.State != EpochCompleted {
		state := "not remembered"
		if e != nil {
			state = string(e.State)
		}
		return nil, ruleErr(CodeEpochNotCompleted, "manifest.base.epoch", "base epoch %d of job %q is %s; a base is a completed, retained epoch", base.Epoch, base.Job, state)
	}
	a, err := t.ack(base.Job, base.Epoch, base.Task)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Lineage == 0 {
		return nil, ruleErr(CodeNotFound, "manifest.base.task", "epoch %d of job %q holds no manifest for task %q", base.Epoch, base.Job, base.Task)
	}
	l, err := t.lineage(a.Lineage)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, &corruptError{fmt.Sprintf("ack names missing lineage %d", a.Lineage)}
	}
	return l, nil
}

// checkCommit checks that an ack may commit blob b: an intent of this job
// whose lease has not ended (strict: and that this attempt asked for), or a
// blob already committed with the same size.
func checkCommit(b *Blob, bc BlobCommit, job string, gen uint64, now time.Time, strict bool) error {
	field := "manifest.blobs"
	switch {
	case b == nil:
		return ruleErr(CodeBlobUnknown, field, "blob %q has no upload intent; ask for an upload slot first", bc.Key)
	case b.State == BlobIntent:
		if b.Job != job {
			return ruleErr(CodeInvalid, field, "blob %q is an upload of job %q", bc.Key, b.Job)
		}
		if b.LeaseUntil != nil && now.After(*b.LeaseUntil) {
			return ruleErr(CodeBlobExpired, field, "the upload intent of blob %q expired at %s", bc.Key, b.LeaseUntil.Format(time.RFC3339))
		}
		if strict && b.Generation != 0 && b.Generation != gen {
			return ruleErr(CodeFenced, field, "blob %q is an upload slot of attempt generation %d, superseded by generation %d: its upload URL was handed to a worker of that attempt; ask for new upload slots", bc.Key, b.Generation, gen)
		}
		return nil
	case b.State == BlobLive:
		if b.Size != bc.Size {
			return ruleErr(CodeConflict, field, "blob %q was committed with size %d, not %d", bc.Key, b.Size, bc.Size)
		}
		return nil
	}
	return blobStateErr(b, field)
}

// referenceable returns the size of a blob a manifest may reference.
func referenceable(b *Blob, key string, now time.Time) (uint64, error) {
	field := "manifest"
	switch {
	case b == nil:
		return 0, ruleErr(CodeBlobUnknown, field, "blob %q is not known", key)
	case b.State == BlobLive:
		return b.Size, nil
	case b.State == BlobIntent:
		return 0, ruleErr(CodeInvalid, "manifest.blobs", "blob %q is an upload not yet committed: list it in manifest.blobs with its size", key)
	}
	return 0, blobStateErr(b, field)
}

func blobStateErr(b *Blob, field string) error {
	switch b.State {
	case BlobDeleting:
		return ruleErr(CodeBlobDeleting, field, "blob %q is being deleted by the garbage collector and cannot be referenced", b.Key)
	case BlobGone:
		return ruleErr(CodeBlobGone, field, "blob %q was deleted by the garbage collector", b.Key)
	case BlobExpired:
		return ruleErr(CodeBlobExpired, field, "the upload intent of blob %q expired before it was committed", b.Key)
	}
	return ruleErr(CodeConflict, field, "blob %q is %s", b.Key, b.State)
}

// applyManifest writes a planned manifest change for the ack of task in
// epoch and returns the lineage it extended.
func applyManifest(t *txn, j *Job, gen, epoch uint64, task string, p *manifestPlan, now time.Time) (uint64, error) {
	for _, bc := range p.commit {
		if err := commitBlob(t, bc, now, p.strict); err != nil {
			return 0, err
		}
	}
	var target *Lineage
	var err error
	switch p.mode {
	case "continue":
		target = p.head
	case "rollback":
		target = p.head
		if err := rollback(t, target, p.at, now); err != nil {
			return 0, err
		}
		target.Generation = gen
	case "fork", "fresh":
		if target, err = newLineage(t, j.ID, task, gen); err != nil {
			return 0, err
		}
		if p.mode == "fork" {
			if err := copyManifest(t, p.source, p.at, target); err != nil {
				return 0, err
			}
		}
		if p.head != nil {
			if err := detach(t, p.head, now); err != nil {
				return 0, err
			}
		}
		if err := t.b(bucketHeads).Put(headKey(j.ID, task), u64(target.ID)); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("fsm: unknown manifest mode %q", p.mode)
	}
	c := p.change
	for _, b := range c.DropBases {
		if err := dropRecord(t, target, kindBase, b.ID(), epoch, now); err != nil {
			return 0, err
		}
	}
	for _, ref := range c.DropSegments {
		if err := dropRecord(t, target, kindSegment, ref, epoch, now); err != nil {
			return 0, err
		}
	}
	for _, b := range c.AddBases {
		if err := addRecord(t, target.ID, kindBase, b.ID(), &record{Length: b.Length, Added: epoch, CRC32C: b.CRC32C}, epoch); err != nil {
			return 0, err
		}
	}
	for _, s := range c.AddSegments {
		if err := addRecord(t, target.ID, kindSegment, s.ID(), &record{Length: s.Length, FirstSeq: s.FirstSeq, LastSeq: s.LastSeq, Added: epoch, CRC32C: s.CRC32C}, epoch); err != nil {
			return 0, err
		}
	}
	target.LastEpoch = epoch
	target.Epochs = append(target.Epochs, epoch)
	return target.ID, t.putLineage(target)
}

// commitBlob turns an intent into a live blob; strict (task-ack version 2)
// queues it for the leader's observation of the object store.
func commitBlob(t *txn, bc BlobCommit, now time.Time, strict bool) error {
	b, err := t.blob(bc.Key)
	if err != nil {
		return err
	}
	if b == nil {
		return &corruptError{fmt.Sprintf("blob %q passed the commit check but has no record", bc.Key)}
	}
	if b.State == BlobLive {
		return nil
	}
	if b.LeaseUntil == nil {
		return &corruptError{fmt.Sprintf("blob %q is an upload intent without a lease", bc.Key)}
	}
	if err := t.del(bucketBlobLeases, timeKey(*b.LeaseUntil, b.Key)); err != nil {
		return err
	}
	b.State = BlobLive
	b.Size = bc.Size
	b.Checksum = bc.Checksum
	b.LeaseUntil = nil
	if err := t.unreference(b, now); err != nil {
		return err
	}
	if strict {
		if err := t.markUnobserved(b.Key); err != nil {
			return err
		}
	}
	return t.putBlob(b)
}

func newLineage(t *txn, job, task string, gen uint64) (*Lineage, error) {
	meta := t.b(bucketMeta)
	var id uint64 = 1
	if raw := meta.Get(metaNextLineage); len(raw) == 8 {
		id = binary.BigEndian.Uint64(raw)
	}
	if err := meta.Put(metaNextLineage, u64(id+1)); err != nil {
		return nil, err
	}
	return &Lineage{ID: id, Job: job, Task: task, Generation: gen, Epochs: []uint64{}}, nil
}

func addRecord(t *txn, lid uint64, kind byte, ref manifests.Ref, r *record, epoch uint64) error {
	if err := t.putJSON(bucketRecords, recKey(lid, kind, ref), r); err != nil {
		return err
	}
	if epoch > 0 {
		if err := t.b(bucketRecChanges).Put(changeKey(lid, epoch, opAdd, kind, ref), nil); err != nil {
			return err
		}
	}
	if kind == kindSegment && r.Dropped == 0 {
		if err := t.b(bucketRecSeq).Put(seqKey(lid, r.LastSeq, ref), nil); err != nil {
			return err
		}
	}
	return t.addRef(ref.Key)
}

// dropRecord drops a present record at epoch; it dies at once unless a live
// epoch of the lineage still holds it.
func dropRecord(t *txn, l *Lineage, kind byte, ref manifests.Ref, epoch uint64, now time.Time) error {
	r, err := t.record(l.ID, kind, ref)
	if err != nil {
		return err
	}
	if r == nil || r.Dropped != 0 {
		return &corruptError{fmt.Sprintf("lineage %d drops %s, which is not present", l.ID, ref)}
	}
	if kind == kindSegment {
		if err := t.del(bucketRecSeq, seqKey(l.ID, r.LastSeq, ref)); err != nil {
			return err
		}
	}
	r.Dropped = epoch
	if !liveIn(l.Epochs, r) {
		return deleteRecord(t, l.ID, kind, ref, r, now)
	}
	if err := t.putJSON(bucketRecords, recKey(l.ID, kind, ref), r); err != nil {
		return err
	}
	return t.b(bucketRecChanges).Put(changeKey(l.ID, epoch, opDrop, kind, ref), nil)
}

// liveIn reports whether a live epoch lies in the record's [added, dropped).
func liveIn(epochs []uint64, r *record) bool {
	if r.Dropped == 0 {
		return true
	}
	i, _ := slices.BinarySearch(epochs, r.Added)
	return i < len(epochs) && epochs[i] < r.Dropped
}

func deleteRecord(t *txn, lid uint64, kind byte, ref manifests.Ref, r *record, now time.Time) error {
	if err := t.del(bucketRecords, recKey(lid, kind, ref)); err != nil {
		return err
	}
	if r.Added > 0 {
		if err := t.del(bucketRecChanges, changeKey(lid, r.Added, opAdd, kind, ref)); err != nil {
			return err
		}
	}
	if r.Dropped > 0 {
		if err := t.del(bucketRecChanges, changeKey(lid, r.Dropped, opDrop, kind, ref)); err != nil {
			return err
		}
	} else if kind == kindSegment {
		if err := t.del(bucketRecSeq, seqKey(lid, r.LastSeq, ref)); err != nil {
			return err
		}
	}
	return t.dropRef(ref.Key, now)
}

type change struct {
	epoch uint64
	op    byte
	kind  byte
	ref   manifests.Ref
}

// changesAfter lists the lineage's recorded changes in epochs in (from, to]
// (to 0: no upper bound).
func changesAfter(t *txn, lid, from, to uint64) ([]change, error) {
	var out []change
	c := t.b(bucketRecChanges).Cursor()
	prefix := u64(lid)
	for k, _ := c.Seek(append(u64(lid), u64(from+1)...)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) < 18 {
			return nil, &corruptError{"rec_changes key"}
		}
		e := binary.BigEndian.Uint64(k[8:16])
		if to != 0 && e > to {
			break
		}
		ref, ok := parseRefSuffix(k[18:])
		if !ok {
			return nil, &corruptError{"rec_changes key"}
		}
		out = append(out, change{epoch: e, op: k[16], kind: k[17], ref: ref})
	}
	return out, nil
}

// rollback undoes every change the lineage recorded after epoch at: records
// added later die, records dropped later are present again. Nothing live
// depends on those changes: at is the lineage's newest live epoch.
func rollback(t *txn, l *Lineage, at uint64, now time.Time) error {
	changes, err := changesAfter(t, l.ID, at, 0)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		r, err := t.record(l.ID, ch.kind, ch.ref)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		if r.Added > at {
			if err := deleteRecord(t, l.ID, ch.kind, ch.ref, r, now); err != nil {
				return err
			}
			continue
		}
		if ch.op == opDrop && r.Dropped > at {
			if err := t.del(bucketRecChanges, changeKey(l.ID, r.Dropped, opDrop, ch.kind, ch.ref)); err != nil {
				return err
			}
			r.Dropped = 0
			if err := t.putJSON(bucketRecords, recKey(l.ID, ch.kind, ch.ref), r); err != nil {
				return err
			}
			if ch.kind == kindSegment {
				if err := t.b(bucketRecSeq).Put(seqKey(l.ID, r.LastSeq, ch.ref), nil); err != nil {
					return err
				}
			}
		}
	}
	l.Epochs = slices.DeleteFunc(l.Epochs, func(e uint64) bool { return e > at })
	l.LastEpoch = at
	return nil
}

// copyManifest copies the manifest of src at epoch at into dst, as present
// records added before dst's first epoch.
func copyManifest(t *txn, src *Lineage, at uint64, dst *Lineage) error {
	type item struct {
		kind byte
		ref  manifests.Ref
		r    record
	}
	var items []item
	err := t.scan(bucketRecords, u64(src.ID), func(k, v []byte) (bool, error) {
		var r record
		if err := json.Unmarshal(v, &r); err != nil {
			return false, err
		}
		if !r.presentAt(at) {
			return true, nil
		}
		ref, ok := parseRecordKey(k)
		if !ok {
			return false, &corruptError{"record key"}
		}
		items = append(items, item{k[8], ref, record{Length: r.Length, FirstSeq: r.FirstSeq, LastSeq: r.LastSeq, CRC32C: r.CRC32C}})
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := addRecord(t, dst.ID, it.kind, it.ref, &it.r, 0); err != nil {
			return err
		}
	}
	return nil
}

// detach handles a lineage that is no longer its task's head: it keeps only
// what its live epochs hold, and goes away with the last of them.
func detach(t *txn, l *Lineage, now time.Time) error {
	if len(l.Epochs) == 0 {
		return deleteLineage(t, l, now)
	}
	if err := rollback(t, l, l.Epochs[len(l.Epochs)-1], now); err != nil {
		return err
	}
	return t.putLineage(l)
}

func deleteLineage(t *txn, l *Lineage, now time.Time) error {
	type item struct {
		kind byte
		ref  manifests.Ref
		r    record
	}
	var items []item
	err := t.scan(bucketRecords, u64(l.ID), func(k, v []byte) (bool, error) {
		var r record
		if err := json.Unmarshal(v, &r); err != nil {
			return false, err
		}
		ref, ok := parseRecordKey(k)
		if !ok {
			return false, &corruptError{"record key"}
		}
		items = append(items, item{k[8], ref, r})
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := deleteRecord(t, l.ID, it.kind, it.ref, &it.r, now); err != nil {
			return err
		}
	}
	if hid, err := t.head(l.Job, l.Task); err != nil {
		return err
	} else if hid == l.ID {
		if err := t.del(bucketHeads, headKey(l.Job, l.Task)); err != nil {
			return err
		}
	}
	return t.del(bucketLineages, u64(l.ID))
}

// epochLeft is called when an epoch of a job stops being live (aborted or
// subsumed): every lineage that acknowledged it drops it from its live
// epochs, and the records only it held die.
func epochLeft(t *txn, job string, epoch uint64, now time.Time) error {
	var lids []uint64
	err := t.scan(bucketAcks, jobNumKey(job, epoch), func(_, v []byte) (bool, error) {
		var a Ack
		if err := json.Unmarshal(v, &a); err != nil {
			return false, err
		}
		if a.Lineage != 0 {
			lids = append(lids, a.Lineage)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, lid := range lids {
		l, err := t.lineage(lid)
		if err != nil {
			return err
		}
		if l == nil {
			continue // deleted with an earlier epoch
		}
		i, found := slices.BinarySearch(l.Epochs, epoch)
		if !found {
			continue
		}
		var next uint64
		if i+1 < len(l.Epochs) {
			next = l.Epochs[i+1]
		}
		l.Epochs = slices.Delete(l.Epochs, i, i+1)
		// Only records dropped in (epoch, next] can have been held by this
		// epoch alone; each is checked against the remaining live epochs.
		changes, err := changesAfter(t, l.ID, epoch, next)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			if ch.op != opDrop {
				continue
			}
			r, err := t.record(l.ID, ch.kind, ch.ref)
			if err != nil {
				return err
			}
			if r == nil || r.Dropped != ch.epoch {
				return &corruptError{fmt.Sprintf("lineage %d: drop of %s at %d without its record", l.ID, ch.ref, ch.epoch)}
			}
			if !liveIn(l.Epochs, r) {
				if err := deleteRecord(t, l.ID, ch.kind, ch.ref, r, now); err != nil {
					return err
				}
			}
		}
		hid, err := t.head(l.Job, l.Task)
		if err != nil {
			return err
		}
		if len(l.Epochs) == 0 && hid != l.ID {
			if err := deleteLineage(t, l, now); err != nil {
				return err
			}
			continue
		}
		if err := t.putLineage(l); err != nil {
			return err
		}
	}
	return nil
}

// readManifest returns the manifest a task acknowledged in an epoch.
func readManifest(t *txn, lid, epoch uint64) (*manifests.Manifest, error) {
	return lineageView{t: t, lid: lid, at: epoch}.manifest()
}
