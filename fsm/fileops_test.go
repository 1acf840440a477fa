package fsm_test

import (
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
)

// TestAckFileOps: an ack of three new blobs costs at most its budget of
// file operations (fsm.FileOps), counted over whole epochs of the
// ack-throughput load (ackLoad) in steady state, one checkpoint retained
// so that every completion releases the one before. Each operation is a
// search of the file's tree from its root, and a follower's apply is
// mostly those searches: an operation added per ack, or per blob, fails
// here before it shows in a benchmark. Commits come every 160 entries,
// not by time, so the counts are the same on any machine.
//
// Where the budget goes, per ack: each of the three blobs is put, and
// gets a lineage record and its rec_changes entry (9; the commit's check
// that no record has its key costs no search: the filter of blob keys,
// blob_filter.go, answers it); the ack record and the retry
// check (2); the epoch's record, put at its begin, at each of its four
// acks and when retention releases it, written once per transaction
// (deferredBuckets: 0.38); the task's lineage, put at the ack and when
// its previous epoch leaves, once per transaction too (0.5), and scanned
// for the records that epoch alone held (1); the job at the begin and the
// completion (0.12); the epoch's deadline, put and deleted (0.5); the
// completion's scans of payloads, attempts and the released epoch's acks
// (0.75); the rest are reads the write transaction's cache (160 entries
// long here) misses. The leader's observation of the blobs (one
// blobs-observed entry per round of epochs here) writes each blob's
// record once more, and reads it, from the write transaction's cache
// when the ack that committed it is in the same transaction (here, most
// of them); blob records are deferred puts (deferredBuckets), so the
// record reaches the file once when the ack and its observation share a
// transaction, and twice when a commit falls between them (here, about
// half the blobs: 1.5).
func TestAckFileOps(t *testing.T) {
	for _, c := range []struct {
		name string
		// observe: the leader's observation of the blobs follows the
		// acks; it seeks each blob's record once more, and puts it
		// again when a commit came between.
		observe                       bool
		maxSeeks, maxPuts, maxDeletes float64
	}{
		{"acks", false, 5, 11.25, 0.25},
		{"acks-observed", true, 6.08, 12.78, 0.25},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newAckLoad(t, fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 160}, nil, true)
			l.observe = c.observe
			l.run(t, 4*ackLoadJobs*ackLoadTasks) // past the first epochs and their slots
			before := l.h.f.CommitStats().Ops
			acks := l.run(t, 50*ackLoadJobs*ackLoadTasks)
			after := l.h.f.CommitStats().Ops
			per := func(a, b uint64) float64 { return float64(a-b) / float64(acks) }
			seeks, puts, deletes := per(after.Seeks, before.Seeks), per(after.Puts, before.Puts), per(after.Deletes, before.Deletes)
			spared := per(after.Spared, before.Spared)
			t.Logf("per ack over %d acks: %.2f seeks, %.2f puts, %.2f deletes; %.2f searches spared by the filter of blob keys", acks, seeks, puts, deletes, spared)
			if spared < 2.9 {
				// Each of the three new blobs' commit checks is answered
				// by the filter (1% of them may not be).
				t.Fatalf("the filter of blob keys spared %.2f searches per ack of three new blobs", spared)
			}
			if seeks > c.maxSeeks || puts > c.maxPuts || deletes > c.maxDeletes {
				t.Fatalf("an ack costs %.2f seeks, %.2f puts and %.2f deletes of the file; the budget is %v, %v and %v",
					seeks, puts, deletes, c.maxSeeks, c.maxPuts, c.maxDeletes)
			}
			if seeks == 0 || puts == 0 {
				t.Fatal("no file operation counted")
			}
		})
	}
}
