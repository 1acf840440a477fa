package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout version of the state machine's bbolt file
// and of its snapshots. A build refuses data written with a newer version.
//
//   - 1: every record JSON.
//   - 2: the records of records.go MessagePack (encoding.go); a file of
//     version 1 is rewritten when it is opened.
//   - 3: upload batches (upload_batches.go) may hold intents, which a
//     release before them would not see; a file of version 2 is marked 3
//     when it is opened (it holds none yet).
//   - 4: attempts, tasks and acks MessagePack too; their JSON records in
//     a file of an earlier version are rewritten when it is opened.
//   - 5: no rec_seq index (present segments by last sequence number): a
//     materialization finds the segments it truncates among the
//     lineage's present ones. The bucket of a file of an earlier version
//     is deleted when it is opened.
//   - 6: no blob_unobserved index: a blob awaiting the leader's
//     observation says so in its record (AwaitingObservation), and the
//     state machine keeps their keys in memory (unobserved.go). The
//     entries of a file of an earlier version are moved into the records
//     when it is opened, and the bucket deleted.
//   - 7: a blob's record does not repeat its key, the bucket's key (a
//     quarter of the record: 68 of 220 bytes at a million blobs in the
//     benchmark). The blob records of a file of an earlier version are
//     rewritten when it is opened.
const SchemaVersion = keylessBlobsVersion

// keylessBlobsVersion is the schema version from which a blob's record
// leaves its key out.
const keylessBlobsVersion = 7

// awaitingInRecordVersion is the schema version from which blob_unobserved
// is gone.
const awaitingInRecordVersion = 6

// noRecSeqVersion is the schema version from which rec_seq is gone.
const noRecSeqVersion = 5

// binaryAcksVersion is the schema version from which the attempts', tasks'
// and acks' records are MessagePack.
const binaryAcksVersion = 4

// uploadBatchesVersion is the schema version from which upload_batches
// may hold intents.
const uploadBatchesVersion = 3

// binaryRecordsVersion is the schema version from which the records of
// records.go are MessagePack.
const binaryRecordsVersion = 2

// bucket is a bbolt bucket of the state machine. Every bucket is declared
// here once; nothing else names buckets.
type bucket []byte

// Jobs, attempts, epochs and acks.
var (
	// meta: applied index, schema version, next lineage id.
	bucketMeta = bucket("meta")
	// members: member id -> Member.
	bucketMembers = bucket("members")
	// jobs: job -> Job.
	bucketJobs = bucket("jobs")
	// attempts: job \0 generation(8) -> Attempt.
	bucketAttempts = bucket("attempts")
	// attemptIDs: job \0 attempt id -> generation(8).
	bucketAttemptIDs = bucket("attempt_ids")
	// tasks: job \0 generation(8) task -> Task.
	bucketTasks = bucket("tasks")
	// epochs: job \0 epoch(8) -> Epoch.
	bucketEpochs = bucket("epochs")
	// acks: job \0 epoch(8) task -> Ack.
	bucketAcks = bucket("acks")
	// payloads: job \0 epoch(8) task \0 kind -> inline payload bytes.
	bucketPayloads = bucket("payloads")
	// deadlines: deadline(8, unix nanos) job \0 epoch(8) -> empty. An index
	// of pending epochs by ack deadline, for the leader's timeout scan.
	bucketDeadlines = bucket("deadlines")
)

// Access tokens and the object-URL signing key (auth.go).
var (
	// auth: "token\0" accessor -> Token; "hash\0" hash -> accessor;
	// "url_key" -> the object-URL signing key.
	bucketAuth = bucket("auth")
)

// The object-store side of the model (blobs.go, observe.go).
var (
	// blobs: blob key -> Blob.
	bucketBlobs = bucket("blobs")
	// blobLeases: lease end(8) key -> empty: intents by lease end.
	bucketBlobLeases = bucket("blob_leases")
	// gcCandidates: unreferenced since(8) key -> empty: blobs the collector
	// may delete once the grace period has passed.
	bucketGCCandidates = bucket("gc_candidates")
	// gcDeleting: key -> empty: blobs marked deleting, whose object-store
	// delete has not been confirmed.
	bucketGCDeleting = bucket("gc_deleting")
	// gcGone: gone at(8) key -> empty: tombstones, purged after a while.
	bucketGCGone = bucket("gc_gone")
	// uploadBatches: batch id -> uploadBatch: the intents of one
	// upload-slot request, one record for all its keys
	// (upload_batches.go). Its lease entry in blob_leases is under the
	// batch's first key.
	bucketUploadBatches = bucket("upload_batches")
)

