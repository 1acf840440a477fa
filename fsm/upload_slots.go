package fsm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/wire"
)

// Signed upload slots: upload keys handed out without a Raft entry.
//
// An upload-slot request needs no agreement of the members: its keys are
// new names under the job's task, and what makes one of them committable
// is that this cluster issued it, for this job, task and attempt, with a
// lease. A signed key carries all of that in its name and a MAC made with
// the cluster's slot key (replicated, slot-key-init):
//
//	<job>/<task or _>/<lease: 16 hex, ns><generation: 16 hex><nonce: 4 hex><index: 4 hex><mac: 16 hex>
//
// 56 hex digits, the lease's time first, so the keys of one window sort
// and list together (blobstore.TimeWindow). The MAC is the first 8 bytes
// of HMAC-SHA256 over the job, the task and the name's first 40 digits.
// The leader answers an upload-slot request by making the keys and
// presigning their URLs; nothing is proposed, so the call costs no Raft
// round and no record in any member's state.
//
// A signed key without a blob record reads, in an ack's commit check
// (planManifest), as an intent of its job, task and generation with the
// lease of its name (signedIntent): every rule that holds for an intent
// holds for it (the lease, the attempt's fence, the job). The ack writes
// the blob's record, as for any intent. A key whose MAC does not verify is
// unknown.
//
// What a key no ack commits becomes. Nothing records it, so nothing has
// to expire; if its object was uploaded, it is an orphan, and the
// collector's orphan sweep deletes it. The sweep first proposes a cut-off
// (slot-cutoff, its clock minus the orphan grace; the state machine keeps
// the highest): from that entry on, an ack of a signed key whose lease
// ended at or before the cut-off is refused (blob_expired) even if its
// clock says otherwise, and the sweep deletes only unknown objects of
// signed names whose lease ended at or before the cut-off. So an object
// the sweep deletes can never be committed, whatever the members' clocks:
// an ack applied before the cut-off made the key known, and the sweep
// reads the keys' records after the cut-off is applied. For the same
// reason a signed key's tombstone is purged only once its lease is behind
// the cut-off (applyBlobsPurge): until then the tombstone refuses a
// second ack of the key.

// SlotKeyLen is the length of the key that signs upload slots.
const SlotKeyLen = 32

// SignedNameLen is the length of a signed key's name (its last path
// element): 56 lowercase hex digits.
const SignedNameLen = 56

const (
	signedMACAt = 40 // the MAC's first digit in the name
	slotMACSize = 8  // bytes of the MAC kept in the name
)

var (
	metaSlotKey    = []byte("slot_key")
	metaSlotCutoff = []byte("slot_cutoff")
)

// SlotKeyInit sets the key that signs upload slots, unless one is set: the
// first proposal wins and later ones change nothing. Its entry is also
// what makes a cluster hand out signed slots: a member of a release
// without signed slots stops at it (an unknown command), so no member
// that could not check a signed key ever applies an ack of one.
type SlotKeyInit struct {
	Key []byte `json:"key"`
}

func (p *SlotKeyInit) Validate() error {
	if len(p.Key) != SlotKeyLen {
		return ruleErr(wire.CodeInvalid, "key", "the slot key is %d bytes, not %d", len(p.Key), SlotKeyLen)
	}
	return nil
}

func applySlotKeyInit(t *txn, c Command, p *SlotKeyInit) (any, error) {
	meta := t.b(bucketMeta)
	if meta.Get(metaSlotKey) != nil {
		return false, nil
	}
	return true, meta.Put(metaSlotKey, p.Key)
}

// SlotCutoff ends every signed slot whose lease ended at or before Until
// (the orphan sweep proposes it before it deletes). The state machine
// keeps the highest cut-off it applied; it answers that one.
type SlotCutoff struct {
	Until time.Time `json:"until"`
}

func (p *SlotCutoff) Validate() error {
	if p.Until.IsZero() {
		return ruleErr(wire.CodeInvalid, "until", "a slot cut-off needs a time")
	}
	return nil
}

