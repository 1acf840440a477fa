package gc

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
)

// errEnoughOrphans stops a listing that found MaxOrphansPerSweep orphans.
var errEnoughOrphans = errors.New("gc: orphan bound reached")

// SweepRetryDelay is the wait before an orphan sweep that did not finish
// (its listing or a delete failed, or the cycle was refused midway) is
// tried again; it doubles with each such sweep in a row, up to
// OrphanEvery. The sweep's cut-off is replicated even when its listing
// fails, so without the retry the next sweep would wait a whole
// OrphanEvery after a transient store failure.
const SweepRetryDelay = time.Minute

// sweepEnded records how a sweep (not a dry run) started at `at` ended:
// finished, or to be tried again after a growing delay.
func (c *Collector) sweepEnded(at time.Time, finished bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if finished {
		c.sweepRetryAt, c.sweepFailures = time.Time{}, 0
		return
	}
	delay := c.cfg.OrphanEvery
	if c.sweepFailures < 20 {
		delay = min(delay, SweepRetryDelay<<c.sweepFailures)
	}
	c.sweepFailures++
	c.sweepRetryAt = at.Add(delay)
}

// sweepOrphans lists the store under Prefix and deletes the objects the
// state machine does not know that are older than OrphanGrace. Keys are
// handed out through intents recorded before the upload, or as signed
// slots (fsm/upload_slots.go): nothing references, or will reference, an
// unknown key of the first kind, and an unknown key of the second kind
// only until its lease is behind the slot cut-off.
//
// The order makes a stale view harmless: the sweep first proposes the
// cut-off (its clock minus OrphanGrace; once applied, no ack commits a
// signed slot whose lease ended at or before it), the listing is taken
// after a leadership check, and before each Delete the collector confirms
// its leadership again (so its state machine holds every intent, and
// every ack, committed before the cut-off and the listing) and only then
// re-reads which keys are known. An object of a signed name is deleted
// only when its lease is behind the cut-off.
func (cy *cycle) sweepOrphans(dry bool) (err error) {
	c := cy.c
	rep := cy.rep
	now := c.now()
	rep.OrphanSweep = true
	incomplete := false
	if !dry {
		c.mu.Lock()
		c.lastSweep = now
		c.mu.Unlock()
		defer func() { c.sweepEnded(now, err == nil && !incomplete) }()
	}
	if err := c.verify(cy.ctx); err != nil {
		return err
	}
	cutoff := now.Add(-c.cfg.OrphanGrace)
	slotCutoff := cutoff
	if !dry {
		v, index, err := c.propose(cy.ctx, fsm.CmdSlotCutoff, fsm.SlotCutoff{Until: cutoff})
		if err != nil {
			return err
		}
		if slotCutoff, _ = v.(time.Time); slotCutoff.IsZero() {
			return fmt.Errorf("gc: %s at index %d answered %T, want a time", fsm.CmdSlotCutoff, index, v)
		}
	}
	var orphans, pending []blobstore.Info
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		known, err := c.f.Known(infoKeys(pending))
		if err != nil {
			return err
		}
		for _, info := range pending {
			if !known[info.Key] {
				orphans = append(orphans, info)
			}
		}
		pending = pending[:0]
		return nil
	}
	listErr := c.store.List(cy.ctx, c.cfg.Prefix, func(info blobstore.Info) error {
		rep.OrphansListed++
		// An object of unknown age is left alone; a young one may be an
		// upload in flight.
		if info.ModTime.IsZero() || !info.ModTime.Before(cutoff) {
			return nil
		}
		// A signed slot's upload, while an ack may still commit it.
		if lease, _, ok := fsm.SignedSlotOf(info.Key); ok && lease.After(slotCutoff) {
			return nil
		}
		pending = append(pending, info)
		if len(pending) >= c.cfg.BatchSize {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(orphans) >= MaxOrphansPerSweep {
			return errEnoughOrphans
		}
		return nil
	})
	switch {
	case errors.Is(listErr, errEnoughOrphans):
		rep.Truncated = true
	case listErr != nil:
		if cerr := cy.ctx.Err(); cerr != nil {
			return cerr
		}
		// What was listed before the failure is still valid; the rest is
		// listed again by the sweep's retry.
		incomplete = true
		noteErr(rep, fmt.Errorf("gc: orphan sweep: list %q: %w", c.cfg.Prefix, listErr))
	}
	if err := flush(); err != nil {
		return err
	}
	if dry {
		rep.OrphansDeleted = len(orphans)
		for _, info := range orphans[:min(len(orphans), DryRunSample)] {
			rep.Orphans = append(rep.Orphans, info.Key)
		}
		return nil
	}
	for chunk := range slices.Chunk(orphans, c.deleteChunk) {
		if err := cy.waitRate(len(chunk)); err != nil {
			return err
		}
		// Right before deleting: still the leader, state machine current,
		// and the keys still unknown.
		if err := c.verify(cy.ctx); err != nil {
			return err
		}
		known, err := c.f.Known(infoKeys(chunk))
		if err != nil {
			return err
		}
		var del []string
		sizes := map[string]int64{}
		for _, info := range chunk {
			if !known[info.Key] {
				del = append(del, info.Key)
				sizes[info.Key] = info.Size
			}
		}
		confirmed, err := cy.deleteObjects(del)
		if len(confirmed) < len(del) {
			incomplete = true
		}
		var bytes uint64
		for _, k := range confirmed {
			bytes += uint64(max(sizes[k], 0))
		}
		rep.OrphansDeleted += len(confirmed)
		rep.BytesFreed += bytes
		c.m.orphansDeleted.Add(float64(len(confirmed)))
		c.m.bytesFreed.Add(float64(bytes))
		if err != nil {
			// deleteObjects reported the failure; the sweep's retry
			// deletes the rest.
			return cy.ctx.Err()
		}
	}
	return nil
}

func infoKeys(infos []blobstore.Info) []string {
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}
