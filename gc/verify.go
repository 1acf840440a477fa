package gc

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
)

// Verify checks with a HEAD request (VerifyConcurrency at a time) that the
// object store holds every blob referenced by the job's retained and pinned
// epochs. It reads the references after confirming leadership, so a blob
// collected legitimately is not reported; a blob that the state machine
// stopped referencing while Verify ran is not reported either.
func (c *Collector) Verify(ctx context.Context, job string) (*VerifyReport, error) {
	start := time.Now()
	if err := c.verify(ctx); err != nil {
		return nil, err
	}
	refs, idx, err := c.f.ReferencedBlobs(job)
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Job: job, Index: idx, References: len(refs), Missing: []MissingBlob{}, Errors: []VerifyError{}}
	byKey := map[string][]fsm.BlobRef{}
	var keys []string
	for _, r := range refs {
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	rep.Blobs = len(keys)

	var (
		mu      sync.Mutex
		missing []string
		wg      sync.WaitGroup
	)
	work := make(chan string)
	for range min(VerifyConcurrency, len(keys)) {
		wg.Go(func() {
			for k := range work {
				_, err := c.store.Head(ctx, k)
				if err == nil {
					continue
				}
				mu.Lock()
				if errors.Is(err, blobstore.ErrNotFound) {
					missing = append(missing, k)
				} else if ctx.Err() == nil {
					rep.Errors = append(rep.Errors, VerifyError{Key: k, Error: err.Error()})
				}
				mu.Unlock()
			}
		})
	}
send:
	for _, k := range keys {
		select {
		case work <- k:
		case <-ctx.Done():
			break send
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, k := range missing {
		// A blob no longer referenced (its epochs subsumed and the blob
		// collected while Verify ran) is not lost.
		b, _, err := c.f.Blob(k)
		if errors.Is(err, fsm.ErrNotFound) || (err == nil && (b.State != fsm.BlobLive || b.Refs == 0)) {
			continue
		}
		for _, r := range byKey[k] {
			rep.Missing = append(rep.Missing, MissingBlob{Job: job, Epoch: r.Epoch, Task: r.Task, Key: r.Key, Pinned: r.Pinned})
		}
	}
	sort.Slice(rep.Missing, func(i, j int) bool {
		a, b := rep.Missing[i], rep.Missing[j]
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		return a.Key < b.Key
	})
	sort.Slice(rep.Errors, func(i, j int) bool { return rep.Errors[i].Key < rep.Errors[j].Key })
	rep.Duration = fsm.Duration(time.Since(start))
	if len(rep.Missing) > 0 {
		c.log.Error("verify: referenced blobs are missing from the object store", "job", job, "missing", len(rep.Missing), "first", rep.Missing[0].Key)
	}
	return rep, nil
}
