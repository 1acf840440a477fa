package fsm_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

var testSlotKey = bytes.Repeat([]byte{7}, fsm.SlotKeyLen)

// newSlotHarness is newBatchHarness with the slot key set.
func newSlotHarness(t *testing.T) *harness {
	h := newBatchHarness(t)
	if set := mustOK(t, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey})); set != true {
		t.Fatalf("slot-key-init answered %v, want true", set)
	}
	return h
}

// signed makes count signed slots of job u's task t for attempt gen with
// a lease of an hour.
func (h *harness) signed(gen uint64, count int) []string {
	return fsm.NewSlotSigner(testSlotKey).Keys("u", "t", gen, h.now.Add(time.Hour), 1, count)
}

// recorded reports whether key has a record (what the orphan sweep reads).
func recorded(h *harness, key string) bool {
	h.t.Helper()
	known, err := h.f.Known([]string{key})
	if err != nil {
		h.t.Fatal(err)
	}
	return known[key]
}

// TestSignedSlotCommit: a signed slot needs no entry: an ack commits it
// as it commits a recorded intent, a second ack of it changes nothing,
// and the committed blob counts in the usage and passes fsck.
func TestSignedSlotCommit(t *testing.T) {
	h := newSlotHarness(t)
	before := h.hash()
	keys := h.signed(1, 3)
	if h.hash() != before {
		t.Fatal("making signed slots changed the state")
	}
	name := keys[0][strings.LastIndexByte(keys[0], '/')+1:]
	if len(name) != fsm.SignedNameLen || !strings.HasPrefix(keys[0], "u/t/") {
		t.Fatalf("key %q: want u/t/ and a %d-digit name", keys[0], fsm.SignedNameLen)
	}
	if lease, _, ok := fsm.SignedSlotOf(keys[0]); !ok || !lease.Equal(h.now.Add(time.Hour)) {
		t.Fatalf("SignedSlotOf(%s) = %v %v, want %v", keys[0], lease, ok, h.now.Add(time.Hour))
	}
	if len(slices.Compact(slices.Clone(keys))) != 3 {
		t.Fatalf("keys repeat: %v", keys)
	}
	if err := manifests.ValidateKey(keys[0]); err != nil {
		t.Fatal(err)
	}
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[0], keys[1]))
	for _, k := range keys[:2] {
		if s := blobState(h, k); s != wire.BlobLive {
			t.Fatalf("%s is %q after its ack, want live", k, s)
		}
	}
	if recorded(h, keys[2]) {
		t.Fatalf("%s, never committed, has a record", keys[2])
	}
	if s := blobState(h, keys[2]); s != wire.BlobIntent {
		t.Fatalf("%s, never committed, reads as %q, want an intent", keys[2], s)
	}
	mustOK(t, batchAck(h, 1, 1, 1, keys[0], keys[1]))
	if u := h.f.JobUsage("u"); u.Intents != 0 || u.LiveBlobs != 2 {
		t.Fatalf("usage %+v, want no intent and 2 live blobs", u)
	}
	checkUsage(t, h.f, "after the ack", "u")
	h.fsck()
}

