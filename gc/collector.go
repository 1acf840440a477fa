package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Bounds of the lists the collector holds in memory.
const (
	// StatusCountLimit is where Status stops counting candidates and
	// deleting blobs.
	StatusCountLimit = 100000
	// DryRunLimit bounds the keys a dry run reads from each index.
	DryRunLimit = 100000
	// DryRunSample is the number of keys a dry-run report lists.
	DryRunSample = 1000
	// MaxOrphansPerSweep bounds the orphans one sweep collects; the rest
	// wait for the next sweep.
	MaxOrphansPerSweep = 100000
)

// farFuture is a time after every time index entry.
var farFuture = time.Unix(0, math.MaxInt64)

// Collector is the leader-only garbage collector of object-store blobs. See
// the package documentation for the protocol.
type Collector struct {
	cfg          Config
	f            *fsm.FSM
	store        blobstore.Store
	proposeCmd   func(ctx context.Context, t fsm.CommandType, payload any) (any, uint64, error)
	verifyLeader func(ctx context.Context) error
	log          *slog.Logger
	now          func() time.Time
	m            *metrics

	// limiter paces deletions (nil: unlimited); deleteChunk is the most
	// keys per object-store Delete call.
	limiter     *rate.Limiter
	deleteChunk int

	// sem holds the one cycle that may run at a time.
	sem chan struct{}
	// observeWake wakes the observer after an ack, observeFull when
	// observePending, the new blobs acks reported since its last pass
	// began, reaches ObservePass (observe.go).
	observeWake    chan struct{}
	observeFull    chan struct{}
	observePending atomic.Int64
	running        atomic.Bool
	leading        atomic.Int32

	mu        sync.Mutex
	last      *Report
	recent    []RunSample // oldest first, at most RecentRuns
	totals    Totals
	lastSweep time.Time // clock of the last orphan sweep (zero: never)
	// sweepRetryAt is when an orphan sweep that did not finish (its
	// listing or a delete failed) is tried again, before OrphanEvery
	// (zero: none pending); sweepFailures counts such sweeps in a row.
	sweepRetryAt  time.Time
	sweepFailures int

	hooks hooks
}

// hooks let the package's tests observe the collector without sleeping.
type hooks struct {
	// afterCycle is called after every cycle of Run (the starting resume
	// pass included).
	afterCycle func(*Report, error)
	// afterObserve is called after every pass of Run's observer,
	// gathering when it starts gathering new blobs, with the count
	// acks reported so far.
	afterObserve func(ObserveReport, error)
	gathering    func(pending int64)
}

// New returns a collector. It registers its metrics on d.Registerer, if set;
// Close unregisters them.
func New(cfg Config, d Deps) (*Collector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case d.FSM == nil:
		return nil, errors.New("gc: Deps.FSM is required")
	case d.Store == nil:
		return nil, errors.New("gc: Deps.Store is required")
	case d.Propose == nil:
		return nil, errors.New("gc: Deps.Propose is required")
	case d.Now == nil:
		return nil, errors.New("gc: Deps.Now is required")
	case d.VerifyLeader == nil:
		return nil, errors.New("gc: Deps.VerifyLeader is required")
	}
	c := &Collector{
		cfg:          cfg,
		f:            d.FSM,
		store:        d.Store,
		proposeCmd:   d.Propose,
		verifyLeader: d.VerifyLeader,
		log:          d.Logger,
		now:          d.Now,
		deleteChunk:  cfg.BatchSize,
		sem:          make(chan struct{}, 1),
		observeWake:  make(chan struct{}, 1),
		observeFull:  make(chan struct{}, 1),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("component", "gc")
	if cfg.Rate > 0 {
		// Spread deletions: a call carries at most one second's worth.
		c.deleteChunk = max(1, min(cfg.BatchSize, int(cfg.Rate)))
		c.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), c.deleteChunk)
	}
	c.totals.Since = c.now()
	if c.m, err = newMetrics(d.Registerer); err != nil {
		return nil, fmt.Errorf("gc: register metrics: %w", err)
	}
	return c, nil
}

// Close unregisters the collector's metrics.
func (c *Collector) Close() { c.m.unregister() }

