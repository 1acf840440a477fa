package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// wchar is the bytes this process has passed to write and pwrite so far
// (/proc/self/io), or -1 where it cannot be read.
func wchar() int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkAckState is the state machine's share of the ack-throughput
// benchmark (bench/): 16 jobs of 4 tasks, every ack adding 3 segments in 3
// newly committed blobs (upload slots created 300 at a time), the entries
// of the jobs' epochs applied as Raft hands them over, 16 entries a batch.
// It reports the apply time and the bytes written (pwrite) per ack, with
// the state machine file committed after every batch and with group
// commits (commit.go), and with upload keys as the API hands them out
// (signed slots, no entry: upload_slots.go), as it records them without
// the orphan sweep (one upload batch per request, upload_batches.go) and
// as single intents, time first (blobstore.NewKey) and random.
//
//	go test -run '^$' -bench BenchmarkAckState -benchtime 5000x ./fsm/
func BenchmarkAckState(b *testing.B) {
	type policy struct {
		name   string
		policy fsm.CommitPolicy
	}
	type shape struct {
		name string
		// key makes single intents' keys; nil: upload batches
		// (intent-create version 4), or signed slots with signed set.
		key    func(dir string, n int) string
		signed bool
		// observe adds the leader's observations of the committed blobs.
		observe bool
	}
	clock := time.Unix(1_800_000_000, 0)
	for _, p := range []policy{
		{"commit-every-batch", fsm.CommitPolicy{Interval: 0, MaxEntries: 1}},
		{"group-commit-20ms", fsm.CommitPolicy{Interval: 20 * time.Millisecond, MaxEntries: 10_000}},
		{"group-commit-100ms", fsm.DefaultCommitPolicy},
	} {
		for _, k := range []shape{
			// What the API hands out by default: signed slots, no entry.
			{"keys=signed", nil, true, false},
			// The same with the leader's observation of each round's
			// blobs, as the cluster applies them.
			{"keys=signed,observed", nil, true, true},
			// What the API records without the orphan sweep: one upload
			// batch per request.
			{"keys=batches", nil, false, false},
			// Single intents with keys of blobstore.NewKey: time first.
			{"keys=time-ordered", func(dir string, n int) string {
				return blobstore.NewKey(dir, clock.Add(time.Duration(n)*time.Microsecond))
			}, false, false},
			// Random keys, the shape before NewKey.
			{"keys=random", func(dir string, _ int) string {
				return fmt.Sprintf("%s/%016x%016x", dir, rand.Uint64(), rand.Uint64())
			}, false, false},
		} {
			benchAckState(b, p.name+"/"+k.name, p.policy, k.key, k.signed, k.observe)
		}
	}
}

func benchAckState(b *testing.B, name string, policy fsm.CommitPolicy, newKey func(dir string, n int) string, signed, observe bool) {
	b.Run(name, func(b *testing.B) {
		l := newAckLoad(b, policy, newKey, signed)
		l.observe = observe
		b.ResetTimer()
		w0 := wchar()
		ops0 := l.h.f.CommitStats().Ops
		start := time.Now()
		acks := l.run(b, b.N)
		took := time.Since(start)
		w1 := wchar()
		b.StopTimer()
		b.ReportMetric(float64(took.Nanoseconds())/float64(acks), "ns/ack")
		if w0 >= 0 && w1 >= 0 {
			b.ReportMetric(float64(w1-w0)/float64(acks), "pwriteB/ack")
		}
		st := l.h.f.CommitStats()
		b.ReportMetric(float64(st.Entries)/float64(max(1, st.Commits)), "entries/commit")
		ops := st.Ops
		b.ReportMetric(float64(ops.Seeks+ops.Puts+ops.Deletes-ops0.Seeks-ops0.Puts-ops0.Deletes)/float64(acks), "fileops/ack")
	})
}

// ackLoad drives a state machine as the ack-throughput benchmark drives
// the cluster: 16 jobs of 4 tasks (state, incremental, one checkpoint
// retained), every ack adding 3 segments in 3 newly committed blobs, the
// entries applied 16 a batch.
type ackLoad struct {
	h      *harness
	newKey func(dir string, n int) string
	signed bool
	// observe: after each round of epochs, one blobs-observed entry
	// reports the blobs the round's acks committed, as the leader's
	// observer does (gc.Collector.Observe).
	observe bool
	// deleted are the jobs no longer driven (deleted by the test).
	deleted map[int]bool
	signer  *fsm.SlotSigner
	keys    map[string][]string
	seq     uint64
	issued  int
	epoch   []uint64
	batch   []*raft.Log
}

const ackLoadJobs, ackLoadTasks = 16, 4

// newAckLoad starts the jobs. newKey makes single intents' keys; nil:
// upload batches (intent-create version 4), or signed slots with signed
// set.
func newAckLoad(tb testing.TB, policy fsm.CommitPolicy, newKey func(dir string, n int) string, signed bool) *ackLoad {
	h := newHarness(tb)
	h.f.SetCommitPolicy(policy)
	l := &ackLoad{h: h, newKey: newKey, signed: signed, keys: map[string][]string{}, epoch: make([]uint64, ackLoadJobs)}
	for j := range ackLoadJobs {
		job := fmt.Sprintf("j%d", j)
		h.putJob(job, wire.JobConfig{Retained: 1})
		var specs []wire.Task
		for t := range ackLoadTasks {
			specs = append(specs, task(tb, fmt.Sprintf("t%d", t), "state", "incremental"))
		}
		h.start(job, "a1", specs...)
	}
	l.signer = fsm.NewSlotSigner(testSlotKey)
	if signed {
		mustOK(tb, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey}))
	}
	return l
}