// Manifests stored structurally as lineages of records (lineage.go).
var (
	// lineages: id(8) -> Lineage.
	bucketLineages = bucket("lineages")
	// heads: job \0 task -> lineage id(8): the lineage a task's next ack
	// extends.
	bucketHeads = bucket("heads")
	// records: id(8) kind(1) key \0 offset(8) -> record.
	bucketRecords = bucket("records")
	// recChanges: id(8) epoch(8) op(1) kind(1) key \0 offset(8) -> empty:
	// records by the epoch that added ('a') or dropped ('d') them.
	bucketRecChanges = bucket("rec_changes")
)

// Buckets of earlier schema versions, deleted when a file of such a
// version is opened (migrateRecords); nothing else names them.
var (
	// recSeq (before version 5): id(8) last seq(8) key \0 offset(8) ->
	// empty: present segments by last sequence number. It cost an ack a
	// write per segment it added and one per segment it dropped; a
	// materialization truncates most of the present segments, so it reads
	// about as many records without it.
	bucketRecSeq = bucket("rec_seq")
	// blobUnobserved (before version 6): key -> {1}: live blobs committed
	// by an ack whose object the leader had not looked at yet. It cost
	// every member a write per blob an ack committed and a delete per
	// blob observed, beside the blob's own record, which says as much now
	// (AwaitingObservation).
	bucketBlobUnobserved = bucket("blob_unobserved")
)

// Deleted jobs (jobdelete.go).
var (
	// jobTombstones: job -> JobTombstone: what remains of a deleted job,
	// so its zombie writers are answered job_deleted and a job created
	// again under the name starts above its generations.
	bucketJobTombstones = bucket("job_tombstones")
)

// allBuckets is every bucket, in the order the state hash digests them
// (stateHash). Members compare the hash, so the order is part of the
// format: a new bucket goes at the end, and none moves. Buckets from
// job_tombstones on are digested only when they hold a record
// (optionalFrom), so a state that has none of their records hashes as it
// did before they existed.
var allBuckets = []bucket{
	bucketMeta,
	bucketMembers,
	bucketJobs,
	bucketAttempts,
	bucketAttemptIDs,
	bucketTasks,
	bucketEpochs,
	bucketAcks,
	bucketPayloads,
	bucketDeadlines,
	bucketAuth,
	bucketBlobs,
	bucketBlobLeases,
	bucketGCCandidates,
	bucketGCDeleting,
	bucketGCGone,
	bucketLineages,
	bucketHeads,
	bucketRecords,
	bucketRecChanges,
	bucketJobTombstones,
	bucketUploadBatches,
}

// appendedBuckets are the buckets whose new keys mostly sort after the
// keys near them: times, epochs and sequences grow, and the blob keys an
// upload slot makes start with the time (blobstore.NewKey). bbolt splits
// a full page into pages filled to a bucket's FillPercent (half, by
// default), which for appends leaves every page half empty: a commit
// writes twice the pages, and a read searches twice as many. Filled to
// appendedFill instead, as etcd fills its key bucket. A key inserted
// between others still fits: a page is split only once it overflows.
var appendedBuckets = []bucket{
	bucketAttempts,
	bucketEpochs,
	bucketAcks,
	bucketPayloads,
	bucketDeadlines,
	bucketBlobs,
	bucketBlobLeases,
	bucketGCCandidates,
	bucketGCGone,
	bucketRecords,
	bucketRecChanges,
	bucketUploadBatches,
}

// appendedFill is the FillPercent of appendedBuckets.
const appendedFill = 0.9

// fillAppended sets the FillPercent of appendedBuckets for the write
// transaction tx (bbolt keeps it per transaction, on the bucket handles a
// writable transaction caches).
func fillAppended(tx *bolt.Tx) {
	for _, name := range appendedBuckets {
		if b := tx.Bucket(name); b != nil {
			b.FillPercent = appendedFill
		}
	}
}

