package fsm

import "github.com/bits-and-blooms/bloom/v3"

// The filter of blob keys. An ack commits blobs whose keys the leader has
// just issued, and the commit first checks that no record has the key
// (the reference counts' guard against a key committed twice): a search
// of the blobs bucket from its root for each blob, on every member, that
// finds nothing. A Bloom filter of the bucket's keys answers "no record"
// for nearly all of those keys without a search; for a key that has a
// record it always answers "maybe", as it does for about one other key in
// a hundred, and those are sought as before.
//
// It never answers "no" for a key that has a record: it is built from the
// file when the file is opened or restored, and every write of a blob
// record adds its key first (txn.put; every write of the bucket goes
// through put, which TestCachedBucketsWrittenThroughHelpers holds). A
// transaction that is rolled back leaves its keys in, which only costs
// searches. Keys of deleted records stay in too (a Bloom filter cannot
// remove one): the filter is built again from the file, at the start of
// a write transaction, once the keys added since it was built fill the
// room it was sized for.
//
// Only the state machine's write transaction uses it (txn.blobKeys); the
// caller holds f.txMu, or f.mu for writing (Open, Restore).

// blobFilter is a Bloom filter of the blobs bucket's keys.
type blobFilter struct {
	bf *bloom.BloomFilter
	// room is how many more keys it takes before it is built again.
	room uint
}

// blobFilterFP is the share of absent keys the filter sends to the file
// (a false positive costs the search it would have saved).
const blobFilterFP = 0.01

// blobFilterMin is the fewest keys a filter is sized for: 78 KiB. Tests
// make it small, so that filters fill and are built again.
var blobFilterMin uint = 1 << 16

// newBlobFilter sizes a filter for live keys and as many more added
// before it is built again (at most blobFilterMin more when there are
// fewer): 1.2 bytes per key, 2.3 MiB for a million blobs.
func newBlobFilter(live uint) *blobFilter {
	n := max(2*live, blobFilterMin)
	return &blobFilter{bf: bloom.NewWithEstimates(n, blobFilterFP), room: n - live}
}

// buildBlobFilter reads the keys of t's blobs bucket into a new filter:
// one pass to count them, one to add them (at a million blobs, a fraction
// of a second).
func buildBlobFilter(t *txn) (*blobFilter, error) {
	var n uint
	err := t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
		n++
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	f := newBlobFilter(n)
	err = t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
		f.bf.Add(k)
		return true, nil
	})
	return f, err
}

// mayHold reports whether the bucket may hold key: false only when it
// does not.
func (f *blobFilter) mayHold(key []byte) bool { return f.bf.Test(key) }

// add notes a key written to the bucket. A key it holds already (a
// record written again: its observation, a reference added or dropped)
// takes no room.
func (f *blobFilter) add(key []byte) {
	if !f.bf.TestAndAdd(key) && f.room > 0 {
		f.room--
	}
}

// full reports whether the filter took the keys it was sized for and is
// to be built again.
func (f *blobFilter) full() bool { return f.room == 0 }
