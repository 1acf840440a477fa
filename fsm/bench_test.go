package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// deltaBench is one task whose manifest holds a given number of segments,
// acknowledging epochs with 3-segment deltas.
type deltaBench struct {
	h     *harness
	epoch uint64
	seq   uint64
}

func newDeltaBench(b *testing.B, segments int) *deltaBench {
	h := newHarness(b)
	h.putJob("bench", wire.JobConfig{Retained: 1})
	h.start("bench", "a1", task(b, "t", "state", "incremental"))
	d := &deltaBench{h: h}
	// Build the manifest over as many epochs as the delta limit needs.
	for added := 0; added < segments; {
		n := min(segments-added, manifests.MaxDeltaRefs)
		key := fmt.Sprintf("bench/t/big-%d", added)
		var delta manifests.Delta
		for i := 0; i < n; i++ {
			d.seq++
			delta.AddSegments = append(delta.AddSegments, manifests.Segment{Key: key, Offset: uint64(i) * 100, Length: 100, FirstSeq: d.seq, LastSeq: d.seq})
		}
		d.ack(b, key, uint64(n)*100, delta)
		added += n
	}
	return d
}

// ack begins the next epoch and commits delta referencing key; it returns
// the log bytes and apply time of the ack alone.
func (d *deltaBench) ack(tb testing.TB, key string, size uint64, delta manifests.Delta) (int, time.Duration) {
	h := d.h
	d.epoch++
	h.begin("bench", 1, d.epoch)
	h.intents("bench", 1, key)
	data := h.encode(fsm.CmdTaskAck, fsm.TaskAck{Job: "bench", Generation: 1, Epoch: d.epoch, Task: "t",
		Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: size}}, Delta: &delta}})
	l := h.nextLog(data)
	start := time.Now()
	resp := h.f.ApplyBatch([]*raft.Log{l})[0]
	took := time.Since(start)
	res, ok := resp.(*fsm.Result)
	if !ok || res.Err != nil {
		tb.Fatalf("ack epoch %d: %v", d.epoch, resp)
	}
	if !res.Value.(*wire.AckResult).Completed {
		tb.Fatalf("ack epoch %d did not complete it", d.epoch)
	}
	return len(data), took
}

func (d *deltaBench) threeSegments(tb testing.TB) (int, time.Duration) {
	key := fmt.Sprintf("bench/t/log-%d", d.epoch+1)
	var delta manifests.Delta
	for i := 0; i < 3; i++ {
		d.seq++
		delta.AddSegments = append(delta.AddSegments, manifests.Segment{Key: key, Offset: uint64(i) * 100, Length: 100, FirstSeq: d.seq, LastSeq: d.seq})
	}
	return d.ack(tb, key, 300, delta)
}

// BenchmarkAckDelta commits 3-segment deltas against manifests of 1,000 and
// of 100,000 segments, alternating between the two in one run, and reports
// the Raft log bytes and apply time of one ack for each size and their
// ratio (the goal is a ratio near 1: the cost is the delta's).
//
//	go test -run '^$' -bench BenchmarkAckDelta -benchtime 2000x ./fsm/
func BenchmarkAckDelta(b *testing.B) {
	small := newDeltaBench(b, 1_000)
	large := newDeltaBench(b, 100_000)
	var smallBytes, largeBytes int
	var smallTime, largeTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, d := small.threeSegments(b)
		smallBytes += n
		smallTime += d
		n, d = large.threeSegments(b)
		largeBytes += n
		largeTime += d
	}
	b.StopTimer()
	perAck := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perAck(smallTime), "ns/ack-1k")
	b.ReportMetric(perAck(largeTime), "ns/ack-100k")
	b.ReportMetric(float64(smallBytes)/float64(b.N), "logB/ack-1k")
	b.ReportMetric(float64(largeBytes)/float64(b.N), "logB/ack-100k")
	b.ReportMetric(perAck(largeTime)/perAck(smallTime), "time-ratio")
	b.ReportMetric(float64(largeBytes)/float64(smallBytes), "bytes-ratio")
	b.Logf("apply %0.f ns vs %0.f ns per ack (ratio %.2f); log %d vs %d bytes per ack (ratio %.2f)",
		perAck(smallTime), perAck(largeTime), perAck(largeTime)/perAck(smallTime),
		smallBytes/b.N, largeBytes/b.N, float64(largeBytes)/float64(smallBytes))
}