// optionalFrom is the index in allBuckets of the first bucket added after
// the state hash's format was fixed: it and the ones after it are digested
// only when not empty. (rec_seq, at index 20 before schema version 5, and
// blob_unobserved, at index 20 before version 6, were removed from the
// list.)
const optionalFrom = 20

// Keys of the meta bucket.
var (
	metaAppliedIndex = []byte("applied_index")
	metaSchema       = []byte("schema_version")
	metaNextLineage  = []byte("next_lineage")
)

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// jobPrefix is the key prefix of every record of a job: ids never contain
// a zero byte, so "a\0" never prefixes a key of job "ab".
func jobPrefix(job string) []byte { return append(append(make([]byte, 0, len(job)+1), job...), 0) }

// appendJobNum appends job, a zero byte and n.
func appendJobNum(b []byte, job string, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(append(b, job...), 0), n)
}

func jobNumKey(job string, n uint64) []byte { return appendJobNum(make([]byte, 0, len(job)+9), job, n) }

func taskKey(job string, n uint64, task string) []byte {
	return append(appendJobNum(make([]byte, 0, len(job)+9+len(task)), job, n), task...)
}

func payloadKey(job string, epoch uint64, task string, k Kind) []byte {
	b := appendJobNum(make([]byte, 0, len(job)+9+len(task)+1+len(k)), job, epoch)
	return append(append(append(b, task...), 0), k...)
}

func deadlineKey(deadlineNanos int64, job string, epoch uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(job)+9), uint64(deadlineNanos))
	return appendJobNum(b, job, epoch)
}

// txn wraps a bbolt transaction with typed accessors. Values read are
// decoded into fresh structs, so nothing aliases bbolt's memory after the
// transaction ends.
type txn struct {
	tx *bolt.Tx
	// index is the Raft index of the command being applied (0 for reads).
	index uint64
	// usage collects the changes of the jobs' usage the writes made
	// (quota.go); the FSM adds them to its counts once the transaction
	// commits.
	usage map[string]JobUsage
	// awaiting collects the blobs whose AwaitingObservation the writes
	// changed (unobserved.go), with its new value; the FSM moves its index
	// by them once the transaction commits.
	awaiting map[string]bool
	// awaitingHint sizes awaiting when it is made: as many as the previous
	// write transaction's held (a follower's holds thousands).
	awaitingHint int
	// members lists the member records commands wrote or removed: the
	// FSM publishes them after the batch (members.go).
	members []string
	// blobs holds the blob records of the command being applied
	// (blob_refs.go); nil outside commands.
	blobs blobCache
	// batches holds the upload batches of the command being applied
	// (upload_batches.go); nil outside commands.
	batches batchCache
	// spareBlobs and spareBatches are the emptied maps of the last command
	// applied, which the next one takes (applyCommand).
	spareBlobs   blobCache
	spareBatches batchCache
	// slots checks the MACs of signed upload slots (upload_slots.go);
	// made at the first one the transaction reads.
	slots *SlotSigner
	// cutoff is the slot cut-off (upload_slots.go) once read; nil before.
	cutoff *time.Time
	// cursors holds a cursor per bucket for point reads (get).
	cursors map[string]*bolt.Cursor
	// recs holds, in the state machine's write transaction, the values of
	// the keys of cachedBuckets it read or wrote (nil: absent), by
	// bucket and key; nil in other transactions.
	recs recCache
	// ops counts the file operations made through the accessors below.
	ops FileOps
	// recHints sizes the caches of recs (recCache.sizes of the previous
	// write transaction).
	recHints map[string]int
	// dirty holds, in the state machine's write transaction, the keys of
	// deferredBuckets put and not yet written to the file, by bucket
	// (their values are in recs); nil in other transactions.
	dirty map[string]map[string]struct{}
	// deferBlobs: the puts of the blobs bucket are deferred too (a
	// follower's transaction; deferredBuckets).
	deferBlobs bool
	// objs holds, in the state machine's write transaction, the records
	// of deferredBuckets it read or wrote, decoded, by bucket and key: its
	// own copies (record_copy.go), which a read copies and a flush
	// encodes. A key there is as objs says, whatever recs holds for it.
	// nil in other transactions.
	objs map[string]map[string]msgRecord
	// blobKeys, in the state machine's write transaction, filters the
	// searches of the blobs bucket for absent keys (blob_filter.go); nil
	// in other transactions. blobsAdded are the fingerprints it counted
	// for the records t wrote, blobsGone those of the records t deleted.
	blobKeys   *blobFilter
	blobsAdded []uint32
	blobsGone  []uint32
}

