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
	}
	clock := time.Unix(1_800_000_000, 0)
	for _, p := range []policy{
		{"commit-every-batch", fsm.CommitPolicy{Interval: 0, MaxEntries: 1}},
		{"group-commit-20ms", fsm.CommitPolicy{Interval: 20 * time.Millisecond, MaxEntries: 10_000}},
		{"group-commit-100ms", fsm.DefaultCommitPolicy},
	} {
		for _, k := range []shape{
			// What the API hands out by default: signed slots, no entry.
			{"keys=signed", nil, true},
			// What the API records without the orphan sweep: one upload
			// batch per request.
			{"keys=batches", nil, false},
			// Single intents with keys of blobstore.NewKey: time first.
			{"keys=time-ordered", func(dir string, n int) string {
				return blobstore.NewKey(dir, clock.Add(time.Duration(n)*time.Microsecond))
			}, false},
			// Random keys, the shape before NewKey.
			{"keys=random", func(dir string, _ int) string {
				return fmt.Sprintf("%s/%016x%016x", dir, rand.Uint64(), rand.Uint64())
			}, false},
		} {
			benchAckState(b, p.name+"/"+k.name, p.policy, k.key, k.signed)
		}
	}
}

func benchAckState(b *testing.B, name string, policy fsm.CommitPolicy, newKey func(dir string, n int) string, signed bool) {
	{
		p := struct{ policy fsm.CommitPolicy }{policy}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			h.f.SetCommitPolicy(p.policy)
			const jobs, tasks = 16, 4
			keys := map[string][]string{}
			seq := uint64(0)
			issued := 0
			epoch := make([]uint64, jobs)
			for j := range jobs {
				job := fmt.Sprintf("j%d", j)
				h.putJob(job, wire.JobConfig{Retained: 1})
				var specs []wire.Task
				for t := range tasks {
					specs = append(specs, task(b, fmt.Sprintf("t%d", t), "state", "incremental"))
				}
				h.start(job, "a1", specs...)
			}
			signer := fsm.NewSlotSigner(testSlotKey)
			if signed {
				mustOK(b, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey}))
			}
			var batch []*raft.Log
			flush := func() {
				if len(batch) == 0 {
					return
				}
				for i, r := range h.f.ApplyBatch(batch) {
					if res, ok := r.(*fsm.Result); !ok || res.Err != nil {
						b.Fatalf("entry %d: %v", batch[i].Index, r)
					}
				}
				batch = batch[:0]
			}
			add := func(typ fsm.CommandType, payload any) {
				batch = append(batch, h.nextLog(h.encode(typ, payload)))
				if len(batch) == 16 {
					flush()
				}
			}
			b.ResetTimer()
			w0 := wchar()
			start := time.Now()
			acks := 0
			for acks < b.N {
				for j := range jobs {
					job := fmt.Sprintf("j%d", j)
					epoch[j]++
					add(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: 1, Epoch: epoch[j]})
					for t := range tasks {
						tk := fmt.Sprintf("t%d", t)
						slot := job + "/" + tk
						if len(keys[slot]) < 3 && signed {
							keys[slot] = signer.Keys(job, tk, 1, h.now.Add(time.Hour+time.Duration(issued)), uint16(issued), 300)
							issued += 300
						} else if len(keys[slot]) < 3 {
							p := fsm.IntentCreate{Job: job, Generation: 1, Task: tk, LeaseUntil: h.now.Add(time.Hour)}
							if newKey == nil {
								p.Batch, p.Count = blobstore.NewBatchID(h.now.Add(time.Duration(issued)*time.Microsecond)), 300
								issued += 300
							} else {
								for range 300 {
									p.Keys = append(p.Keys, newKey(slot, issued))
									issued++
								}
							}
							add(fsm.CmdIntentCreate, p)
							keys[slot] = p.UploadKeys()
						}
						var m fsm.ManifestAck
						d := &manifests.Delta{}
						for _, k := range keys[slot][:3] {
							seq++
							m.Blobs = append(m.Blobs, fsm.BlobCommit{Key: k, Size: 100})
							d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Offset: 0, Length: 100, FirstSeq: seq, LastSeq: seq})
						}
						keys[slot] = keys[slot][3:]
						m.Delta = d
						add(fsm.CmdTaskAck, fsm.TaskAck{Job: job, Generation: 1, Epoch: epoch[j], Task: tk, Manifest: &m})
						acks++
					}
				}
			}
			flush()
			if err := h.f.Flush(); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			w1 := wchar()
			b.StopTimer()
			b.ReportMetric(float64(took.Nanoseconds())/float64(acks), "ns/ack")
			if w0 >= 0 && w1 >= 0 {
				b.ReportMetric(float64(w1-w0)/float64(acks), "pwriteB/ack")
			}
			st := h.f.CommitStats()
			b.ReportMetric(float64(st.Entries)/float64(max(1, st.Commits)), "entries/commit")
		})
	}
}
