package fsm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// randomTime is a time as the state machine's commands make them and
// worse: with a monotonic reading, in zones other than UTC, zero.
func randomTime(r *rand.Rand) time.Time {
	switch r.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		return time.Now() // a monotonic reading
	case 2:
		return time.Unix(0, r.Int64N(1<<62)).In(time.FixedZone("x", 3600*(r.IntN(25)-12)))
	case 3:
		return time.Unix(0, r.Int64N(1<<62)).Local()
	}
	return time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).UTC()
}

func randomEpochs(r *rand.Rand) []uint64 {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []uint64{}
	}
	out := make([]uint64, 1+r.IntN(5))
	for i := range out {
		out[i] = r.Uint64N(100)
	}
	return out
}

func randomTimePtr(r *rand.Rand) *time.Time {
	if r.IntN(2) == 0 {
		return nil
	}
	t := randomTime(r)
	return &t
}

// randomRecord makes a record of bucket name (jobs, epochs or lineages)
// with every field set at random.
func randomRecord(r *rand.Rand, name bucket) msgRecord {
	switch string(name) {
	case string(bucketJobs):
		return &jobRecord{ID: fmt.Sprintf("job-%d", r.IntN(9)), Config: jobConfig{Retained: r.IntN(5), AckTimeout: Duration(r.Int64N(1e12)), History: r.IntN(9)},
			Generation: r.Uint64(), AttemptID: fmt.Sprint(r.IntN(3)), GenerationBase: r.Uint64N(3), LastEpoch: r.Uint64(), LatestCompleted: r.Uint64(),
			Pending: randomEpochs(r), Retained: randomEpochs(r), Ended: randomEpochs(r), RestoredAttempts: r.Uint64N(3), RestoresCountedFrom: r.Uint64N(3),
			CreatedAt: randomTime(r), UpdatedAt: randomTime(r), CreateIndex: r.Uint64(), ModifyIndex: r.Uint64()}
	case string(bucketEpochs):
		return &epochRecord{Job: "j\x00é", Epoch: r.Uint64(), Generation: r.Uint64(), State: epochState(fmt.Sprint("s", r.IntN(3))),
			BeganAt: randomTime(r), Deadline: randomTime(r), CompletedAt: randomTimePtr(r), EndedAt: randomTimePtr(r), Reason: "r",
			Expected: r.IntN(100), Acked: r.IntN(100), PayloadBytes: r.Int64(), Pinned: r.IntN(2) == 0, PinName: "p", CreateIndex: r.Uint64(), ModifyIndex: r.Uint64()}
	case string(bucketLineages):
		return &lineageRecord{ID: r.Uint64(), Job: "j", Task: "t", Generation: r.Uint64(), LastEpoch: r.Uint64(), Epochs: randomEpochs(r), Released: r.IntN(2) == 0}
	}
	panic("no records of bucket " + string(name))
}

// mutate changes every field of a record that shares memory with
// another value when copied carelessly: slices, and the times pointers
// point to.
func mutate(v msgRecord) {
	later := time.Unix(1, 1)
	switch r := v.(type) {
	case *jobRecord:
		for _, s := range [][]uint64{r.Pending, r.Retained, r.Ended} {
			for i := range s {
				s[i]++
			}
		}
		r.Generation++
	case *epochRecord:
		if r.CompletedAt != nil {
			*r.CompletedAt = later
		}
		if r.EndedAt != nil {
			*r.EndedAt = later
		}
		r.Acked++
	case *lineageRecord:
		for i := range r.Epochs {
			r.Epochs[i]++
		}
		r.LastEpoch++
	}
}

// TestRecordCopiesReadAsStored: the copy the write transaction keeps of a
// record (copyOfRecord) is what reading the record's stored bytes back
// gives (decodeRecord of encodeRecord), field for field, for records with
// every field set at random; and changing the original afterwards does
// not change the copy. Seen failing with the times copied as they are
// (a monotonic reading, a zone other than UTC) and with a slice shared.
func TestRecordCopiesReadAsStored(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, name := range []bucket{bucketJobs, bucketEpochs, bucketLineages} {
		if !deferredBuckets[string(name)] {
			t.Fatalf("%s is not a deferred bucket", name)
		}
		for range 2000 {
			v := randomRecord(r, name)
			c, ok := copyOfRecord(v)
			if !ok {
				t.Fatalf("%T is not kept decoded", v)
			}
			raw, err := encodeRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			stored := reflect.New(reflect.TypeOf(v).Elem()).Interface().(msgRecord)
			if err := decodeRecord(raw, stored); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, stored) {
				t.Fatalf("%s: the copy\n%+v\nthe stored record reads\n%+v", name, c, stored)
			}
			mutate(v)
			if !reflect.DeepEqual(c, stored) {
				t.Fatalf("%s: changing the original changed the copy:\n%+v\nagainst\n%+v", name, c, stored)
			}
			into := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if !readRecord(into, c) || !reflect.DeepEqual(into, stored) {
				t.Fatalf("%s: readRecord gave %+v, want %+v", name, into, stored)
			}
			mutate(into.(msgRecord))
			if !reflect.DeepEqual(c, stored) {
				t.Fatalf("%s: changing a record read changed the transaction's copy", name)
			}
		}
	}
}

