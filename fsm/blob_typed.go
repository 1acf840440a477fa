package fsm

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/metastore/metastore/internal/keytable"
)

// typedBlobs holds the blob records decoded, by key, in place of the
// blobs bucket: the first typed structure of the state layer planned in
// DESIGN.md ("The state layer's next step"). A transaction that has one
// (txn.blobsTyped) reads and writes the records through it without
// encoding them (storedBlob, writeBlob); the other readers of the bucket
// (scans, the state hash, dumps) see it as a bucket of encoded records
// in key order (typedBlobBucket). The state machine does not use it yet:
// ApplyInMemory does, so that TestCommandsOnMemory compares it bucket
// for bucket with the file and BenchmarkReplayAcks measures it.
//
// Its memory holds no pointer per blob for the collector to follow: the
// keys and fixed-size entries are in an internal/keytable, the job and
// task names interned (a few per job), the checksums and ETags in an
// arena of byte chunks that only grows (a record's checksum is written
// once, at its commit, and its ETag once, at its observation; what a
// deleted record held stays until the table is built again).
//
// get returns a record of its own; put stores what the record holds.
type typedBlobs struct {
	t *keytable.Table[blobEntry]
	// names interns the jobs' and tasks' names: names[i-1] is name i (0:
	// the empty name).
	names  []string
	nameID map[string]uint32
	// text holds the checksums and ETags.
	text [][]byte
}

// blobEntry is a blob record without pointers.
type blobEntry struct {
	job, task           uint32
	checksum, etag      textRef
	generation, size    uint64
	refs, modifyIndex   uint64
	obsSize             uint64
	created, obsAt      stamp
	lease, unreferenced stamp
	deleting, gone      stamp
	state               uint8
	flags               uint8
}

// The flags of a blobEntry.
const (
	blobAwaiting uint8 = 1 << iota
	blobFlagged
	blobObserved
	blobObsMissing
)

// textRef is where a string is in the arena; n 0 is the empty string.
type textRef struct{ chunk, off, n uint32 }

// stamp is a time in nanoseconds since 1970; zeroStamp stands for the
// zero time, which that does not reach. unset stands for a nil
// *time.Time.
type stamp int64

const (
	zeroStamp stamp = math.MinInt64
	unset     stamp = math.MinInt64 + 1
)

// textChunk is the size of the arena's chunks.
const textChunk = 64 << 10

// blobStates numbers the blob states for blobEntry.state.
var blobStates = []blobState{blobIntent, blobLive, blobExpired, blobDeleting, blobGone}

func newTypedBlobs() *typedBlobs {
	return &typedBlobs{t: keytable.New[blobEntry](), nameID: map[string]uint32{}}
}

func (tb *typedBlobs) name(id uint32) string {
	if id == 0 {
		return ""
	}
	return tb.names[id-1]
}

func (tb *typedBlobs) intern(s string) uint32 {
	if s == "" {
		return 0
	}
	if id, ok := tb.nameID[s]; ok {
		return id
	}
	tb.names = append(tb.names, s)
	id := uint32(len(tb.names))
	tb.nameID[s] = id
	return id
}

// str is the string r names, over the arena's bytes (they never change).
func (tb *typedBlobs) str(r textRef) string {
	if r.n == 0 {
		return ""
	}
	return unsafe.String(&tb.text[r.chunk][r.off], int(r.n))
}

// store returns a reference to s: old when it names s already, else s
// appended to the arena.
func (tb *typedBlobs) store(s string, old textRef) textRef {
	if s == "" {
		return textRef{}
	}
	if tb.str(old) == s {
		return old
	}
	if len(s) > textChunk {
		tb.text = append(tb.text, []byte(s))
		return textRef{chunk: uint32(len(tb.text) - 1), n: uint32(len(s))}
	}
	n := len(tb.text)
	if n == 0 || len(tb.text[n-1])+len(s) > cap(tb.text[n-1]) {
		tb.text = append(tb.text, make([]byte, 0, textChunk))
		n++
	}
	c := tb.text[n-1]
	r := textRef{chunk: uint32(n - 1), off: uint32(len(c)), n: uint32(len(s))}
	tb.text[n-1] = append(c, s...)
	return r
}

func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return zeroStamp
	}
	if y := t.Year(); y < 1678 || y > 2261 {
		// Nanoseconds since 1970 do not reach it. The times of the
		// records are the proposers' clocks and durations after them.
		panic(fmt.Sprintf("fsm: a blob record's time %s is out of range", t))
	}
	return stamp(t.UnixNano())
}

func stampOfPtr(t *time.Time) stamp {
	if t == nil {
		return unset
	}
	return stampOf(*t)
}

// time is the stamp as decodeRecord returns a time (UTC, as the
// records' generated decoder reads it).
func (s stamp) time() time.Time {
	if s == zeroStamp {
		return time.Time{}
	}
	return time.Unix(0, int64(s)).UTC()
}

func (s stamp) ptr() *time.Time {
	if s == unset {
		return nil
	}
	t := s.time()
	return &t
}

