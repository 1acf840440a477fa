package fsm

import "hash/maphash"

// The filter of blob keys. An ack commits blobs whose keys the leader has
// just issued, and the commit first checks that no record has the key
// (the reference counts' guard against a key committed twice): a search
// of the blobs bucket from its root for each blob, on every member, that
// finds nothing. The filter answers "no record" for nearly all of those
// keys without a search; for a key that has a record it always answers
// "maybe", as it does for about one other key in four thousand at a
// million blobs, and those are sought as before.
//
// It counts the bucket's keys by a 32-bit fingerprint of each (a seeded
// hash; fingerprints are not stored anywhere). A fingerprint counted zero
// times is that of no record. Unlike a Bloom filter it can take a key out
// (a count goes down), so it follows the bucket's churn without ever
// being built again from the file, and grows with the bucket as a map
// does: it reads the bucket's keys only when the file is opened or
// restored (rebuildCounts, which scans the blob records then anyway). A
// build that read every key during the load (the Bloom filter of earlier
// releases, each time it filled) left the pages of the whole bucket
// resident in the member's mapping of the file.
//
// It never answers "no" for a key that has a record, because for every
// record its fingerprint is counted at least once:
//
//   - it is built from the file when the file is opened or restored
//     (and when a test wrote the file around the commands: RawUpdate);
//   - a write of a blob record counts its key when the transaction holds
//     no record of it (txn.put; every write of the bucket goes through
//     put, del or deletePrefix, which TestCachedBucketsWrittenThroughHelpers
//     holds), before the record exists;
//   - a delete takes a count away only for a record it removed (from the
//     file, or a deferred put not yet in the file: deferredBuckets), and
//     only once the transaction that removed it committed (txn.blobsGone,
//     settled in commitLocked): a rolled-back delete leaves the record
//     and its count.
//
// A rolled-back transaction takes away the counts of the records it wrote
// (txn.blobsAdded), which are not in the file. So after every commit and
// every rollback each fingerprint is counted as many times as records
// have it (TestBlobFilterNeverHidesARecord compares the counts with the
// file's): two keys with one fingerprint are counted twice, and removing
// one leaves the other's.
//
// Only the state machine's write transaction uses it (txn.blobKeys); the
// caller holds f.txMu, or f.mu for writing (Open, Restore).

// blobFilter counts the blobs bucket's keys by fingerprint.
type blobFilter struct {
	seed   maphash.Seed
	counts map[uint32]uint32
	n      uint64 // the sum of counts
}

// blobFilterMask keeps the bits of a key's hash that make its
// fingerprint: all 32 (a false positive for about one absent key in
// 4,300 at a million blobs; about 19 bytes of map per key). Tests keep
// fewer, so that keys share fingerprints.
var blobFilterMask uint32 = 1<<32 - 1

func newBlobFilter() *blobFilter {
	return &blobFilter{seed: maphash.MakeSeed(), counts: map[uint32]uint32{}}
}

// buildBlobFilter counts the keys of t's blobs bucket in a new filter.
func buildBlobFilter(t *txn) (*blobFilter, error) {
	f := newBlobFilter()
	err := t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
		f.add(k)
		return true, nil
	})
	return f, err
}

// fingerprint is key's fingerprint in f.
func (f *blobFilter) fingerprint(key []byte) uint32 {
	return uint32(maphash.Bytes(f.seed, key)) & blobFilterMask
}

// mayHold reports whether the bucket may hold key: false only when it
// does not.
func (f *blobFilter) mayHold(key []byte) bool { return f.counts[f.fingerprint(key)] > 0 }

// add counts a key written to the bucket where no record had it, and
// returns its fingerprint.
func (f *blobFilter) add(key []byte) uint32 {
	fp := f.fingerprint(key)
	f.counts[fp]++
	f.n++
	return fp
}

// remove takes away one count of fingerprint fp: that of a record whose
// delete committed, or of a write rolled back.
func (f *blobFilter) remove(fp uint32) {
	switch c := f.counts[fp]; {
	case c > 1:
		f.counts[fp] = c - 1
	case c == 1:
		delete(f.counts, fp)
	default:
		return
	}
	f.n--
}

// keys is how many keys it counts: the bucket's, after a commit or a
// rollback.
func (f *blobFilter) keys() uint64 { return f.n }

// ended settles the counts of write transaction t, which committed or
// was rolled back: the records it deleted lose their counts once the
// deletes are in the file; the records it wrote, once they are not.
func (f *blobFilter) ended(t *txn, committed bool) {
	if t.blobKeys != f {
		return // counted in a filter since replaced
	}
	fps := t.blobsAdded
	if committed {
		fps = t.blobsGone
	}
	for _, fp := range fps {
		f.remove(fp)
	}
	t.blobsAdded, t.blobsGone = nil, nil
}
