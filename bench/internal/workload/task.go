package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

// Segment shape of the acks the workloads make: every segment is a whole
// blob of segmentBytes holding segmentRecords changelog records.
const (
	segmentBytes   = 64 << 10
	segmentRecords = 100
	// firstSeq is the first sequence number a worker's segments use, above
	// those of any preloaded manifest.
	firstSeq = 1 << 40
)

// sample is one timed call: when it ended, measured from the start of its
// run, and how long it took.
type sample struct {
	end  time.Duration
	took time.Duration
}

// worker is one task's side of the checkpoint cycle: it holds the blob
// keys fetched from the system and makes each ack's delta. It is used by
// one goroutine at a time.
type worker struct {
	sys       sut.System
	job, task string
	batch     int
	start     time.Time // origin of the recorded samples

	keys  []string
	seq   uint64
	calls []sample // Keys calls
}

func newWorker(sys sut.System, job, task string, batch int, start time.Time) *worker {
	return &worker{sys: sys, job: job, task: task, batch: batch, start: start, seq: firstSeq}
}

// delta returns n segments for the task's next ack, each in a fresh blob
// key. Keys are fetched from the system in batches when the worker has too
// few left.
func (w *worker) delta(ctx context.Context, n int) ([]sut.Segment, error) {
	for len(w.keys) < n {
		t0 := time.Now()
		keys, err := w.sys.Keys(ctx, w.job, w.task, max(w.batch, n))
		end := time.Now()
		if err != nil {
			return nil, fmt.Errorf("keys for %s/%s: %w", w.job, w.task, err)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("keys for %s/%s: the system returned none", w.job, w.task)
		}
		w.calls = append(w.calls, sample{end: end.Sub(w.start), took: end.Sub(t0)})
		w.keys = append(w.keys, keys...)
	}
	segs := make([]sut.Segment, n)
	for i := range segs {
		segs[i] = sut.Segment{
			Key:      w.keys[i],
			Offset:   0,
			Length:   segmentBytes,
			FirstSeq: w.seq,
			LastSeq:  w.seq + segmentRecords - 1,
		}
		w.seq += segmentRecords
	}
	w.keys = w.keys[n:]
	return segs, nil
}