// FileOps counts operations on the state machine file's buckets: Seeks
// (a point read, a membership test, the start of a scan or of a prefix
// delete), Puts and Deletes. bbolt finds the key of each from the
// bucket's root, comparing keys down the tree; a follower spends most of
// its apply doing it. Reads answered by the write transaction's cache
// (recs) are not counted.
type FileOps struct {
	Seeks   uint64
	Puts    uint64
	Deletes uint64
	// Spared counts the point reads of the blobs bucket that the filter of
	// blob keys (blob_filter.go) answered without a search: they are not
	// in Seeks.
	Spared uint64
}

// writesHeld is how many writes the transaction holds: the puts and
// deletes made in the file, and the deferred puts not made yet (a key
// put again while deferred counts once).
func (t *txn) writesHeld() int {
	n := int(t.ops.Puts + t.ops.Deletes)
	for _, d := range t.dirty {
		n += len(d)
	}
	return n
}

// add adds o's counts to f's.
func (f *FileOps) add(o FileOps) {
	f.Seeks += o.Seeks
	f.Puts += o.Puts
	f.Deletes += o.Deletes
	f.Spared += o.Spared
}

// cachedBuckets are the buckets whose point reads the write transaction
// keeps (txn.recs): the records an ack reads that the acks of the same
// group commit read again (its job, task, epoch, head and lineage), and
// the blobs, whose records the leader's observation reads again soon
// after the ack that committed them (within a follower's longer group
// commit, often). Every write to them goes through putRecord, put, del
// or deletePrefix, which keep recs the same as the file.
var cachedBuckets = map[string]bool{
	string(bucketJobs): true, string(bucketTasks): true, string(bucketEpochs): true,
	string(bucketHeads): true, string(bucketLineages): true, string(bucketBlobs): true,
}

// recCache is the write transaction's cache of values (txn.recs): a map
// of keys to values per bucket, so that a read looks a key up as it is
// (a map index of string(key) copies nothing) instead of building a key
// of bucket and key for every read and write, which was a tenth of the
// objects applying an ack allocated.
type recCache map[string]map[string][]byte

// of is the cache of bucket name, made on first use with room for the
// keys hints gives the bucket.
func (c recCache) of(name bucket, hints map[string]int) map[string][]byte {
	m, ok := c[string(name)]
	if !ok {
		m = make(map[string][]byte, hints[string(name)])
		c[string(name)] = m
	}
	return m
}

// sizes is how many keys each bucket's cache holds: the next
// transaction's caches are made that large (growing a map rehashes what
// it holds; a follower's transaction caches thousands of keys).
func (c recCache) sizes() map[string]int {
	out := make(map[string]int, len(c))
	for n, m := range c {
		out[n] = len(m)
	}
	return out
}

// counted reports whether the filter of blob keys counts the keys of
// bucket name in t: the blobs bucket, in the state machine's write
// transaction.
func (t *txn) counted(name bucket) bool {
	return t.blobKeys != nil && string(name) == string(bucketBlobs)
}

// filteredOut reports whether the filter of blob keys says that bucket
// name does not hold key: a search would find nothing.
func (t *txn) filteredOut(name bucket, key []byte) bool {
	if t.counted(name) && !t.blobKeys.mayHold(key) {
		t.ops.Spared++
		return true
	}
	return false
}

// cached reports whether t keeps the values of bucket name.
func (t *txn) cached(name bucket) bool { return t.recs != nil && cachedBuckets[string(name)] }

// recsOf is t's cache of bucket name, which cached(name) says it keeps.
func (t *txn) recsOf(name bucket) map[string][]byte {
	return t.recs.of(name, t.recHints)
}