func applySlotCutoff(t *txn, c Command, p *SlotCutoff) (any, error) {
	cur := t.slotCutoff()
	if p.Until.After(cur) {
		cur = p.Until.UTC()
		if err := t.b(bucketMeta).Put(metaSlotCutoff, u64(uint64(cur.UnixNano()))); err != nil {
			return nil, err
		}
		t.cutoff = &cur
	}
	return cur, nil
}

// slotCutoff is the highest cut-off applied (zero: none). The transaction
// keeps it once read: an ack checks it for each signed slot it commits.
func (t *txn) slotCutoff() time.Time {
	if t.cutoff != nil {
		return *t.cutoff
	}
	var cur time.Time
	if raw := t.b(bucketMeta).Get(metaSlotCutoff); len(raw) == 8 {
		cur = time.Unix(0, int64(binary.BigEndian.Uint64(raw))).UTC()
	}
	t.cutoff = &cur
	return cur
}

// SlotKey returns the key that signs upload slots; nil until one is set.
func (f *FSM) SlotKey() ([]byte, error) {
	var out []byte
	_, err := f.viewLatest(func(t *txn) error {
		if v := t.b(bucketMeta).Get(metaSlotKey); v != nil {
			out = append([]byte(nil), v...)
		}
		return nil
	})
	return out, err
}

// SlotCutoff returns the highest slot cut-off applied (zero: none).
func (f *FSM) SlotCutoff() (time.Time, error) {
	var out time.Time
	_, err := f.view(func(t *txn) error {
		out = t.slotCutoff()
		return nil
	})
	return out, err
}

// CheckUploadSlots checks, on the state applied so far, what the ack of
// a signed slot of job's attempt gen will check again: the job exists
// and gen is its attempt.
// It returns the index of that state.
//
// It reads every applied entry without committing the open transaction
// (viewLatest: two reads of a key, holding the apply back for that long),
// as SlotKey does, so a slot call is not a commit of the leader's state
// file (with one, slot calls were a quarter of the leader's commits at 64
// acking workers).
func (f *FSM) CheckUploadSlots(job string, gen uint64) (uint64, error) {
	return f.viewLatest(func(t *txn) error {
		j, err := writableJob(t, job)
		if err != nil {
			return err
		}
		return checkGeneration(j, gen)
	})
}

// SlotSigner makes the signed keys of upload slots. It is not safe for
// concurrent use.
type SlotSigner struct {
	mac hash.Hash
	buf []byte
}

// NewSlotSigner returns a signer with the cluster's slot key.
func NewSlotSigner(key []byte) *SlotSigner {
	return &SlotSigner{mac: hmac.New(sha256.New, key)}
}

// Keys returns count signed keys of job's task for attempt gen, with the
// lease leaseUntil; nonce tells apart requests with the same lease.
func (s *SlotSigner) Keys(job, task string, gen uint64, leaseUntil time.Time, nonce uint16, count int) []string {
	dir := task
	if dir == "" {
		dir = "_"
	}
	var head [20]byte
	binary.BigEndian.PutUint64(head[0:8], uint64(leaseUntil.UnixNano()))
	binary.BigEndian.PutUint64(head[8:16], gen)
	binary.BigEndian.PutUint16(head[16:18], nonce)
	keys := make([]string, count)
	var name [SignedNameLen]byte
	for i := range keys {
		binary.BigEndian.PutUint16(head[18:20], uint16(i))
		hex.Encode(name[:signedMACAt], head[:])
		hex.Encode(name[signedMACAt:], s.sum(job, task, name[:signedMACAt]))
		keys[i] = job + "/" + dir + "/" + string(name[:])
	}
	return keys
}