// Config returns the configuration in force (defaults filled).
func (c *Collector) Config() Config { return c.cfg }

// acquire waits for the right to run a cycle.
func (c *Collector) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Collector) release() { <-c.sem }

// Run is the leader task. It first finishes every delete left deleting (by
// a previous leader, or by this one before), then runs a cycle every
// Interval until ctx ends, which it must when leadership is lost. It
// returns promptly then: a command whose outcome is unknown is harmless.
func (c *Collector) Run(ctx context.Context) {
	c.leading.Add(1)
	defer c.leading.Add(-1)
	c.log.Info("garbage collector started", "store", c.store.String(), "interval", c.cfg.Interval, "grace", c.cfg.Grace)
	defer c.log.Info("garbage collector stopped")
	// The observer of new blobs runs beside the cycles, woken by acks
	// (and gathering them, ObserveDelay or ObservePass); a cycle's tick
	// also retries a pass that failed.
	observeTick := make(chan struct{}, 1)
	var observer sync.WaitGroup
	observer.Go(func() { c.observeLoop(ctx, observeTick) })
	defer observer.Wait()
	if c.acquire(ctx) != nil {
		return
	}
	rep, err := c.runCycle(ctx, RunOptions{}, true)
	c.release()
	if h := c.hooks.afterCycle; h != nil {
		h(rep, err)
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case observeTick <- struct{}{}:
		default:
		}
		if c.acquire(ctx) != nil {
			return
		}
		rep, err := c.runCycle(ctx, RunOptions{}, false)
		c.release()
		if h := c.hooks.afterCycle; h != nil {
			h(rep, err)
		}
	}
}

// RunOnce runs one cycle now, after any cycle in progress (API "gc run").
// The error is set when the cycle could not run or was cut short (not the
// leader, a command failed, ctx ended); object-store failures that only
// slow collection down are in the report.
func (c *Collector) RunOnce(ctx context.Context, opts RunOptions) (*Report, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	return c.runCycle(ctx, opts, false)
}

func (c *Collector) runCycle(ctx context.Context, opts RunOptions, resumeOnly bool) (*Report, error) {
	start := time.Now()
	c.running.Store(true)
	defer c.running.Store(false)
	cy := &cycle{c: c, ctx: ctx, rep: &Report{DryRun: opts.DryRun, ResumeOnly: resumeOnly, Started: c.now()}}
	var err error
	if opts.DryRun {
		err = cy.dryRun(opts)
	} else {
		err = cy.run(opts, resumeOnly)
	}
	rep := cy.rep
	rep.Finished = c.now()
	rep.Duration = fsm.Duration(time.Since(start))
	if err != nil {
		rep.Errors++
		rep.Error = err.Error()
	}
	if !opts.DryRun {
		c.record(rep, err, time.Since(start))
	}
	attrs := []any{"dry_run", rep.DryRun, "expired_intents", rep.ExpiredIntents, "marked", rep.Marked,
		"deleted", rep.Deleted, "resumed", rep.Resumed, "bytes_freed", rep.BytesFreed, "orphans_deleted", rep.OrphansDeleted,
		"purged", rep.Purged, "delete_errors", rep.DeleteErrors, "duration", time.Since(start)}
	switch {
	case err != nil:
		c.log.Warn("gc cycle ended early", append(attrs, "err", err)...)
	case rep.Errors > 0:
		c.log.Warn("gc cycle met errors", append(attrs, "errors", rep.Errors, "first_error", rep.Error)...)
	case rep.Deleted+rep.OrphansDeleted+rep.ExpiredIntents+rep.Purged > 0 || rep.DryRun:
		c.log.Info("gc cycle", attrs...)
	default:
		c.log.Debug("gc cycle", attrs...)
	}
	return rep, err
}

