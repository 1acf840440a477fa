package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
)

// The leader looks at every new blob shortly after the ack that committed
// it (never on the ack's path: real S3 answers a HEAD in tens of
// milliseconds): it reads the object's size and ETag and proposes them
// (blobs-observed), which flags a blob whose object does not match the
// declared size, or is missing. A blob rewritten later (a replayed upload
// URL on a store without conditional writes) keeps the observed ETag in its
// record, which Verify compares against.
//
// The observer gathers new blobs rather than running after every ack: an
// ack wakes it, and its pass starts ObserveDelay later, or as soon as acks
// have reported ObservePass new blobs, whichever comes first. A pass reads
// the object store once for all its blobs (a listing per directory and
// time window, a HEAD for the others, VerifyConcurrency at a time) and
// proposes one blobs-observed entry per ObserveBatch of them, so under
// load an entry, applied on every member, carries many blobs instead of
// the few of one ack, and a directory is listed once per pass rather than
// once per entry.

// ObserveReport is the result of one Observe pass.
type ObserveReport struct {
	// Observed counts the blobs recorded, Flagged those of them that did
	// not match; Errors the HEAD requests that failed (retried later).
	Observed int `json:"observed"`
	Flagged  int `json:"flagged"`
	Errors   int `json:"errors"`
}

// ObserveSoon tells the leader's observer that an ack committed n new
// blobs (the API calls it after such an ack): the observer's next pass
// starts ObserveDelay after the first call since its last pass, or at once
// when the calls since then add up to ObservePass blobs. It never blocks.
func (c *Collector) ObserveSoon(n int) {
	if c.observePending.Add(int64(n)) >= int64(c.cfg.ObservePass) {
		select {
		case c.observeFull <- struct{}{}:
		default:
		}
	}
	select {
	case c.observeWake <- struct{}{}:
	default:
	}
}

// Observe reads what the object store holds for the blobs the state
// machine lists as unobserved, ObservePass at a time, and proposes it in
// blobs-observed entries of ObserveBatch blobs, until a pass is not full
// (blobs acked meanwhile wait for the next), or could not be checked at
// all.
func (c *Collector) Observe(ctx context.Context) (ObserveReport, error) {
	var rep ObserveReport
	for {
		keys, err := c.f.Unobserved(c.cfg.ObservePass)
		if err != nil || len(keys) == 0 {
			return rep, err
		}
		obs, failed := c.head(ctx, keys)
		rep.Errors += failed
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if len(obs) == 0 {
			return rep, fmt.Errorf("gc: observe: no HEAD of %d new blobs succeeded", len(keys))
		}
		for batch := range slices.Chunk(obs, c.cfg.ObserveBatch) {
			if err := c.proposeObserved(ctx, batch, &rep); err != nil {
				return rep, err
			}
		}
		if failed > 0 || len(keys) < c.cfg.ObservePass {
			return rep, nil // the rest waits for the next pass
		}
	}
}

// proposeObserved proposes one blobs-observed entry for obs and counts
// what it recorded in rep.
func (c *Collector) proposeObserved(ctx context.Context, obs []fsm.BlobObservation, rep *ObserveReport) error {
	v, index, err := c.propose(ctx, fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: obs})
	if err != nil {
		return err
	}
	out, ok := v.(*fsm.ObservedResult)
	if !ok {
		return fmt.Errorf("gc: blobs-observed at index %d answered %T", index, v)
	}
	rep.Observed += len(out.Observed)
	rep.Flagged += len(out.Flagged)
	c.m.observed.Add(float64(len(out.Observed)))
	c.m.flagged.Add(float64(len(out.Flagged)))
	c.logFlagged(obs, out)
	return nil
}

// flaggedLogged is how many flagged blobs one pass logs one by one; the
// rest are counted in one line (a worker that acks without uploading
// would otherwise write a line per blob, and each used to read its record
// back).
const flaggedLogged = 10

// logFlagged logs the blobs the state machine flagged in one
// blobs-observed entry, from what was observed and what the acks
// declared.
func (c *Collector) logFlagged(obs []fsm.BlobObservation, out *fsm.ObservedResult) {
	if len(out.Flagged) == 0 {
		return
	}
	seen := make(map[string]fsm.BlobObservation, len(obs))
	for _, o := range obs {
		seen[o.Key] = o
	}
	for i, k := range out.Flagged[:min(len(out.Flagged), flaggedLogged)] {
		o := seen[k]
		c.log.Error("new blob does not match its ack", "key", k, "declared_size", out.Declared[i], "observed_size", o.Size, "missing", o.Missing)
	}
	if n := len(out.Flagged) - flaggedLogged; n > 0 {
		c.log.Error("more new blobs do not match their acks", "count", n, "metric", "metastore_blobs_flagged_total")
	}
}