// sum is the MAC of a signed key's fields (the name's first 40 digits).
func (s *SlotSigner) sum(job, task string, fields []byte) []byte {
	s.mac.Reset()
	s.buf = append(s.buf[:0], job...)
	s.buf = append(s.buf, 0)
	s.buf = append(s.buf, task...)
	s.buf = append(s.buf, 0)
	s.buf = append(s.buf, fields...)
	s.mac.Write(s.buf)
	// The MAC is appended after the input: with room for it (and for the
	// inner hash HMAC appends first) the sum allocates nothing.
	s.buf = slices.Grow(s.buf, 2*sha256.Size)
	return s.mac.Sum(s.buf[len(s.buf):])[:slotMACSize]
}

// signedSlot is what a signed key's name says.
type signedSlot struct {
	job, task  string
	leaseUntil time.Time
	generation uint64
	fields     string // the name's first 40 digits, which the MAC covers
	mac        string
}

// parseSignedKey reads a key of the signed shape; ok is false for any
// other key. It does not check the MAC.
func parseSignedKey(key string) (signedSlot, bool) {
	slash := strings.LastIndexByte(key, '/')
	if slash < 0 {
		return signedSlot{}, false
	}
	name := key[slash+1:]
	first := strings.IndexByte(key, '/')
	if len(name) != SignedNameLen || !isLowerHex(name) || first == slash {
		return signedSlot{}, false
	}
	task := key[first+1 : slash]
	if task == "_" {
		task = ""
	}
	lease, err1 := strconv.ParseUint(name[0:16], 16, 64)
	gen, err2 := strconv.ParseUint(name[16:32], 16, 64)
	if err1 != nil || err2 != nil || lease > 1<<63-1 {
		return signedSlot{}, false
	}
	return signedSlot{
		job: key[:first], task: task, leaseUntil: time.Unix(0, int64(lease)).UTC(), generation: gen,
		fields: name[:signedMACAt], mac: name[signedMACAt:],
	}, true
}

// SignedSlotOf returns the lease (the time its name starts with) and the
// index of a key of the signed shape, false for any other key. The orphan
// sweep deletes an unknown object of such a name only when the lease is
// behind its cut-off; the API's quota tallies open slots by both.
func SignedSlotOf(key string) (lease time.Time, index int, ok bool) {
	s, ok := parseSignedKey(key)
	if !ok {
		return time.Time{}, 0, false
	}
	i, _ := strconv.ParseUint(s.fields[36:40], 16, 16)
	return s.leaseUntil, int(i), true
}

// signedIntent is the intent record of key when it is a signed slot of
// this cluster without a record, nil otherwise: an ack's commit check
// reads it as any intent. A slot whose lease the cut-off ended reads as
// an expired upload. The record is kept in the command's blob cache, so
// the commit finds it.
func (t *txn) signedIntent(key string) (*blobRecord, error) {
	s, ok := parseSignedKey(key)
	if !ok {
		return nil, nil
	}
	if t.slots == nil {
		slotKey := t.b(bucketMeta).Get(metaSlotKey)
		if slotKey == nil {
			return nil, nil
		}
		t.slots = NewSlotSigner(slotKey)
	}
	want := hex.EncodeToString(t.slots.sum(s.job, s.task, []byte(s.fields)))
	if !hmac.Equal([]byte(want), []byte(s.mac)) {
		return nil, nil
	}
	lease := s.leaseUntil
	b := &blobRecord{Key: key, Job: s.job, Task: s.task, Generation: s.generation, State: blobIntent,
		LeaseUntil: &lease, signed: true}
	if !lease.After(t.slotCutoff()) {
		b.State = blobExpired
	}
	if t.blobs != nil {
		t.blobs[key] = &cachedBlob{b: b}
		cp := *b
		return &cp, nil
	}
	return b, nil
}

// purgeable reports whether a tombstone of key may be forgotten: any key
// but a signed slot's, and that one once its lease is behind the cut-off
// (a later ack of it is refused without the tombstone).
func (t *txn) purgeable(key string) bool {
	s, ok := parseSignedKey(key)
	return !ok || !s.leaseUntil.After(t.slotCutoff())
}