// record adds a finished cycle to the status and the metrics.
func (c *Collector) record(rep *Report, err error, d time.Duration) {
	outcome := "ok"
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// Leadership lost (or the caller gave up): not a failure.
		outcome = "canceled"
	case err != nil:
		outcome = "error"
	}
	c.m.cycles.WithLabelValues(outcome).Inc()
	c.m.duration.Observe(d.Seconds())
	sample := RunSample{Finished: rep.Finished, Outcome: outcome, Marked: rep.Marked, Deleted: rep.Deleted, BytesFreed: rep.BytesFreed,
		OrphanSweep: rep.OrphanSweep, OrphansDeleted: rep.OrphansDeleted, Candidates: -1, Deleting: -1}
	if cand, del, cerr := c.counts(); cerr == nil {
		c.m.candidates.Set(float64(cand))
		c.m.deleting.Set(float64(del))
		sample.Candidates, sample.Deleting = cand, del
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = rep
	addToTotals(&c.totals, rep, outcome == "error")
	if len(c.recent) == RecentRuns {
		c.recent = append(c.recent[:0], c.recent[1:]...)
	}
	c.recent = append(c.recent, sample)
}

// counts reads the number of candidates and of deleting blobs, up to
// StatusCountLimit each.
func (c *Collector) counts() (candidates, deleting int, err error) {
	cand, err := c.f.GCCandidates(farFuture, StatusCountLimit)
	if err != nil {
		return 0, 0, err
	}
	del, err := c.f.Deleting(StatusCountLimit)
	if err != nil {
		return 0, 0, err
	}
	return len(cand), len(del), nil
}

// Status reports the collector's state, read from this member's state
// machine.
func (c *Collector) Status() Status {
	s := Status{
		Enabled: true,
		Running: c.running.Load(),
		Leading: c.leading.Load() > 0,
		Store:   c.store.String(),
		Config: StatusConfig{
			Interval:      fsm.Duration(c.cfg.Interval),
			Grace:         fsm.Duration(c.cfg.Grace),
			BatchSize:     c.cfg.BatchSize,
			Rate:          c.cfg.Rate,
			TombstoneTTL:  fsm.Duration(c.cfg.TombstoneTTL),
			OrphanGrace:   fsm.Duration(c.cfg.OrphanGrace),
			OrphanEvery:   fsm.Duration(c.cfg.OrphanEvery),
			Prefix:        c.cfg.Prefix,
			DeleteTimeout: fsm.Duration(c.cfg.DeleteTimeout),
		},
	}
	c.mu.Lock()
	if c.last != nil {
		last := *c.last
		s.LastRun = &last
	}
	s.RecentRuns = append([]RunSample{}, c.recent...)
	s.Totals = c.totals
	if !c.lastSweep.IsZero() {
		at := c.lastSweep
		s.LastOrphanSweep = &at
	}
	if !c.sweepRetryAt.IsZero() {
		at := c.sweepRetryAt
		s.OrphanSweepRetryAt = &at
	}
	c.mu.Unlock()
	cand, del, err := c.counts()
	if err != nil {
		s.StatusError = err.Error()
	}
	s.PendingCandidates, s.Deleting = cand, del
	return s
}

// sweepDue reports whether the periodic orphan sweep is due at now: no
// sweep in the last OrphanEvery, by this collector or, as the replicated
// slot cut-off tells (a sweep proposes its clock minus OrphanGrace), by
// any leader before it. A new leader thus keeps the cluster's schedule
// rather than list the whole prefix as soon as it leads. A sweep of this
// collector that did not finish is due again at its retry time
// (sweepEnded), whatever the schedule says.
func (c *Collector) sweepDue(now time.Time) bool {
	if c.cfg.OrphanEvery <= 0 {
		return false
	}
	c.mu.Lock()
	last, retry := c.lastSweep, c.sweepRetryAt
	c.mu.Unlock()
	if !retry.IsZero() && !now.Before(retry) {
		return true
	}
	if cut, err := c.f.SlotCutoff(); err == nil && !cut.IsZero() {
		if at := cut.Add(c.cfg.OrphanGrace); at.After(last) {
			last = at
		}
	}
	return last.IsZero() || !now.Before(last.Add(c.cfg.OrphanEvery))
}

// propose proposes a collector command (Deps.Propose) and returns its
// value and index; the error says whether the command was refused.
func (c *Collector) propose(ctx context.Context, typ fsm.CommandType, p any) (any, uint64, error) {
	v, index, err := c.proposeCmd(ctx, typ, p)
	var rule *wire.RuleError
	switch {
	case errors.As(err, &rule):
		return nil, index, fmt.Errorf("gc: %s refused at index %d: %w", typ, index, err)
	case err != nil:
		return nil, index, fmt.Errorf("gc: propose %s: %w", typ, err)
	}
	return v, index, nil
}