// TestDecodedRecordsMatchFile: the decoded records the write transaction
// keeps (txn.objs) answer what a file written directly answers, through
// random puts of records, raw puts, deletes, prefix deletes, record reads,
// raw reads, membership tests and scans, with the records read and put
// changed afterwards by their callers; after the deferred puts are made,
// both files hold the same bytes. Seen failing with a record put kept
// without a copy, with has ignoring objs, and with del and deletePrefix
// leaving objs behind.
func TestDecodedRecordsMatchFile(t *testing.T) {
	names := []bucket{bucketJobs, bucketEpochs, bucketLineages}
	cached := &txn{tx: openWriteTx(t, "cached.db", names), recs: recCache{}, dirty: map[string]map[string]struct{}{}, objs: map[string]map[string]msgRecord{}}
	file := &txn{tx: openWriteTx(t, "file.db", names)}
	r := rand.New(rand.NewPCG(5, 6))
	keys := []string{"a", "a\x00", "a\x001", "ab", "b", "b\x001"}
	kept := 0
	for i := range 20_000 {
		name := names[r.IntN(len(names))]
		key := []byte(keys[r.IntN(len(keys))])
		switch op := r.IntN(20); {
		case op < 6:
			v := randomRecord(r, name)
			raw, err := encodeRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := cached.putRecord(name, key, v); err != nil {
				t.Fatal(err)
			}
			if err := file.put(name, key, raw); err != nil {
				t.Fatal(err)
			}
			mutate(v) // the caller changes the record it put
		case op < 7:
			v := randomRecord(r, name)
			raw, err := encodeRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, tx := range []*txn{cached, file} {
				if err := tx.put(name, key, raw); err != nil {
					t.Fatal(err)
				}
			}
		case op < 10:
			for _, tx := range []*txn{cached, file} {
				if err := tx.del(name, key); err != nil {
					t.Fatal(err)
				}
			}
		case op < 11:
			prefix := key[:1+r.IntN(len(key))]
			for _, tx := range []*txn{cached, file} {
				if err := tx.deletePrefix(name, prefix); err != nil {
					t.Fatal(err)
				}
			}
		case op < 12:
			prefix := key[:r.IntN(len(key)+1)]
			if got, want := scanned(t, cached, name, prefix), scanned(t, file, name, prefix); got != want {
				t.Fatalf("op %d: scan of %s/%q: the cached transaction reads %s, the file %s", i, name, prefix, got, want)
			}
		default:
			zero := func() msgRecord {
				return reflect.New(reflect.TypeOf(randomRecord(r, name)).Elem()).Interface().(msgRecord)
			}
			got, want := zero(), zero()
			okGot, err := cached.getRecord(name, key, got)
			if err != nil {
				t.Fatal(err)
			}
			okWant, err := file.getRecord(name, key, want)
			if err != nil {
				t.Fatal(err)
			}
			if okGot != okWant || !reflect.DeepEqual(got, want) {
				t.Fatalf("op %d: %s/%q: the cached transaction reads %v %+v, the file %v %+v", i, name, key, okGot, got, okWant, want)
			}
			mutate(got) // the caller changes the record it read
		}
		for _, n := range names {
			kept += len(cached.objs[string(n)])
			for _, k := range keys {
				if got, want := cached.has(n, []byte(k)), file.has(n, []byte(k)); got != want {
					t.Fatalf("op %d: %s/%q: the cached transaction says present=%v, the file %v", i, n, k, got, want)
				}
				if got, want := cached.get(n, []byte(k)), file.get(n, []byte(k)); !slices.Equal(got, want) || (got == nil) != (want == nil) {
					t.Fatalf("op %d: %s/%q: the cached transaction's bytes %x, the file's %x", i, n, k, got, want)
				}
			}
		}
	}
	if kept == 0 {
		t.Fatal("no record was kept decoded")
	}
	if err := cached.flushAll(); err != nil {
		t.Fatal(err)
	}
	cached.recs, cached.dirty, cached.objs = nil, nil, nil // read the file itself
	for _, n := range names {
		if got, want := scanned(t, cached, n, nil), scanned(t, file, n, nil); got != want {
			t.Fatalf("after the deferred puts, bucket %s holds %s; written directly, %s", n, got, want)
		}
	}
}