// b is a handle of bucket name, holding every put the transaction made
// to it: the deferred puts of the bucket are made first (flush).
func (t *txn) b(name bucket) *bolt.Bucket {
	if err := t.flush(name); err != nil {
		// Deferred puts were checked as bbolt checks them when they were
		// made (checkPut); a write transaction takes them.
		panic(fmt.Sprintf("fsm: writing the deferred puts of bucket %s: %v", name, err))
	}
	return t.raw(name)
}

// raw is a handle of bucket name without the deferred puts: for writes,
// and for reads that look at the transaction's cache first.
func (t *txn) raw(name bucket) *bolt.Bucket {
	b := t.tx.Bucket(name)
	if b == nil {
		// Buckets are created when the file is opened; a missing one is a
		// corrupt file.
		panic(fmt.Sprintf("fsm: bucket %s missing", name))
	}
	return b
}

// deferredBuckets are the cached buckets whose puts the state machine's
// write transaction keeps in its cache (txn.recs) and makes in the file
// once, in key order, when it commits (or before anything reads the
// bucket other than through the cache: scan, a bucket handle). Their
// records are written again and again within one transaction: a job's
// epoch at its begin, at each ack and when it leaves; a task's lineage at
// each ack and when an epoch leaves; the job at each begin and
// completion. With 160 acks a transaction, 4 puts per ack were 1.
//
// A blob's record is written by the ack that commits it and again by the
// leader's observation of its object, which most often lands in the same
// transaction of a follower (a second of entries): one put instead of
// two. A leader's transactions do not defer them (txn.deferBlobs): its
// commits stall the apply that acks wait for, and the puts deferred to
// them made the stalls longer (ack p99 7% higher at 64 workers, the
// throughput no better) while its shorter transactions shared few. Blob
// records are kept as bytes, not decoded: copyOfRecord keeps no copy of
// them.
var deferredBuckets = map[string]bool{
	string(bucketJobs): true, string(bucketEpochs): true, string(bucketLineages): true,
	string(bucketBlobs): true,
}

// objsOf is t's map of decoded records of bucket name (txn.objs), nil
// when t keeps none for it: outside the write transaction, for other
// buckets, and while encodeRecord writes the format of an earlier release
// (writeSchema), whose records would not read back as the copies do.
func (t *txn) objsOf(name bucket) map[string]msgRecord {
	if t.objs == nil || !t.deferred(name) || writeSchema != 0 {
		return nil
	}
	m := t.objs[string(name)]
	if m == nil {
		m = make(map[string]msgRecord, t.recHints[string(name)])
		t.objs[string(name)] = m
	}
	return m
}

// markDirty records a deferred put of key in bucket name.
func (t *txn) markDirty(name bucket, key string) {
	d := t.dirty[string(name)]
	if d == nil {
		d = map[string]struct{}{}
		t.dirty[string(name)] = d
	}
	d[key] = struct{}{}
}

// deferred reports whether t defers the puts of bucket name.
func (t *txn) deferred(name bucket) bool {
	return t.dirty != nil && deferredBuckets[string(name)] &&
		(t.deferBlobs || string(name) != string(bucketBlobs))
}

// checkPut refuses what bbolt's Put refuses, so that a deferred put fails
// where it is made, not at the commit.
func checkPut(key, value []byte) error {
	switch {
	case len(key) == 0:
		return bolt.ErrKeyRequired
	case len(key) > bolt.MaxKeySize:
		return bolt.ErrKeyTooLarge
	case int64(len(value)) > bolt.MaxValueSize:
		return bolt.ErrValueTooLarge
	}
	return nil
}