// proposeKeys proposes a command on blob keys and returns the keys it
// changed.
func (c *Collector) proposeKeys(ctx context.Context, typ fsm.CommandType, p fsm.BlobKeys) ([]string, error) {
	v, index, err := c.propose(ctx, typ, p)
	if err != nil {
		return nil, err
	}
	keys, ok := v.([]string)
	if !ok {
		return nil, fmt.Errorf("gc: %s at index %d answered %T, want []string", typ, index, v)
	}
	return keys, nil
}

// verify confirms leadership and that the local state machine is current.
func (c *Collector) verify(ctx context.Context) error {
	if err := c.verifyLeader(ctx); err != nil {
		return fmt.Errorf("gc: verify leadership: %w", err)
	}
	return nil
}

// size returns the recorded size of a blob (0 if it has no record).
func (c *Collector) size(key string) uint64 {
	b, _, err := c.f.Blob(key)
	if err != nil || b == nil {
		return 0
	}
	return b.Size
}

// cycle is the state of one cycle.
type cycle struct {
	c   *Collector
	ctx context.Context
	rep *Report
	// storeDown is set when a whole Delete call failed (or every key of
	// one did): the cycle proposes no more marks, so an unhealthy store
	// does not pile up deleting blobs.
	storeDown bool
}

func (cy *cycle) run(opts RunOptions, resumeOnly bool) error {
	c := cy.c
	if err := c.verify(cy.ctx); err != nil {
		return err
	}
	if resumeOnly {
		return cy.resume()
	}
	if err := cy.expireIntents(); err != nil {
		return err
	}
	if err := cy.resume(); err != nil {
		return err
	}
	if !cy.storeDown {
		if err := cy.markAndDelete(); err != nil {
			return err
		}
	}
	if err := cy.purge(); err != nil {
		return err
	}
	if !cy.storeDown && (opts.Orphans || c.sweepDue(c.now())) {
		return cy.sweepOrphans(false)
	}
	return nil
}

// expireIntents turns intents whose lease ended into candidates. The
// state machine ends each lease entry it is given, an upload batch's
// whether or not a key of it was left unused (a batch whose every key an
// ack committed expires none), and keeps only an entry it refuses (the
// proposal's stamp is before the lease's end: the collector's clock runs
// ahead of the proposer's). So how many keys a proposal expired says
// nothing about the entries behind it: the cycle goes on until the index
// lists nothing past the entries it kept.
func (cy *cycle) expireIntents() error {
	c := cy.c
	proposed := map[string]bool{}
	kept := map[string]bool{} // proposed, and still listed
	for {
		if err := cy.ctx.Err(); err != nil {
			return err
		}
		now := c.now()
		keptBefore := len(kept)
		limit := keptBefore + c.cfg.BatchSize
		keys, err := c.f.ExpiredIntents(now, limit)
		if err != nil {
			return err
		}
		fresh := make([]string, 0, c.cfg.BatchSize)
		more := false // listed entries left for the next proposal
		for _, k := range keys {
			switch {
			case proposed[k]:
				kept[k] = true
			case len(fresh) < c.cfg.BatchSize:
				fresh = append(fresh, k)
			default:
				more = true
			}
		}
		end := len(keys) < limit && !more
		if len(fresh) == 0 {
			// Every entry listed was proposed and kept: list past the
			// ones found this time, if the listing was cut at its limit.
			if end || len(kept) == keptBefore {
				return nil
			}
			continue
		}
		for _, k := range fresh {
			proposed[k] = true
		}
		expired, err := c.proposeKeys(cy.ctx, fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: fresh})
		if err != nil {
			return err
		}
		cy.rep.ExpiredIntents += len(expired)
		c.m.expiredIntents.Add(float64(len(expired)))
		if end {
			return nil
		}
	}
}

