package fsm

import (
	"fmt"
	"math/rand/v2"

	"github.com/hashicorp/raft"
	"github.com/metastore/metastore/internal/memkv"
)

// MemoryApply says how ApplyInMemory groups entries into transactions.
type MemoryApply struct {
	// Cached: each transaction keeps the caches of the state machine's
	// write transaction (decoded records, deferred puts, made at its end);
	// otherwise every read and write goes to the store.
	Cached bool
	// Leading: the transactions are a leader's (blob records not
	// deferred).
	Leading bool
	// Rand draws each transaction's number of entries (1 to 40); nil:
	// Batch entries a transaction (0: one transaction for all).
	Rand  *rand.Rand
	Batch int
	// TypedBlobs: the blob records are held decoded (blob_typed.go) in
	// place of the blobs bucket; TypedRecords the lineage records and
	// changes (records_typed.go) in place of theirs; TypedObjects the
	// records of the job's buckets (objects_typed.go).
	TypedBlobs, TypedRecords, TypedObjects bool
}

// ApplyInMemory applies logs, as ApplyBatch would, to a state in memory
// (internal/memkv) and returns every bucket, as DumpBuckets answers for a
// file, and the state hash.
func ApplyInMemory(logs []*raft.Log, o MemoryApply) (Dump, string, error) {
	st, blobs, recs, objs, err := applyInMemory(logs, o)
	if err != nil {
		return nil, "", err
	}
	t := &txn{mem: st.Snapshot(), blobsTyped: blobs, recsTyped: recs, objsTyped: objs}
	sum, err := t.stateHash()
	if err != nil {
		return nil, "", err
	}
	d, err := dumpTxn(t)
	return d, sum, err
}

// ReplayInMemory is ApplyInMemory without the answer, for benchmarks.
func ReplayInMemory(logs []*raft.Log, o MemoryApply) error {
	_, _, _, _, err := applyInMemory(logs, o)
	return err
}

func applyInMemory(logs []*raft.Log, o MemoryApply) (*memkv.Store, *typedBlobs, *typedRecords, *typedObjects, error) {
	st := newMemState()
	var blobs *typedBlobs
	if o.TypedBlobs {
		blobs = newTypedBlobs()
	}
	var recs *typedRecords
	if o.TypedRecords {
		recs = newTypedRecords()
	}
	var objs *typedObjects
	if o.TypedObjects {
		objs = newTypedObjects()
	}
	for i := 0; i < len(logs); {
		n := len(logs) - i
		if o.Rand != nil {
			n = min(1+o.Rand.IntN(40), n)
		} else if o.Batch > 0 {
			n = min(o.Batch, n)
		}
		t := &txn{mem: st, blobsTyped: blobs, recsTyped: recs, objsTyped: objs}
		if o.Cached {
			t.recs, t.dirty, t.objs = recCache{}, map[string]map[string]struct{}{}, map[string]map[string]msgRecord{}
			t.deferBlobs = !o.Leading
		}
		for _, l := range logs[i : i+n] {
			if l.Type != raft.LogCommand {
				continue
			}
			t.index = l.Index
			if _, err := applyEntry(t, l); err != nil {
				return nil, nil, nil, nil, err
			}
		}
		if err := t.flushAll(); err != nil {
			return nil, nil, nil, nil, err
		}
		if err := st.Bucket(bucketMeta).Put(metaAppliedIndex, u64(logs[i+n-1].Index)); err != nil {
			return nil, nil, nil, nil, err
		}
		i += n
	}
	return st, blobs, recs, objs, nil
}

// dumpTxn is DumpBuckets of the buckets t reads (a state in memory).
func dumpTxn(t *txn) (Dump, error) {
	out := Dump{}
	for _, name := range t.mem.Names() {
		kv := map[string]string{}
		out[string(name)] = kv
		err := t.scan(name, nil, func(k, v []byte) (bool, error) {
			js, err := recordJSON(name, v)
			if err != nil {
				return false, fmt.Errorf("%s/%q: %w", name, k, err)
			}
			kv[string(k)] = string(js)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