// flush makes the deferred puts of bucket name in the file, in key order.
func (t *txn) flush(name bucket) error {
	d := t.dirty[string(name)]
	if len(d) == 0 {
		return nil
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b, m, objs := t.raw(name), t.recsOf(name), t.objs[string(name)]
	for _, k := range keys {
		v := m[k]
		kb := []byte(k)
		if o, ok := objs[k]; ok {
			raw, err := encodeRecord(o)
			if err != nil {
				return fmt.Errorf("fsm: encode %s/%q: %w", name, k, err)
			}
			if err := checkPut(kb, raw); err != nil {
				return err
			}
			v = raw
			m[k] = raw // what the file holds now
		}
		t.ops.Puts++
		if err := b.Put(kb, v); err != nil {
			return err
		}
	}
	clear(d)
	return nil
}

// flushAll makes every deferred put in the file (before a commit).
func (t *txn) flushAll() error {
	for name := range t.dirty {
		if err := t.flush(bucket(name)); err != nil {
			return err
		}
	}
	return nil
}

// get is bbolt's Bucket.Get through a cursor the transaction keeps per
// bucket: Bucket.Get makes a cursor for each call and grows its stack
// level by level, which was a sixth of the bytes allocated by applying an
// ack. The cursor only ever seeks (each read starts from the root, as Get
// does), so writes between reads do not disturb it. Like Get, it answers
// nil for a key that is absent.
func (t *txn) get(name bucket, key []byte) []byte {
	if t.cached(name) {
		if o, ok := t.objs[string(name)][string(key)]; ok {
			// A record kept decoded (objs, only of cached buckets): its
			// bytes are made at the flush. The accessors read it through
			// getRecord; this is for raw reads.
			raw, err := encodeRecord(o)
			if err != nil {
				panic(fmt.Sprintf("fsm: encoding the record of %s/%q the transaction holds: %v", name, key, err))
			}
			return raw
		}
		m := t.recsOf(name)
		if v, ok := m[string(key)]; ok {
			return v
		}
		v := t.seek(name, key)
		m[string(key)] = v
		return v
	}
	return t.seek(name, key)
}

// seek is get from the file.
func (t *txn) seek(name bucket, key []byte) []byte {
	if t.filteredOut(name, key) {
		return nil
	}
	t.ops.Seeks++
	k, v := t.cursor(name).Seek(key)
	if k == nil || !bytes.Equal(k, key) {
		return nil
	}
	return v
}

// cursor is the transaction's cursor of a bucket for point reads (get,
// has); nothing iterates with it.
func (t *txn) cursor(name bucket) *bolt.Cursor {
	c := t.cursors[string(name)]
	if c == nil {
		c = t.b(name).Cursor()
		if t.cursors == nil {
			t.cursors = make(map[string]*bolt.Cursor, 8)
		}
		t.cursors[string(name)] = c
	}
	return c
}

// put is bbolt's Put, which keeps value until the transaction ends: the
// caller does not change it after.
func (t *txn) put(name bucket, key, value []byte) error {
	if t.counted(name) && !t.holdsBlob(key) {
		// before the record exists
		t.blobsAdded = append(t.blobsAdded, t.blobKeys.add(key))
	}
	if t.deferred(name) {
		if err := checkPut(key, value); err != nil {
			return err
		}
		delete(t.objs[string(name)], string(key)) // these bytes replace it
		k := string(key)
		t.recsOf(name)[k] = value
		t.markDirty(name, k)
		return nil
	}
	t.ops.Puts++
	if err := t.raw(name).Put(key, value); err != nil {
		return err
	}
	if t.cached(name) {
		t.recsOf(name)[string(key)] = value
	}
	return nil
}

func (t *txn) del(name bucket, key []byte) error {
	t.ops.Deletes++
	pending := false // a deferred put of key, not yet in the file
	if t.deferred(name) {
		d := t.dirty[string(name)]
		_, pending = d[string(key)]
		delete(d, string(key))
		delete(t.objs[string(name)], string(key)) // recs says it is gone
	}
	if t.counted(name) {
		gone, err := t.delBlob(key)
		if err != nil {
			return err
		}
		if !gone && pending {
			// The record was only a deferred put, counted when it was
			// made (put): it leaves the count with it.
			t.blobsGone = append(t.blobsGone, t.blobKeys.fingerprint(key))
		}
	} else if err := t.raw(name).Delete(key); err != nil {
		return err
	}
	if t.cached(name) {
		t.recsOf(name)[string(key)] = nil
	}
	return nil
}

// delBlob deletes key from the blobs bucket of the file, as bbolt's
// Delete does, and notes the fingerprint of the record it removed for the
// filter of blob keys; gone reports whether the file held one.
func (t *txn) delBlob(key []byte) (gone bool, err error) {
	if t.filteredOut(bucketBlobs, key) {
		return false, nil
	}
	c := t.raw(bucketBlobs).Cursor()
	if k, _ := c.Seek(key); k == nil || !bytes.Equal(k, key) {
		return false, nil
	}
	if err := c.Delete(); err != nil {
		return false, err
	}
	t.blobsGone = append(t.blobsGone, t.blobKeys.fingerprint(key))
	return true, nil
}

// holdsBlob reports whether the blobs bucket holds key: from the cache
// when it knows, else from the filter and the file.
func (t *txn) holdsBlob(key []byte) bool {
	if t.cached(bucketBlobs) {
		if v, ok := t.recsOf(bucketBlobs)[string(key)]; ok {
			return v != nil
		}
	}
	return t.has(bucketBlobs, key)
}

// has reports whether key is in bucket name, whatever its value. (Do not
// test Get against nil: for a key put with a nil or empty value, bbolt
// answers nil within the transaction that put it and an empty slice in
// later ones, so the answer would depend on how entries were batched.)
func (t *txn) has(name bucket, key []byte) bool {
	if t.filteredOut(name, key) {
		return false
	}
	if t.deferred(name) {
		// A deferred put is only in the cache. (Their values are records,
		// never empty.)
		if o, ok := t.objs[string(name)][string(key)]; ok {
			return o != nil
		}
		if v, ok := t.recsOf(name)[string(key)]; ok {
			return v != nil
		}
	}
	t.ops.Seeks++
	k, _ := t.cursor(name).Seek(key)
	return k != nil && bytes.Equal(k, key)
}

// deletePrefix removes every key of a bucket starting with prefix.
func (t *txn) deletePrefix(name bucket, prefix []byte) error {
	if t.counted(name) {
		// The filter counts the records deleted from the file below: a
		// deferred put is made there first (a job's deletion is rare).
		if err := t.flush(name); err != nil {
			return err
		}
	}
	if t.cached(name) {
		m := t.recsOf(name)
		for k := range m {
			if strings.HasPrefix(k, string(prefix)) {
				delete(m, k)
			}
		}
	}
	if t.deferred(name) {
		d := t.dirty[string(name)]
		for k := range d {
			if strings.HasPrefix(k, string(prefix)) {
				delete(d, k)
			}
		}
		objs := t.objs[string(name)]
		for k := range objs {
			if strings.HasPrefix(k, string(prefix)) {
				delete(objs, k)
			}
		}
	}
	c := t.raw(name).Cursor()
	t.ops.Seeks++
	counted := t.counted(name)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if counted {
			t.blobsGone = append(t.blobsGone, t.blobKeys.fingerprint(k))
		}
		if err := c.Delete(); err != nil {
			return err
		}
		t.ops.Deletes++
		t.ops.Seeks++ // the next Seek
	}
	return nil
}

