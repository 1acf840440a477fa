package fsm

import (
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/internal/memkv"
)

// The store a transaction reads and writes: the buckets of a bbolt
// transaction (the state machine file, today's state layer) or of an
// internal/memkv store (the state in memory, the first step of the state
// layer planned in DESIGN.md). The accessors of schema.go and the few
// handlers that use a bucket directly see only these operations, so the
// commands apply the same way to either; TestCommandsOnMemory applies the
// same entries to both and compares every bucket. A transaction may also
// hold typed structures in place of some buckets (blob_typed.go,
// records_typed.go, objects_typed.go): bucketOf then answers with their
// view as a bucket, for the readers that scan.

// kvBucket is a bucket: bbolt's operations that the state machine uses.
type kvBucket interface {
	Get(key []byte) []byte
	Put(key, value []byte) error
	Delete(key []byte) error
	Cursor() kvCursor
	// KeyN is the number of keys. (bbolt counts those of its pages: in a
	// write transaction, the committed ones.)
	KeyN() int
}

// kvCursor walks a bucket in key order.
type kvCursor interface {
	First() (key, value []byte)
	Seek(key []byte) (k, v []byte)
	Next() (key, value []byte)
	Delete() error
}

// boltBucket is a bucket of the file.
type boltBucket struct{ *bolt.Bucket }

func (b boltBucket) Cursor() kvCursor { return b.Bucket.Cursor() }
func (b boltBucket) KeyN() int        { return b.Bucket.Stats().KeyN }

// memBucket is a bucket in memory.
type memBucket struct{ *memkv.Bucket }

func (b memBucket) Cursor() kvCursor { return b.Bucket.Cursor() }

// bucketOf is bucket name of t's store, nil when the store has none.
func (t *txn) bucketOf(name bucket) kvBucket {
	if t.blobsTyped != nil && string(name) == string(bucketBlobs) {
		return typedBlobBucket{t.blobsTyped}
	}
	if tr := t.objsTyped.of(name); tr != nil {
		return typedObjectBucket{name, tr}
	}
	if t.recsTyped != nil {
		switch string(name) {
		case string(bucketRecords):
			return typedRecordsBucket{t.recsTyped}
		case string(bucketRecChanges):
			return typedChangesBucket{t.recsTyped}
		}
	}
	if t.mem != nil {
		if b := t.mem.Bucket(name); b != nil {
			return memBucket{b}
		}
		return nil
	}
	if b := t.tx.Bucket(name); b != nil {
		return boltBucket{b}
	}
	return nil
}

// newMemState returns an empty state in memory with every bucket and the
// schema version, as initSchema makes a new file.
func newMemState() *memkv.Store {
	s := memkv.New()
	for _, name := range allBuckets {
		if _, err := s.CreateBucketIfNotExists(name); err != nil {
			panic(err) // names are not empty
		}
	}
	if err := s.Bucket(bucketMeta).Put(metaSchema, u64(SchemaVersion)); err != nil {
		panic(err)
	}
	return s
}