// resume deletes the blobs marked deleting earlier, by this leader or a
// previous one, and records the confirmed ones gone. Keys that fail stay
// deleting; the scan skips them to reach the others.
func (cy *cycle) resume() error {
	c := cy.c
	stuck := map[string]bool{}
	for !cy.storeDown {
		if err := cy.ctx.Err(); err != nil {
			return err
		}
		want := len(stuck) + c.cfg.BatchSize
		keys, err := c.f.Deleting(want)
		if err != nil {
			return err
		}
		fresh := make([]string, 0, c.cfg.BatchSize)
		for _, k := range keys {
			if !stuck[k] && len(fresh) < c.cfg.BatchSize {
				fresh = append(fresh, k)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		gone, err := cy.deleteAndRecord(fresh, true)
		if err != nil {
			return err
		}
		for _, k := range fresh {
			if !gone[k] {
				stuck[k] = true
			}
		}
		if len(keys) < want {
			return nil
		}
	}
	return nil
}

// markAndDelete marks candidates past their grace deleting, batch by batch,
// and deletes exactly the keys each mark returns.
func (cy *cycle) markAndDelete() error {
	c := cy.c
	for !cy.storeDown {
		if err := cy.ctx.Err(); err != nil {
			return err
		}
		now := c.now()
		keys, err := c.f.GCCandidates(now.Add(-c.cfg.Grace), c.cfg.BatchSize)
		if err != nil || len(keys) == 0 {
			return err
		}
		if unsafeSkipMark {
			// Positive control, faultinject builds only (unsafe_on.go).
			if keys, err = cy.unsafeDeleteBeforeMark(keys); err != nil {
				return err
			}
		}
		cy.rep.MarksProposed += len(keys)
		c.m.marksProposed.Add(float64(len(keys)))
		marked, err := c.proposeKeys(cy.ctx, fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: keys, Grace: fsm.Duration(c.cfg.Grace)})
		if err != nil {
			return err
		}
		marked = unique(marked)
		cy.rep.Marked += len(marked)
		c.m.marked.Add(float64(len(marked)))
		if len(marked) == 0 {
			// Candidates the state machine refuses to mark (an
			// inconsistency fsck reports) would be listed again first.
			c.log.Warn("gc candidates could not be marked", "count", len(keys), "first", keys[0])
			return nil
		}
		if faultInject {
			faultAfterMark(marked)
		}
		if _, err := cy.deleteAndRecord(marked, false); err != nil {
			return err
		}
		if len(keys) < c.cfg.BatchSize {
			return nil
		}
	}
	return nil
}

// deleteAndRecord deletes keys marked deleting from the object store and
// records the keys the store confirmed as gone. It returns those keys.
func (cy *cycle) deleteAndRecord(keys []string, resumed bool) (map[string]bool, error) {
	c := cy.c
	var confirmed []string
	for chunk := range slices.Chunk(keys, c.deleteChunk) {
		if err := cy.waitRate(len(chunk)); err != nil {
			return nil, err
		}
		ok, err := cy.deleteObjects(chunk)
		confirmed = append(confirmed, ok...)
		if err != nil {
			if cerr := cy.ctx.Err(); cerr != nil {
				return nil, cerr
			}
			break
		}
	}
	gone := map[string]bool{}
	if len(confirmed) == 0 {
		return gone, cy.ctx.Err()
	}
	keysGone, err := c.proposeKeys(cy.ctx, fsm.CmdBlobsGone, fsm.BlobKeys{Keys: confirmed})
	if err != nil {
		return nil, err
	}
	var bytes uint64
	for _, k := range keysGone {
		if !gone[k] {
			gone[k] = true
			bytes += c.size(k)
		}
	}
	cy.rep.Deleted += len(gone)
	if resumed {
		cy.rep.Resumed += len(gone)
	}
	cy.rep.BytesFreed += bytes
	c.m.deleted.Add(float64(len(gone)))
	c.m.bytesFreed.Add(float64(bytes))
	return gone, nil
}

// waitRate waits until n deletions are allowed.
func (cy *cycle) waitRate(n int) error {
	if cy.c.limiter == nil || n == 0 {
		return nil
	}
	if err := cy.c.limiter.WaitN(cy.ctx, n); err != nil {
		if cerr := cy.ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("gc: rate limit: %w", err)
	}
	return nil
}

// deleteObjects calls the store's Delete, bounded by DeleteTimeout, and
// returns the keys it confirmed deleted. A key the store reports failed, or
// any key of a call that failed as a whole, is not confirmed. err is set
// when nothing was confirmed because of a failure: the store is then
// considered down for the rest of the cycle.
func (cy *cycle) deleteObjects(keys []string) (confirmed []string, err error) {
	if len(keys) == 0 {
		return nil, nil
	}
	c := cy.c
	ctx, cancel := context.WithTimeout(cy.ctx, c.cfg.DeleteTimeout)
	defer cancel()
	failed, err := c.store.Delete(ctx, keys)
	if err != nil {
		cy.deleteFailed(len(keys), fmt.Errorf("gc: delete %d objects: %w", len(keys), err))
		cy.storeDown = true
		return nil, err
	}
	for _, k := range keys {
		if ferr, bad := failed[k]; bad {
			if ferr == nil {
				ferr = errors.New("failed")
			}
			cy.deleteFailed(1, fmt.Errorf("gc: delete %s: %w", k, ferr))
			continue
		}
		confirmed = append(confirmed, k)
	}
	if len(confirmed) == 0 {
		cy.storeDown = true
		return nil, fmt.Errorf("gc: every delete of %d objects failed", len(keys))
	}
	return confirmed, nil
}

func (cy *cycle) deleteFailed(n int, err error) {
	cy.rep.DeleteErrors += n
	cy.c.m.deleteErrors.Add(float64(n))
	noteErr(cy.rep, err)
}

// purge forgets tombstones older than TombstoneTTL.
func (cy *cycle) purge() error {
	c := cy.c
	for {
		if err := cy.ctx.Err(); err != nil {
			return err
		}
		now := c.now()
		keys, err := c.f.GoneBefore(now.Add(-c.cfg.TombstoneTTL), c.cfg.BatchSize)
		if err != nil || len(keys) == 0 {
			return err
		}
		purged, err := c.proposeKeys(cy.ctx, fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: keys})
		if err != nil {
			return err
		}
		cy.rep.Purged += len(purged)
		c.m.purged.Add(float64(len(purged)))
		if len(purged) == 0 || len(keys) < c.cfg.BatchSize {
			return nil
		}
	}
}