// TestSignedSlotForged: a key of the signed shape is committable only with
// the MAC of this cluster's key over its job, task, lease, attempt and
// index; before any slot key is set none is.
func TestSignedSlotForged(t *testing.T) {
	h := newBatchHarness(t)
	h.begin("u", 1, 1)
	keys := h.signed(1, 2)
	mustRule(t, batchAck(h, 1, 1, 1, keys[0]), wire.ErrBlobUnknown) // no slot key yet
	mustOK(t, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey}))
	// A second key never replaces the first.
	if set := mustOK(t, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: bytes.Repeat([]byte{8}, fsm.SlotKeyLen)})); set != false {
		t.Fatalf("a second slot-key-init answered %v, want false", set)
	}
	other := fsm.NewSlotSigner(bytes.Repeat([]byte{8}, fsm.SlotKeyLen)).Keys("u", "t", 1, h.now.Add(time.Hour), 1, 1)[0]
	mustRule(t, batchAck(h, 1, 1, 1, other), wire.ErrBlobUnknown)

	k := keys[0]
	dir, name := k[:strings.LastIndexByte(k, '/')+1], k[strings.LastIndexByte(k, '/')+1:]
	flip := func(i int) string {
		b := []byte(name)
		if b[i] == '0' {
			b[i] = '1'
		} else {
			b[i] = '0'
		}
		return dir + string(b)
	}
	for _, tc := range []struct {
		what, key string
	}{
		{"a longer lease", flip(15)},
		{"another attempt", flip(31)},
		{"another nonce", flip(35)},
		{"another index", flip(39)},
		{"another MAC", flip(55)},
		{"another task", strings.Replace(k, "/t/", "/s/", 1)},
	} {
		mustRule(t, batchAck(h, 1, 1, 1, tc.key), wire.ErrBlobUnknown)
		if s := blobState(h, tc.key); s != "" || recorded(h, tc.key) {
			t.Errorf("%s: %s reads as %q", tc.what, tc.key, s)
		}
	}
	mustOK(t, batchAck(h, 1, 1, 1, keys[1]))
	h.reject(wire.ErrInvalid, fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: []byte("short")})
}

// TestSignedSlotShape: only a key of the signed shape reads as a signed
// slot (SignedSlotOf, which the orphan sweep and the quota read, and the
// ack's commit check): a task directory, a name of 56 lowercase hex
// digits, and a lease a time can hold (at most 2^63-1 ns).
func TestSignedSlotShape(t *testing.T) {
	lease := t0.Add(time.Hour)
	k := fsm.NewSlotSigner(testSlotKey).Keys("u", "t", 1, lease, 1, 1)[0]
	if got, i, ok := fsm.SignedSlotOf(k); !ok || !got.Equal(lease) || i != 0 {
		t.Fatalf("SignedSlotOf(%s) = %v %d %v, want %v 0 true", k, got, i, ok, lease)
	}
	name := k[strings.LastIndexByte(k, '/')+1:]
	for _, tc := range []struct{ what, key string }{
		{"no task directory", "u/" + name},
		{"upper-case hex", "u/t/" + strings.ToUpper(name)},
		{"a digit that is not hex", "u/t/" + name[:55] + "g"},
		{"a short name", "u/t/" + name[:55]},
		{"a lease above 2^63-1 ns", "u/t/8" + name[1:]},
	} {
		if got, _, ok := fsm.SignedSlotOf(tc.key); ok {
			t.Errorf("%s: SignedSlotOf(%s) reads a signed slot with lease %v", tc.what, tc.key, got)
		}
	}
}

// TestSignedSlotLeaseAndFence: a signed slot's lease and attempt hold as
// a recorded intent's: an ack after the lease is refused (expired), and
// one of another attempt is fenced; another job cannot commit it.
func TestSignedSlotLeaseAndFence(t *testing.T) {
	h := newSlotHarness(t)
	keys := h.signed(1, 2)
	h.begin("u", 1, 1)
	h.advance(time.Hour + time.Second)
	mustRule(t, batchAck(h, 1, 1, 1, keys[0]), wire.ErrBlobExpired)

	keys = h.signed(1, 1)
	h.start("u", "a2", task(t, "t", "state", "incremental"))
	h.begin("u", 2, 2)
	mustRule(t, batchAck(h, 2, 2, 1, keys[0]), wire.ErrFenced)

	h.putJob("v", wire.JobConfig{Retained: 1})
	h.start("v", "b1", task(t, "t", "state", "incremental"))
	h.begin("v", 1, 1)
	stolen := fsm.NewSlotSigner(testSlotKey).Keys("u", "t", 1, h.now.Add(time.Hour), 2, 1)[0]
	ack := fsm.TaskAck{Job: "v", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: stolen, Size: 100}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: stolen, Length: 100, FirstSeq: 1, LastSeq: 1}}}}}
	mustRule(t, h.mustApply(fsm.CmdTaskAck, ack), wire.ErrNotFound)
	if recorded(h, stolen) {
		t.Fatalf("%s has a record after another job's ack", stolen)
	}
}

