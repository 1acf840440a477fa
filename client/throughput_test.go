package client_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// BenchmarkAckThroughput drives a three-member in-process cluster the way
// stream workers do: 16 jobs of 4 tasks, each task acking every epoch with
// a 3-segment delta, a job's next epoch begun once its 4 tasks acked. It
// reports acks per second and the p50/p99 ack latency; the full comparison
// with other stores, with real processes, is the bench module's.
//
// The sub-benchmarks compare group commit (commands proposed while Raft
// writes an entry share the next) with one entry per command.
func BenchmarkAckThroughput(b *testing.B) {
	for _, batch := range []int{1, 256} {
		b.Run(fmt.Sprintf("apply-batch=%d", batch), func(b *testing.B) {
			benchAckThroughput(b, func(c *config.Config) { c.ApplyBatch = batch })
		})
	}
}

func benchAckThroughput(b *testing.B, tweak func(*config.Config)) {
	const jobs, tasksPerJob = 16, 4
	ms := testmember.StartClusterWith(b, 3, tweak)
	var urls []string
	for _, m := range ms {
		urls = append(urls, m.URL)
	}
	c, err := client.New(client.Config{Endpoints: urls, RequestTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	caps, err := wire.ParseCaps([]string{"state", "incremental"})
	if err != nil {
		b.Fatal(err)
	}
	type job struct {
		name string
		gen  uint64
	}
	js := make([]job, jobs)
	for j := range js {
		js[j].name = fmt.Sprintf("tp%d", j)
		if _, err := c.PutJob(ctx, js[j].name, wire.JobConfig{Retained: 2}); err != nil {
			b.Fatal(err)
		}
		var tasks []wire.Task
		for t := range tasksPerJob {
			tasks = append(tasks, wire.Task{ID: fmt.Sprintf("t%d", t), Caps: caps})
		}
		a, err := c.StartAttempt(ctx, js[j].name, "a1", tasks)
		if err != nil {
			b.Fatal(err)
		}
		js[j].gen = a.Generation
	}
	var (
		remaining atomic.Int64
		mu        sync.Mutex
		lat       []time.Duration
		wg        sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for _, jb := range js {
		wg.Go(func() {
			var keys [tasksPerJob][]string
			var seq [tasksPerJob]uint64
			for epoch := uint64(1); remaining.Load() > 0; epoch++ {
				if _, err := c.BeginEpoch(ctx, jb.name, jb.gen, epoch); err != nil {
					b.Error(err)
					return
				}
				var ew sync.WaitGroup
				for t := range tasksPerJob {
					ew.Go(func() {
						task := fmt.Sprintf("t%d", t)
						if len(keys[t]) == 0 {
							slots, err := c.UploadSlots(ctx, jb.name, jb.gen, task, 100)
							if err != nil {
								b.Error(err)
								return
							}
							for _, s := range slots {
								keys[t] = append(keys[t], s.Key)
							}
						}
						key := keys[t][0]
						keys[t] = keys[t][1:]
						d := manifests.Delta{}
						for i := range uint64(3) {
							seq[t]++
							d.AddSegments = append(d.AddSegments, manifests.Segment{Key: key, Offset: i * 100, Length: 100, FirstSeq: seq[t], LastSeq: seq[t]})
						}
						ack := client.AckRequest{Manifest: &wire.ManifestAck{Blobs: []wire.BlobCommit{{Key: key, Size: 300}}, Delta: &d}}
						t0 := time.Now()
						if _, err := c.Ack(ctx, jb.name, jb.gen, epoch, task, ack); err != nil {
							b.Error(err)
							return
						}
						el := time.Since(t0)
						remaining.Add(-1)
						mu.Lock()
						lat = append(lat, el)
						mu.Unlock()
					})
				}
				ew.Wait()
				if b.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "acks/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