// scan calls fn for every key of a bucket starting with prefix, in key
// order, until fn returns false or an error.
func (t *txn) scan(name bucket, prefix []byte, fn func(k, v []byte) (bool, error)) error {
	c := t.b(name).Cursor()
	t.ops.Seeks++
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *txn) appliedIndex() uint64 {
	raw := t.b(bucketMeta).Get(metaAppliedIndex)
	if len(raw) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw)
}

// initSchema creates the buckets and checks the schema version.
func initSchema(tx *bolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("fsm: create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket(bucketMeta)
	raw := meta.Get(metaSchema)
	if raw == nil {
		return meta.Put(metaSchema, u64(SchemaVersion))
	}
	if len(raw) != 8 {
		return fmt.Errorf("fsm: corrupt schema version")
	}
	v := binary.BigEndian.Uint64(raw)
	if v > SchemaVersion {
		return fmt.Errorf("fsm: data written by schema version %d; this build reads up to %d", v, SchemaVersion)
	}
	if v == binaryRecordsVersion {
		// Version 3 adds the upload batches, which a file of version 2
		// does not hold: marked, a release before them refuses the file.
		return meta.Put(metaSchema, u64(uploadBatchesVersion))
	}
	return nil
}

// schemaVersionOf is the schema version the file of tx records (0: none).
func schemaVersionOf(tx *bolt.Tx) uint64 {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0
	}
	raw := meta.Get(metaSchema)
	if len(raw) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw)
}
