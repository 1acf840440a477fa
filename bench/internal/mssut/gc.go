package mssut

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// gcRunTimeout bounds one POST /v1/gc/run: a cycle deletes every
// candidate past its grace, batch after batch.
const gcRunTimeout = 30 * time.Minute

// GC makes objects unreferenced blobs and measures the collector deleting
// them.
//
// Garbage: a job with one stateful incremental task (one retained
// checkpoint) uploads objects real objects of Options.GCObjectBytes
// through upload slots (presigned PUTs to the S3 server), acknowledges
// them 1,000 blobs per epoch, each blob one changelog segment, then
// acknowledges an epoch whose delta materializes an empty state
// truncating the whole changelog. Once that epoch completes the older one
// is subsumed and every blob's reference count is zero.
//
// Measurement: after the grace period (a dry run proposes them all), the
// collector is run with POST /v1/gc/run on the leader (one cycle deletes
// every candidate past its grace, batch after batch), again until the
// bucket holds nothing under the job's prefix. Seconds is that time,
// Deleted what the cycles report deleted; RaftEntries the growth of the
// leader's last log index over it (nothing else writes then: the periodic
// cycle is an hour away with the default Options.GCInterval);
// DeleteRequests the DeleteObjects requests the S3 server logged. Every
// blob is then checked to be recorded gone.
func (s *System) GC(ctx context.Context, objects int) (sut.GCResult, error) {
	var res sut.GCResult
	if objects <= 0 {
		return res, fmt.Errorf("mssut: GC of %d objects", objects)
	}
	c, err := s.client()
	if err != nil {
		return res, err
	}
	job := fmt.Sprintf("gc-%d", s.seq.Add(1))
	keys, err := s.makeGarbage(ctx, c, job, objects)
	if err != nil {
		return res, err
	}

	// Wait out the grace period: until a dry run would propose them all.
	unreferenced := time.Now()
	err = sut.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if time.Since(unreferenced) < s.opts.GCGrace {
			return false, nil
		}
		var rep gc.Report
		if err := s.onLeader(ctx, http.MethodPost, "/v1/gc/run?dry_run=true", nil, &rep, gcRunTimeout); err != nil {
			return false, err
		}
		return rep.MarksProposed >= objects || rep.Truncated, nil
	})
	if err != nil {
		return res, fmt.Errorf("mssut: GC: waiting for the garbage to pass its grace period: %w", err)
	}

	s3Before, err := s.s3Sync(ctx)
	if err != nil {
		return res, err
	}
	first, err := s.leaderStatus(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	deleted := 0
	for {
		var rep gc.Report
		if err := s.onLeader(ctx, http.MethodPost, "/v1/gc/run", nil, &rep, gcRunTimeout); err != nil {
			return res, fmt.Errorf("mssut: GC: run the collector: %w", err)
		}
		if rep.Error != "" {
			return res, fmt.Errorf("mssut: GC: the collector's cycle failed: %s", rep.Error)
		}
		deleted += rep.Deleted
		left, err := s.bucketCount(ctx, MetastorePrefix+"/"+job+"/")
		if err != nil {
			return res, err
		}
		if left == 0 {
			break
		}
		if rep.Deleted == 0 {
			// Nothing was due yet: wait a moment rather than spin.
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("mssut: GC: %d objects of %s still in the bucket: %w", left, job, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	elapsed := time.Since(start)
	last, err := s.leaderStatus(ctx)
	if err != nil {
		return res, err
	}
	s3After, err := s.s3Sync(ctx)
	if err != nil {
		return res, err
	}
	if err := s.checkGone(ctx, keys); err != nil {
		return res, err
	}

	if deleted == 0 {
		return res, fmt.Errorf("mssut: GC: the timed cycles deleted nothing (a periodic cycle collected the garbage first: is Options.GCInterval short?)")
	}
	res.Deleted = deleted
	res.Seconds = elapsed.Seconds()
	res.PerSecond = float64(deleted) / elapsed.Seconds()
	res.RaftEntries = last.LastLogIndex - first.LastLogIndex
	res.EntriesPer1000 = float64(res.RaftEntries) * 1000 / float64(deleted)
	res.DeleteRequests = int(s3After.sub(s3Before).DeleteObjects)
	return res, nil
}

// makeGarbage creates the GC workload's job and leaves objects uploaded
// blobs unreferenced; it returns their keys.
func (s *System) makeGarbage(ctx context.Context, c *client.Client, job string, objects int) ([]string, error) {
	const task = "t0"
	if _, err := c.PutJob(ctx, job, wire.JobConfig{Retained: 1}); err != nil {
		return nil, fmt.Errorf("mssut: GC: create job %s: %w", job, err)
	}
	att, err := c.StartAttempt(ctx, job, "gc", []wire.Task{{ID: task, Caps: statefulCaps}})
	if err != nil {
		return nil, fmt.Errorf("mssut: GC: start attempt of %s: %w", job, err)
	}
	gen := att.Generation
	size := uint64(s.opts.GCObjectBytes)
	body := bytes.Repeat([]byte("changelog-record;"), int(size)/17+1)[:size]
	var keys []string
	var seq uint64
	epoch := uint64(1)
	for len(keys) < objects {
		n := min(objects-len(keys), wire.MaxIntents)
		slots, err := uploadSlots(ctx, c, job, gen, task, n)
		if err != nil {
			return nil, err
		}
		if err := s.uploadAll(ctx, c, slots, body); err != nil {
			return nil, fmt.Errorf("mssut: GC: %w", err)
		}
		m := &wire.ManifestAck{Delta: &manifests.Delta{}}
		for _, sl := range slots {
			m.Blobs = append(m.Blobs, wire.BlobCommit{Key: sl.Key, Size: size})
			m.Delta.AddSegments = append(m.Delta.AddSegments, manifests.Segment{Key: sl.Key, Length: size, FirstSeq: seq + 1, LastSeq: seq + 10})
			seq += 10
			keys = append(keys, sl.Key)
		}
		if err := ackEpoch(ctx, c, job, gen, epoch, task, client.AckRequest{Manifest: m}); err != nil {
			return nil, fmt.Errorf("mssut: GC: %w", err)
		}
		epoch++
	}
	truncate := &wire.ManifestAck{Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{}, TruncateBefore: seq + 1}}}
	if err := ackEpoch(ctx, c, job, gen, epoch, task, client.AckRequest{Manifest: truncate}); err != nil {
		return nil, fmt.Errorf("mssut: GC: truncating the changelog: %w", err)
	}
	return keys, nil
}

// ackEpoch begins epoch and acknowledges it for its only task, which
// completes it. The epoch's state says so, not the answer's
// completed_by_this_ack: an ack the client sent again (its first answer
// lost to a timeout) is answered as a retry, false, though its first
// delivery completed the epoch.
func ackEpoch(ctx context.Context, c *client.Client, job string, gen, epoch uint64, task string, ack client.AckRequest) error {
	if _, err := c.BeginEpoch(ctx, job, gen, epoch); err != nil {
		return fmt.Errorf("begin epoch %d of %s: %w", epoch, job, err)
	}
	res, err := c.Ack(ctx, job, gen, epoch, task, ack)
	if err != nil {
		return fmt.Errorf("ack of epoch %d of %s/%s: %w", epoch, job, task, err)
	}
	if res.Epoch == nil || res.Epoch.State != wire.EpochCompleted {
		return fmt.Errorf("epoch %d of %s did not complete with its only task's ack (answered %+v)", epoch, job, res.Epoch)
	}
	return nil
}

// uploadAll uploads body to every slot, Options.Concurrency at a time.
func (s *System) uploadAll(ctx context.Context, c *client.Client, slots []client.UploadSlot, body []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan client.UploadSlot)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range s.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sl := range work {
				if err := c.PutObject(ctx, sl, bytes.NewReader(body), int64(len(body))); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("upload %s: %w", sl.Key, err)
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for _, sl := range slots {
		select {
		case work <- sl:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// leaderStatus is the status of the current leader.
func (s *System) leaderStatus(ctx context.Context) (*memberStatus, error) {
	p, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	return s.status(ctx, p)
}

// bucketCount counts the objects under prefix in the bucket.
func (s *System) bucketCount(ctx context.Context, prefix string) (int, error) {
	n := 0
	err := s.bucket.List(ctx, prefix, func(blobstore.Info) error { n++; return nil })
	if err != nil {
		return 0, fmt.Errorf("mssut: list %s in the bucket: %w", prefix, err)
	}
	return n, nil
}

// checkGone checks that the leader records every key gone.
func (s *System) checkGone(ctx context.Context, keys []string) error {
	p, err := s.leader(ctx)
	if err != nil {
		return err
	}
	return s.parallel(ctx, len(keys), func(ctx context.Context, i int) error {
		var b wire.Blob
		if err := s.send(ctx, p.url(), http.MethodGet, "/v1/blobs/"+keys[i], nil, 0, &b, defaultStatusRequestTimeout); err != nil {
			return fmt.Errorf("mssut: blob %s: %w", keys[i], err)
		}
		if b.State != wire.BlobGone {
			return fmt.Errorf("mssut: blob %s is %s after the collector ran, not gone", keys[i], b.State)
		}
		return nil
	})
}

// parallel calls fn for 0..n-1, Options.Concurrency at a time, and
// returns the first error (which stops the calls not yet made).
func (s *System) parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, s.opts.Concurrency)
	var wg sync.WaitGroup
	for range min(s.opts.Concurrency, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					select {
					case errs <- err:
					default:
					}
					cancel()
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return ctx.Err()
}

// s3Sync returns the S3 server's request counts once every request
// answered before the call is in them: it sends a HEAD of a marker key
// and waits until the server's log shows it (the log is written in the
// order requests arrive, and reading it runs behind).
func (s *System) s3Sync(ctx context.Context) (s3Stats, error) {
	key := fmt.Sprintf("%s%d", markerPrefix, s.seq.Add(1))
	seen := s.s3.awaitMarker(key)
	defer s.s3.dropMarker(key)
	if _, err := s.bucket.Head(ctx, key); err != nil && !errors.Is(err, blobstore.ErrNotFound) {
		return s3Stats{}, fmt.Errorf("mssut: marker request to the S3 server: %w", err)
	}
	select {
	case <-seen:
		return s.s3.counts(), nil
	case <-ctx.Done():
		return s3Stats{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return s3Stats{}, fmt.Errorf("mssut: the S3 server's log did not show the marker request %s within 30s", key)
	}
}
