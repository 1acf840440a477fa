package gc

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// agedOrphans stores n objects unknown to the state machine, old enough
// for the sweep.
func agedOrphans(e *env, n int) []string {
	e.t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("orphans/o%d", i)
		keys = append(keys, k)
		e.put(k, 2)
		e.age(k, t0.Add(-2*time.Hour))
	}
	return keys
}

// retryAt is the collector's pending sweep retry (zero: none).
func retryAt(c *Collector) time.Time {
	if at := c.Status().OrphanSweepRetryAt; at != nil {
		return *at
	}
	return time.Time{}
}

// TestUnfinishedOrphanSweepIsRetried: a sweep whose listing fails midway
// has proposed its cut-off, so the schedule alone would wait a whole
// OrphanEvery for the next one; it is tried again SweepRetryDelay later,
// the delay doubling with each failed sweep in a row up to OrphanEvery,
// and a finished sweep clears the retry and goes back to the schedule.
func TestUnfinishedOrphanSweepIsRetried(t *testing.T) {
	e := newEnv(t)
	orphans := agedOrphans(e, 3)
	cfg := baseConfig()
	cfg.OrphanEvery = 3 * SweepRetryDelay
	store := &brokenListStore{testStore: e.store, after: 0}
	c := e.collectorWith(cfg, store)
	swept := func() bool { t.Helper(); return e.runOnce(c, RunOptions{}).OrphanSweep }

	// Three failed sweeps in a row: retried after 1, 2, then 3 delays
	// (OrphanEvery caps the doubling).
	if !swept() {
		t.Fatal("the first cycle did not sweep")
	}
	for i, delay := range []time.Duration{SweepRetryDelay, 2 * SweepRetryDelay, 3 * SweepRetryDelay} {
		if want := e.clock.Now().Add(delay); !retryAt(c).Equal(want) {
			t.Fatalf("failed sweep %d: retry at %v, want %v", i+1, retryAt(c), want)
		}
		e.clock.Advance(delay - time.Nanosecond)
		if swept() {
			t.Fatalf("failed sweep %d: tried again before its retry delay %v", i+1, delay)
		}
		e.clock.Advance(time.Nanosecond)
		if i == 2 {
			store.after = -1 // the store lists again
		}
		if !swept() {
			t.Fatalf("failed sweep %d: not tried again %v after", i+1, delay)
		}
	}
	if !retryAt(c).IsZero() {
		t.Fatalf("a finished sweep left a retry at %v", retryAt(c))
	}
	for _, k := range orphans {
		if e.has(k) {
			t.Fatalf("orphan %s left after the finished sweep", k)
		}
	}
	e.clock.Advance(cfg.OrphanEvery - time.Nanosecond)
	if swept() {
		t.Fatal("swept again before OrphanEvery after a finished sweep")
	}
	e.clock.Advance(time.Nanosecond)
	store.after = 0
	e.put("orphans/later", 2) // a listing with an object to fail at
	if !swept() {
		t.Fatal("no sweep OrphanEvery after a finished sweep")
	}
	// The finished sweep ended the run of failures: the delay starts over.
	if want := e.clock.Now().Add(SweepRetryDelay); !retryAt(c).Equal(want) {
		t.Fatalf("first failed sweep after a finished one: retry at %v, want %v", retryAt(c), want)
	}
}

// TestOrphanSweepRetriedAfterADeleteFailure: an orphan whose delete failed
// is deleted by the sweep's retry, a minute later, not an OrphanEvery.
func TestOrphanSweepRetriedAfterADeleteFailure(t *testing.T) {
	e := newEnv(t)
	orphans := agedOrphans(e, 3)
	cfg := baseConfig()
	cfg.OrphanEvery = time.Hour
	c := e.collector(cfg)
	e.store.set(func(s *testStore) { s.failKeys = map[string]error{orphans[1]: errors.New("SlowDown")} })
	if rep := e.runOnce(c, RunOptions{}); !rep.OrphanSweep || rep.OrphansDeleted != 2 || rep.DeleteErrors != 1 {
		t.Fatalf("sweep with a failed delete: %+v", rep)
	}
	if want := e.clock.Now().Add(SweepRetryDelay); !retryAt(c).Equal(want) {
		t.Fatalf("retry at %v, want %v", retryAt(c), want)
	}
	e.store.set(func(s *testStore) { s.failKeys = map[string]error{} })
	e.clock.Advance(SweepRetryDelay)
	if rep := e.runOnce(c, RunOptions{}); !rep.OrphanSweep || rep.OrphansDeleted != 1 || e.has(orphans[1]) {
		t.Fatalf("retry %+v: the orphan whose delete failed is in the store: %v", rep, e.has(orphans[1]))
	}
	if !retryAt(c).IsZero() {
		t.Fatalf("a finished retry left a retry at %v", retryAt(c))
	}
}

// TestDryRunSweepSchedulesNoRetry: a dry run's failed listing changes no
// schedule.
func TestDryRunSweepSchedulesNoRetry(t *testing.T) {
	e := newEnv(t)
	agedOrphans(e, 3)
	cfg := baseConfig()
	cfg.OrphanEvery = time.Hour
	c := e.collectorWith(cfg, &brokenListStore{testStore: e.store, after: 1})
	if rep := e.runOnce(c, RunOptions{DryRun: true, Orphans: true}); !rep.OrphanSweep || rep.Errors != 1 {
		t.Fatalf("dry run %+v, want a sweep with its listing's failure", rep)
	}
	if !retryAt(c).IsZero() {
		t.Fatalf("a dry run scheduled a retry at %v", retryAt(c))
	}
}
