package gc

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
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
	rep := &VerifyReport{Job: job, Index: idx, References: len(refs), Missing: []MissingBlob{}, Changed: []ChangedBlob{}, Errors: []VerifyError{}}
	byKey := map[string][]fsm.BlobRef{}
	var keys []string
	for _, r := range refs {
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	rep.Blobs = len(keys)

	var missing []string
	changed := map[string]blobstore.Info{}
	c.headAll(ctx, keys, func(k string, info blobstore.Info, err error) {
		switch {
		case err == nil:
			if c.changed(k, info) {
				changed[k] = info
			}
		case errors.Is(err, blobstore.ErrNotFound):
			missing = append(missing, k)
		case ctx.Err() == nil:
			rep.Errors = append(rep.Errors, VerifyError{Key: k, Error: err.Error()})
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, k := range missing {
		// A blob no longer referenced (its epochs subsumed and the blob
		// collected while Verify ran) is not lost.
		b, _, err := c.f.Blob(k)
		if errors.Is(err, wire.ErrNotFound) || (err == nil && (b.State != fsm.BlobLive || b.Refs == 0)) {
			continue
		}
		for _, r := range byKey[k] {
			rep.Missing = append(rep.Missing, MissingBlob{Job: job, Epoch: r.Epoch, Task: r.Task, Key: r.Key, Pinned: r.Pinned})
		}
	}
	for k, info := range changed {
		b, _, err := c.f.Blob(k)
		if err != nil || b.State != fsm.BlobLive || b.Refs == 0 {
			continue // collected while Verify ran
		}
		for _, r := range byKey[k] {
			cb := ChangedBlob{Job: job, Epoch: r.Epoch, Task: r.Task, Key: k, Pinned: r.Pinned, DeclaredSize: b.Size, Size: info.Size, ETag: info.ETag}
			if o := b.Observed; o != nil && !o.Missing {
				size := o.Size
				cb.ObservedSize, cb.ObservedETag = &size, o.ETag
			}
			rep.Changed = append(rep.Changed, cb)
		}
	}
	sort.Slice(rep.Changed, func(i, j int) bool {
		a, b := rep.Changed[i], rep.Changed[j]
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		return a.Key < b.Key
	})
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
	if len(rep.Changed) > 0 {
		c.log.Error("verify: referenced blobs are not the objects their acks committed", "job", job, "changed", len(rep.Changed), "first", rep.Changed[0].Key)
	}
	return rep, nil
}

// changed reports whether the object the store holds under key is not the
// one its ack committed: flagged when observed, or a size or ETag that
// differs from the observation (before one: a size that differs from the
// declared size).
func (c *Collector) changed(key string, info blobstore.Info) bool {
	b, _, err := c.f.Blob(key)
	if err != nil || b == nil {
		return false
	}
	if b.Flagged {
		return true
	}
	if o := b.Observed; o != nil && !o.Missing {
		return uint64(max(info.Size, 0)) != o.Size || (o.ETag != "" && info.ETag != o.ETag)
	}
	return uint64(max(info.Size, 0)) != b.Size
}