// run applies whole epochs of every job until at least n acks were
// applied, and commits them; it returns the acks applied.
func (l *ackLoad) run(tb testing.TB, n int) int {
	h := l.h
	flush := func() {
		if len(l.batch) == 0 {
			return
		}
		for i, r := range h.f.ApplyBatch(l.batch) {
			if res, ok := r.(*fsm.Result); !ok || res.Err != nil {
				tb.Fatalf("entry %d: %v", l.batch[i].Index, r)
			}
		}
		l.batch = l.batch[:0]
	}
	add := func(typ fsm.CommandType, payload any) {
		l.batch = append(l.batch, h.nextLog(h.encode(typ, payload)))
		if len(l.batch) == 16 {
			flush()
		}
	}
	acks := 0
	for acks < n {
		var committed []fsm.BlobObservation
		for j := range ackLoadJobs {
			if l.deleted[j] {
				continue
			}
			job := fmt.Sprintf("j%d", j)
			l.epoch[j]++
			add(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: 1, Epoch: l.epoch[j]})
			for t := range ackLoadTasks {
				tk := fmt.Sprintf("t%d", t)
				slot := job + "/" + tk
				if len(l.keys[slot]) < 3 && l.signed {
					l.keys[slot] = l.signer.Keys(job, tk, 1, h.now.Add(time.Hour+time.Duration(l.issued)), uint16(l.issued), 300)
					l.issued += 300
				} else if len(l.keys[slot]) < 3 {
					p := fsm.IntentCreate{Job: job, Generation: 1, Task: tk, LeaseUntil: h.now.Add(time.Hour)}
					if l.newKey == nil {
						p.Batch, p.Count = blobstore.NewBatchID(h.now.Add(time.Duration(l.issued)*time.Microsecond)), 300
						l.issued += 300
					} else {
						for range 300 {
							p.Keys = append(p.Keys, l.newKey(slot, l.issued))
							l.issued++
						}
					}
					add(fsm.CmdIntentCreate, p)
					l.keys[slot] = p.UploadKeys()
				}
				var m fsm.ManifestAck
				d := &manifests.Delta{}
				for _, k := range l.keys[slot][:3] {
					l.seq++
					m.Blobs = append(m.Blobs, fsm.BlobCommit{Key: k, Size: 100})
					committed = append(committed, fsm.BlobObservation{Key: k, Size: 100, ETag: "etag"})
					d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Offset: 0, Length: 100, FirstSeq: l.seq, LastSeq: l.seq})
				}
				l.keys[slot] = l.keys[slot][3:]
				m.Delta = d
				add(fsm.CmdTaskAck, fsm.TaskAck{Job: job, Generation: 1, Epoch: l.epoch[j], Task: tk, Manifest: &m})
				acks++
			}
		}
		if l.observe {
			add(fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: committed})
		}
	}
	flush()
	if err := h.f.Flush(); err != nil {
		tb.Fatal(err)
	}
	return acks
}

// BenchmarkAckStateManyBlobs: the ack load of BenchmarkAckState
// (group-commit-100ms, signed keys) on a file that holds a million blob
// records besides, under the load's own job and task prefixes, with the
// filter of blob keys (fsm/blob_filter.go) and without it: the commit's
// check of each new blob either is answered by the filter or searches the
// bucket of a million keys.
func BenchmarkAckStateManyBlobs(b *testing.B) {
	const planted = 1_000_000
	for _, filter := range []bool{true, false} {
		b.Run(fmt.Sprintf("filter=%v", filter), func(b *testing.B) {
			l := newAckLoad(b, fsm.DefaultCommitPolicy, nil, true)
			l.run(b, ackLoadJobs*ackLoadTasks)
			r := rand.New(rand.NewPCG(1, 2))
			plantBlobRecords(b, l.h.f, planted, func() string {
				return fmt.Sprintf("j%d/t%d/%016x%016x%016x", r.IntN(ackLoadJobs), r.IntN(ackLoadTasks), r.Uint64(), r.Uint64(), r.Uint64())
			})
			if !filter {
				fsm.DisableBlobFilter(l.h.f)
			}
			l.run(b, ackLoadJobs*ackLoadTasks) // the filter is built here
			b.ResetTimer()
			ops0 := l.h.f.CommitStats().Ops
			start := time.Now()
			acks := l.run(b, b.N)
			took := time.Since(start)
			b.StopTimer()
			ops := l.h.f.CommitStats().Ops
			b.ReportMetric(float64(took.Nanoseconds())/float64(acks), "ns/ack")
			b.ReportMetric(float64(ops.Seeks-ops0.Seeks)/float64(acks), "seeks/ack")
		})
	}
}

// BenchmarkReplayAcks applies the ack load of BenchmarkAckState with
// signed slots and the leader's observations to the state machine file
// as a leader, 16 entries a batch, with group commits: the apply of a
// replay, per ack. (Until the in-memory state layer was removed, it
// compared the same entries applied to memory: docs/benchmarks.md,
// twenty-third round; commit f6cacf0 in main's history, tagged experiment/state-in-memory-main where the tag was kept.)
//
//	go test -run '^$' -bench BenchmarkReplayAcks -benchtime 10x ./fsm/
func BenchmarkReplayAcks(b *testing.B) {
	const acks = 20_000
	l := newAckLoad(b, fsm.DefaultCommitPolicy, nil, true)
	l.observe = true
	l.run(b, acks)
	logs := l.h.logs
	const batch = 16
	b.Run("store=file", func(b *testing.B) {
		for range b.N {
			f := openFSM(b, b.TempDir()+"/fsm.db")
			f.SetLeading(true)
			for i := 0; i < len(logs); i += batch {
				f.ApplyBatch(logs[i:min(i+batch, len(logs))])
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*acks), "ns/ack")
	})
}