// record is the record e holds, for key.
func (tb *typedBlobs) record(key string, e blobEntry) *blobRecord {
	b := &blobRecord{
		Key: key, Job: tb.name(e.job), Task: tb.name(e.task), Generation: e.generation,
		State: blobStates[e.state], Size: e.size, Checksum: tb.str(e.checksum),
		AwaitingObservation: e.flags&blobAwaiting != 0, Flagged: e.flags&blobFlagged != 0,
		Refs: e.refs, LeaseUntil: e.lease.ptr(), CreatedAt: e.created.time(),
		UnreferencedAt: e.unreferenced.ptr(), DeletingAt: e.deleting.ptr(), GoneAt: e.gone.ptr(),
		ModifyIndex: e.modifyIndex,
	}
	if e.flags&blobObserved != 0 {
		b.Observed = &observation{Size: e.obsSize, ETag: tb.str(e.etag), Missing: e.flags&blobObsMissing != 0, At: e.obsAt.time()}
	}
	return b
}

// get returns key's record, with what it counts (as decodeBlob sets), nil
// when there is none.
func (tb *typedBlobs) get(key string) *blobRecord {
	e, ok := tb.t.Get(key)
	if !ok {
		return nil
	}
	b := tb.record(key, e)
	b.counted = blobUsage(b.State, b.Size)
	b.countedAwaiting = b.AwaitingObservation
	return b
}

// put stores what b holds under b.Key.
func (tb *typedBlobs) put(b *blobRecord) {
	state := slices.Index(blobStates, b.State)
	if state < 0 {
		panic(fmt.Sprintf("fsm: blob %q in unknown state %q", b.Key, b.State))
	}
	old, _ := tb.t.Get(b.Key)
	e := blobEntry{
		job: tb.intern(b.Job), task: tb.intern(b.Task), checksum: tb.store(b.Checksum, old.checksum),
		generation: b.Generation, size: b.Size, refs: b.Refs, modifyIndex: b.ModifyIndex,
		created: stampOf(b.CreatedAt), lease: stampOfPtr(b.LeaseUntil), unreferenced: stampOfPtr(b.UnreferencedAt),
		deleting: stampOfPtr(b.DeletingAt), gone: stampOfPtr(b.GoneAt),
		state: uint8(state),
	}
	if b.AwaitingObservation {
		e.flags |= blobAwaiting
	}
	if b.Flagged {
		e.flags |= blobFlagged
	}
	if o := b.Observed; o != nil {
		e.flags |= blobObserved
		if o.Missing {
			e.flags |= blobObsMissing
		}
		e.obsSize, e.obsAt, e.etag = o.Size, stampOf(o.At), tb.store(o.ETag, old.etag)
	}
	tb.t.Put(b.Key, e)
}

func (tb *typedBlobs) has(key string) bool { return tb.t.Has(key) }
func (tb *typedBlobs) del(key string) bool { return tb.t.Delete(key) }

// keys lists the keys in order.
func (tb *typedBlobs) keys() []string {
	out := make([]string, 0, tb.t.Len())
	tb.t.Each(func(k string, _ blobEntry) bool {
		out = append(out, k)
		return true
	})
	slices.Sort(out)
	return out
}

// typedBlobBucket shows a typedBlobs as the blobs bucket: records encoded
// as the file holds them (without their key), keys in order.
type typedBlobBucket struct{ tb *typedBlobs }

func (b typedBlobBucket) Get(key []byte) []byte {
	r := b.tb.get(string(key))
	if r == nil {
		return nil
	}
	return encodeBlobRecord(r)
}

// encodeBlobRecord is the stored form of r.
func encodeBlobRecord(r *blobRecord) []byte {
	raw, err := encodeRecord(r)
	if err != nil {
		// The records were written by the commands and encoded before.
		panic(fmt.Sprintf("fsm: encoding blob %q: %v", r.Key, err))
	}
	return raw
}

func (b typedBlobBucket) Put(key, value []byte) error {
	if err := checkPut(key, value); err != nil {
		return err
	}
	r, err := decodeBlob(key, value)
	if err != nil {
		return fmt.Errorf("fsm: decode %s/%q: %w", bucketBlobs, key, err)
	}
	b.tb.put(r)
	return nil
}

func (b typedBlobBucket) Delete(key []byte) error {
	b.tb.del(string(key))
	return nil
}

func (b typedBlobBucket) KeyN() int { return b.tb.t.Len() }

// Cursor walks the keys in order: it sorts them when made (a scan of
// the blobs is rare on the apply's path: a job's deletion).
func (b typedBlobBucket) Cursor() kvCursor {
	return &typedBlobCursor{tb: b.tb, keys: b.tb.keys(), i: -1}
}

// typedBlobCursor walks the keys the table held when it was made; a key
// deleted since is skipped.
type typedBlobCursor struct {
	tb   *typedBlobs
	keys []string
	i    int
}

func (c *typedBlobCursor) First() (key, value []byte) { c.i = -1; return c.Next() }

func (c *typedBlobCursor) Seek(key []byte) (k, v []byte) {
	c.i, _ = slices.BinarySearchFunc(c.keys, key, func(a string, b []byte) int { return bytes.Compare([]byte(a), b) })
	c.i--
	return c.Next()
}

func (c *typedBlobCursor) Next() (key, value []byte) {
	for c.i++; c.i < len(c.keys); c.i++ {
		if r := c.tb.get(c.keys[c.i]); r != nil {
			return []byte(c.keys[c.i]), encodeBlobRecord(r)
		}
	}
	return nil, nil
}

func (c *typedBlobCursor) Delete() error {
	if c.i >= 0 && c.i < len(c.keys) {
		c.tb.del(c.keys[c.i])
	}
	return nil
}