// dryRun computes what a cycle would do at this moment.
func (cy *cycle) dryRun(opts RunOptions) error {
	c := cy.c
	rep := cy.rep
	if err := c.verify(cy.ctx); err != nil {
		return err
	}
	now := c.now()
	until := now.Add(-c.cfg.Grace)
	expired, err := c.f.ExpiredIntents(now, DryRunLimit)
	if err != nil {
		return err
	}
	deleting, err := c.f.Deleting(DryRunLimit)
	if err != nil {
		return err
	}
	cands, err := c.f.GCCandidates(until, DryRunLimit)
	if err != nil {
		return err
	}
	gone, err := c.f.GoneBefore(now.Add(-c.cfg.TombstoneTTL), DryRunLimit)
	if err != nil {
		return err
	}
	rep.Truncated = len(expired) == DryRunLimit || len(deleting) == DryRunLimit || len(cands) == DryRunLimit || len(gone) == DryRunLimit
	rep.ExpiredIntents = len(expired)
	// An intent expires as unreferenced since its lease's end: one that
	// ended before the grace period would be marked in the same cycle.
	for _, k := range expired {
		if b, _, err := c.f.Blob(k); err == nil && b.LeaseUntil != nil && !b.LeaseUntil.After(until) {
			cands = append(cands, k)
		}
	}
	rep.MarksProposed = len(cands)
	rep.Marked = len(cands)
	rep.Resumed = len(deleting)
	rep.Deleted = len(deleting) + len(cands)
	for _, k := range slices.Concat(deleting, cands) {
		rep.BytesFreed += c.size(k)
		if len(rep.Candidates) < DryRunSample {
			rep.Candidates = append(rep.Candidates, k)
		}
	}
	rep.Purged = len(gone)
	if opts.Orphans || c.sweepDue(now) {
		return cy.sweepOrphans(true)
	}
	return nil
}

func unique(keys []string) []string {
	seen := make(map[string]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
