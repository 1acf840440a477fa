package gc

import (
	"context"
	"errors"
	"fmt"
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
			if b, _, err := c.f.Blob(k); err == nil && len(mismatches(b, info)) > 0 {
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
		if errors.Is(err, wire.ErrNotFound) || (err == nil && (b.State != wire.BlobLive || b.Refs == 0)) {
			continue
		}
		for _, r := range byKey[k] {
			rep.Missing = append(rep.Missing, MissingBlob{Job: job, Epoch: r.Epoch, Task: r.Task, Key: r.Key, Pinned: r.Pinned})
		}
	}
	for k, info := range changed {
		b, _, err := c.f.Blob(k)
		if err != nil || b.State != wire.BlobLive || b.Refs == 0 {
			continue // collected while Verify ran
		}
		why := mismatches(b, info)
		if len(why) == 0 {
			continue
		}
		for _, r := range byKey[k] {
			cb := ChangedBlob{Job: job, Epoch: r.Epoch, Task: r.Task, Key: k, Pinned: r.Pinned, DeclaredSize: b.Size, Size: info.Size, ETag: info.ETag, Mismatches: why}
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

// mismatches names every way the object the store holds under a blob's key
// is not the one its ack committed: the size now against the size observed
// right after the ack (before that observation: the declared size), the
// ETag now against the observed one, and a mismatch the observation itself
// found (flagged). None: the object is the committed one, as far as the
// store's answer tells. The blob-level checksum an ack declares is
// free-form and not compared.
func mismatches(b *wire.Blob, info blobstore.Info) []string {
	if b == nil {
		return nil
	}
	var out []string
	size := uint64(max(info.Size, 0))
	o := b.Observed
	if b.Flagged && o != nil {
		switch {
		case o.Missing:
			out = append(out, "the object was missing when the leader observed it after the ack")
		case o.Size != b.Size:
			out = append(out, fmt.Sprintf("size observed after the ack %d bytes, ack declared %d", o.Size, b.Size))
		}
	}
	switch {
	case o != nil && !o.Missing:
		if size != o.Size {
			out = append(out, fmt.Sprintf("size now %d bytes, observed after the ack %d", size, o.Size))
		}
		if o.ETag != "" && info.ETag != o.ETag {
			out = append(out, fmt.Sprintf("ETag now %q, observed after the ack %q", info.ETag, o.ETag))
		}
	case size != b.Size:
		out = append(out, fmt.Sprintf("size now %d bytes, ack declared %d", size, b.Size))
	}
	if b.Flagged && len(out) == 0 {
		out = append(out, "flagged by the observation after the ack")
	}
	return out
}