// head reads what the object store holds under keys: an observation for
// each key the store answered (found or missing), and the count of keys
// it could not check. On a store that lists by name prefix (S3), keys
// made by blobstore.NewKey in one directory within a listing window share
// one listing (listGroups); the others, and the keys of a listing that
// matched too many objects, are HEADed. Listings and HEADs run
// VerifyConcurrency at a time.
func (c *Collector) head(ctx context.Context, keys []string) ([]fsm.BlobObservation, int) {
	var (
		out     []fsm.BlobObservation
		failed  int
		tooLong []string
	)
	found := func(k string, info blobstore.Info) {
		out = append(out, fsm.BlobObservation{Key: k, Size: uint64(max(info.Size, 0)), ETag: info.ETag})
	}
	missing := func(k string) { out = append(out, fsm.BlobObservation{Key: k, Missing: true}) }
	heads := keys
	var lists []listGroup
	nl, listable := c.store.(blobstore.NameLister)
	if listable {
		lists, heads = listGroups(keys)
	}
	var work []func() func()
	for _, g := range lists {
		work = append(work, func() func() {
			seen, err := listObserved(ctx, nl, g)
			return func() {
				if errors.Is(err, errListTooLong) {
					tooLong = append(tooLong, g.keys...)
					return
				}
				if err != nil {
					// Unobserved still: the next pass tries again.
					failed += len(g.keys)
					return
				}
				for _, k := range g.keys {
					if info, ok := seen[k]; ok {
						found(k, info)
					} else {
						missing(k)
					}
				}
			}
		})
	}
	headed := func(k string, info blobstore.Info, err error) {
		switch {
		case err == nil:
			found(k, info)
		case errors.Is(err, blobstore.ErrNotFound):
			missing(k)
		default:
			failed++
		}
	}
	for _, k := range heads {
		work = append(work, func() func() {
			info, err := c.store.Head(ctx, k)
			return func() { headed(k, info, err) }
		})
	}
	runConcurrently(ctx, work)
	// The keys of a window too long to list are HEADed instead; listed
	// again, they would fail again in every pass.
	c.headAll(ctx, tooLong, headed)
	return out, failed
}

// listGroup is the keys one listing observes.
type listGroup struct {
	prefix string
	keys   []string
}

// listGroups sorts keys into listings, one per directory and time window
// of blobstore.NewKey that holds two keys or more (blobstore.TimeWindow),
// and the keys left to HEAD (others' names, and a window's only key).
func listGroups(keys []string) ([]listGroup, []string) {
	var heads []string
	byPrefix := map[string][]string{}
	var order []string
	for _, k := range keys {
		p, ok := blobstore.TimeWindow(k)
		if !ok {
			heads = append(heads, k)
			continue
		}
		if byPrefix[p] == nil {
			order = append(order, p)
		}
		byPrefix[p] = append(byPrefix[p], k)
	}
	var lists []listGroup
	for _, p := range order {
		if ks := byPrefix[p]; len(ks) >= 2 {
			lists = append(lists, listGroup{prefix: p, keys: ks})
		} else {
			heads = append(heads, ks...)
		}
	}
	return lists, heads
}

// errListTooLong ends a listing that matches far more objects than the
// keys it observes (a directory with a burst of uploads nobody acked): its
// keys are HEADed instead, in the same pass.
var errListTooLong = errors.New("gc: observe: listing matches too many objects")

// listObserved lists g's prefix and returns what it found of g's keys.
func listObserved(ctx context.Context, nl blobstore.NameLister, g listGroup) (map[string]blobstore.Info, error) {
	want := make(map[string]bool, len(g.keys))
	for _, k := range g.keys {
		want[k] = true
	}
	seen := make(map[string]blobstore.Info, len(g.keys))
	limit, n := 10*len(g.keys)+1000, 0
	err := nl.ListNames(ctx, g.prefix, func(info blobstore.Info) error {
		if n++; n > limit {
			return errListTooLong
		}
		if want[info.Key] {
			seen[info.Key] = info
		}
		return nil
	})
	return seen, err
}

// runConcurrently runs work VerifyConcurrency at a time until ctx ends;
// each item returns a function that records its result, called one at a
// time.
func runConcurrently(ctx context.Context, work []func() func()) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	ch := make(chan func() func())
	for range min(VerifyConcurrency, len(work)) {
		wg.Go(func() {
			for w := range ch {
				record := w()
				mu.Lock()
				record()
				mu.Unlock()
			}
		})
	}
send:
	for _, w := range work {
		select {
		case ch <- w:
		case <-ctx.Done():
			break send
		}
	}
	close(ch)
	wg.Wait()
}

// headAll HEADs keys, VerifyConcurrency at a time, until ctx ends, and
// hands each answer to fn, one call at a time.
func (c *Collector) headAll(ctx context.Context, keys []string, fn func(key string, info blobstore.Info, err error)) {
	work := make([]func() func(), 0, len(keys))
	for _, k := range keys {
		work = append(work, func() func() {
			info, err := c.store.Head(ctx, k)
			return func() { fn(k, info, err) }
		})
	}
	runConcurrently(ctx, work)
}

// observeLoop is the observer's part of the leader task: a pass at once
// (blobs a previous leader did not get to), then one after acks reported
// new blobs (ObserveDelay after the first, or once ObservePass wait), and
// one every Interval in case a pass failed.
func (c *Collector) observeLoop(ctx context.Context, tick <-chan struct{}) {
	for {
		// Blobs acked from here on are read by this pass or counted
		// for the next.
		c.observePending.Store(0)
		select {
		case <-c.observeFull:
		default:
		}
		rep, err := c.Observe(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("observing new blobs failed; retrying later", "err", err, "observed", rep.Observed)
		}
		if h := c.hooks.afterObserve; h != nil {
			h(rep, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.observeWake:
			c.gather(ctx)
		case <-tick:
		}
	}
}

// gather waits, after an ack woke the observer, until ObserveDelay has
// passed or ObservePass new blobs wait, or ctx ends.
func (c *Collector) gather(ctx context.Context) {
	pending := c.observePending.Load()
	if pending >= int64(c.cfg.ObservePass) {
		return
	}
	if h := c.hooks.gathering; h != nil {
		h(pending)
	}
	t := time.NewTimer(c.cfg.ObserveDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-c.observeFull:
	}
}