// TestSignedSlotCutoff: once a cut-off at or after a slot's lease is
// applied, an ack of the slot is refused even from a proposer whose clock
// says the lease still runs; the state machine keeps the highest
// cut-off; a slot whose lease is after it still commits.
func TestSignedSlotCutoff(t *testing.T) {
	h := newSlotHarness(t)
	early := h.signed(1, 1)[0]
	h.advance(time.Minute)
	late := h.signed(1, 1)[0]
	lease, _, _ := fsm.SignedSlotOf(early)

	got := mustOK(t, h.mustApply(fsm.CmdSlotCutoff, fsm.SlotCutoff{Until: lease})).(time.Time)
	if !got.Equal(lease) {
		t.Fatalf("cut-off answered %v, want %v", got, lease)
	}
	got = mustOK(t, h.mustApply(fsm.CmdSlotCutoff, fsm.SlotCutoff{Until: lease.Add(-time.Hour)})).(time.Time)
	if !got.Equal(lease) {
		t.Fatalf("an earlier cut-off moved it back to %v", got)
	}
	if c, err := h.f.SlotCutoff(); err != nil || !c.Equal(lease) {
		t.Fatalf("SlotCutoff() = %v %v, want %v", c, err, lease)
	}
	h.begin("u", 1, 1)
	mustRule(t, batchAck(h, 1, 1, 1, early), wire.ErrBlobExpired) // the clock is an hour before its lease
	if recorded(h, early) {
		t.Fatalf("%s has a record after a refused ack", early)
	}
	if s := blobState(h, early); s != wire.BlobExpired {
		t.Fatalf("%s behind the cut-off reads as %q, want expired", early, s)
	}
	mustOK(t, batchAck(h, 1, 1, 1, late))
	h.reject(wire.ErrInvalid, fsm.CmdSlotCutoff, fsm.SlotCutoff{})
}

// TestSignedSlotTombstoneKept: the tombstone of a committed signed slot
// whose blob was collected is not purged while its lease is after the
// cut-off (it is what refuses a second commit of the deleted object);
// once the cut-off passed the lease it is purged, and the key stays
// refused.
func TestSignedSlotTombstoneKept(t *testing.T) {
	h := newSlotHarness(t)
	keys := h.signed(1, 2)
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[0]))
	h.begin("u", 1, 2)
	drop := fsm.TaskAck{Job: "u", Generation: 1, Epoch: 2, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: keys[1], Size: 100}},
		Delta: &manifests.Delta{
			DropSegments: []manifests.Ref{{Key: keys[0], Offset: 0}},
			AddSegments:  []manifests.Segment{{Key: keys[1], Offset: 0, Length: 100, FirstSeq: 2, LastSeq: 2}},
		}}}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, drop))
	marked := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{keys[0]}})).([]string)
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked}))
	h.advance(30 * time.Minute) // the lease (an hour) still runs
	if gone, err := h.f.GoneBefore(h.now, 10); err != nil || len(gone) != 0 {
		t.Fatalf("GoneBefore = %v %v: a signed slot's tombstone offered for purging before the cut-off passed its lease", gone, err)
	}
	if purged := mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: marked})).([]string); len(purged) != 0 {
		t.Fatalf("purged %v before the cut-off passed the lease", purged)
	}
	h.begin("u", 1, 3)
	mustRule(t, batchAck(h, 1, 3, 3, keys[0]), wire.ErrBlobGone)

	lease, _, _ := fsm.SignedSlotOf(keys[0])
	mustOK(t, h.mustApply(fsm.CmdSlotCutoff, fsm.SlotCutoff{Until: lease}))
	if gone, err := h.f.GoneBefore(h.now, 10); err != nil || !slices.Equal(gone, marked) {
		t.Fatalf("GoneBefore = %v %v after the cut-off, want %v", gone, err, marked)
	}
	if purged := mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: marked})).([]string); !slices.Equal(purged, marked) {
		t.Fatalf("purged %v, want %v", purged, marked)
	}
	mustRule(t, batchAck(h, 1, 3, 3, keys[0]), wire.ErrBlobExpired)
	h.fsck()
}
