package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/metastore/metastore/fsm"
)

// gaugeValue reads a gauge.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// sumReports adds reports the way Status's totals must.
func sumReports(reps []*Report, failed int) Totals {
	var s Totals
	for _, r := range reps {
		s.Cycles++
		s.ExpiredIntents += int64(r.ExpiredIntents)
		s.MarksProposed += int64(r.MarksProposed)
		s.Marked += int64(r.Marked)
		s.Deleted += int64(r.Deleted)
		s.BytesFreed += r.BytesFreed
		if r.OrphanSweep {
			s.OrphanSweeps++
		}
		s.OrphansDeleted += int64(r.OrphansDeleted)
		s.Purged += int64(r.Purged)
		s.DeleteErrors += int64(r.DeleteErrors)
		s.Errors += int64(r.Errors)
	}
	s.FailedCycles = int64(failed)
	return s
}

// TestStatusTotalsAndMetricsCountEveryCycle: over cycles that expire an
// intent, mark and delete (two keys failing), sweep an orphan, resume,
// purge, fail (leadership lost) and are canceled, Status's totals add up
// every report, the first error of a cycle is the one it reports, a
// canceled cycle is not a failed one, the gauges and Status count the
// candidates and deleting blobs, the last orphan sweep is reported, and
// every metric counts what the reports say. The metrics are the ones the
// collector registers.
func TestStatusTotalsAndMetricsCountEveryCycle(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	e.run(w, 1, 9)
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{"j/t0/lost"}, LeaseUntil: t0.Add(time.Minute)})
	e.put("j/t0/lost", 5)
	e.put("orphans/o1", 7)
	e.age("orphans/o1", t0.Add(-2*time.Hour))
	reg := prometheus.NewRegistry()
	c := e.collector(baseConfig(), func(d *Deps) { d.Registerer = reg })
	if st := c.Status(); st.LastOrphanSweep != nil {
		t.Fatalf("a last orphan sweep before any: %v", st.LastOrphanSweep)
	}

	e.clock.Advance(grace + time.Hour)
	// Epochs 10 to 12 release blobs now: candidates inside their grace.
	e.run(w, 10, 12)
	cands, err := e.f.GCCandidates(farFuture, 1000)
	if err != nil {
		t.Fatal(err)
	}
	graced, err := e.f.GCCandidates(e.clock.Now().Add(-grace), 1000)
	if err != nil {
		t.Fatal(err)
	}
	young := len(cands) - len(graced)
	if young == 0 || young == 2 || len(graced) < 4 {
		t.Fatalf("degenerate scenario: %d candidates, %d past their grace", len(cands), len(graced))
	}
	// The lost intent's lease is over: it expires and, unreferenced since
	// its lease's end, is marked in the same cycle.
	bad := map[string]string{graced[1]: "SlowDown", graced[3]: "InternalError"}
	e.store.set(func(s *testStore) {
		for k, msg := range bad {
			s.failKeys[k] = errors.New(msg)
		}
	})
	var reps []*Report
	sweepAt := e.clock.Now()
	rep := e.runOnce(c, RunOptions{Orphans: true})
	reps = append(reps, rep)
	want := len(graced) + 1
	if rep.ExpiredIntents != 1 || rep.MarksProposed != want || rep.Marked != want || rep.Deleted != want-2 ||
		rep.DeleteErrors != 2 || rep.Errors != 2 || !rep.OrphanSweep || rep.OrphansDeleted != 1 {
		t.Fatalf("first cycle: %+v, want %d marked, 2 failing", rep, want)
	}
	// The first failure of the cycle is its error.
	var first string
	for _, call := range e.store.deleteCalls() {
		for _, k := range call {
			if _, ok := bad[k]; ok && first == "" {
				first = k
			}
		}
	}
	if wantErr := fmt.Sprintf("gc: delete %s: %s", first, bad[first]); rep.Error != wantErr {
		t.Fatalf("cycle error %q, want the first failure %q", rep.Error, wantErr)
	}
	st := c.Status()
	if st.Deleting != 2 || st.PendingCandidates != young || st.LastOrphanSweep == nil || !st.LastOrphanSweep.Equal(sweepAt) {
		t.Fatalf("status after the first cycle: deleting %d (want 2), candidates %d (want %d), last sweep %v (want %v)",
			st.Deleting, st.PendingCandidates, young, st.LastOrphanSweep, sweepAt)
	}
	if s := st.RecentRuns[0]; s.Deleting != 2 || s.Candidates != young || s.Outcome != "ok" || !s.OrphanSweep || s.OrphansDeleted != 1 || s.Marked != want {
		t.Fatalf("recent run %+v", s)
	}
	if d, cd := gaugeValue(t, c.m.deleting), gaugeValue(t, c.m.candidates); d != 2 || cd != float64(young) {
		t.Fatalf("gauges: deleting %v, candidates %v; want 2 and %d", d, cd, young)
	}

	// Healthy again: the failed keys are resumed; a TTL later, every
	// tombstone is purged.
	e.store.set(func(s *testStore) { s.failKeys = map[string]error{} })
	rep = e.runOnce(c, RunOptions{})
	reps = append(reps, rep)
	if rep.Resumed != 2 || rep.Deleted != 2 {
		t.Fatalf("second cycle: %+v", rep)
	}
	e.clock.Advance(baseConfig().TombstoneTTL + time.Minute)
	rep = e.runOnce(c, RunOptions{})
	reps = append(reps, rep)
	if rep.Purged == 0 {
		t.Fatalf("third cycle purged nothing: %+v", rep)
	}

	// A cycle without leadership fails; one whose leadership check is
	// canceled (leadership lost while it ran) is canceled, not failed.
	e.setVerifyErr(errors.New("not the leader"))
	rep, err = c.RunOnce(context.Background(), RunOptions{})
	if err == nil {
		t.Fatal("a cycle without leadership succeeded")
	}
	reps = append(reps, rep)
	e.setVerifyErr(context.Canceled)
	rep, err = c.RunOnce(context.Background(), RunOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled cycle: %v", err)
	}
	reps = append(reps, rep)
	e.setVerifyErr(nil)

	st = c.Status()
	if got, want := st.Totals, sumReports(reps, 1); got != (Totals{Since: got.Since, Cycles: want.Cycles, FailedCycles: want.FailedCycles,
		ExpiredIntents: want.ExpiredIntents, MarksProposed: want.MarksProposed, Marked: want.Marked, Deleted: want.Deleted,
		BytesFreed: want.BytesFreed, OrphanSweeps: want.OrphanSweeps, OrphansDeleted: want.OrphansDeleted, Purged: want.Purged,
		DeleteErrors: want.DeleteErrors, Errors: want.Errors}) {
		t.Fatalf("totals %+v, want the sum of the reports %+v", got, want)
	}
	if outcomes := []string{st.RecentRuns[3].Outcome, st.RecentRuns[4].Outcome}; !slices.Equal(outcomes, []string{"error", "canceled"}) {
		t.Fatalf("outcomes of the failed and the canceled cycle: %v", outcomes)
	}
	if st.Deleting != 0 || gaugeValue(t, c.m.deleting) != 0 {
		t.Fatalf("deleting after recovery: status %d, gauge %v", st.Deleting, gaugeValue(t, c.m.deleting))
	}
	tot := st.Totals
	for name, pair := range map[string][2]float64{
		"expired intents": {counterValue(t, c.m.expiredIntents), float64(tot.ExpiredIntents)},
		"marks proposed":  {counterValue(t, c.m.marksProposed), float64(tot.MarksProposed)},
		"marked":          {counterValue(t, c.m.marked), float64(tot.Marked)},
		"deleted":         {counterValue(t, c.m.deleted), float64(tot.Deleted)},
		"bytes freed":     {counterValue(t, c.m.bytesFreed), float64(tot.BytesFreed)},
		"orphans deleted": {counterValue(t, c.m.orphansDeleted), float64(tot.OrphansDeleted)},
		"delete errors":   {counterValue(t, c.m.deleteErrors), float64(tot.DeleteErrors)},
		"purged":          {counterValue(t, c.m.purged), float64(tot.Purged)},
	} {
		if pair[0] != pair[1] || pair[1] == 0 {
			t.Errorf("metric %s = %v, totals %v (want equal, not 0)", name, pair[0], pair[1])
		}
	}
	for outcome, want := range map[string]float64{"ok": 3, "error": 1, "canceled": 1} {
		if got := counterValue(t, c.m.cycles.WithLabelValues(outcome)); got != want {
			t.Errorf("cycles{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}

	// The observer's metrics count what its passes recorded and flagged.
	e.put(w.m.Blobs()[0], 3) // a referenced blob's object of another size
	orep, err := c.Observe(context.Background())
	if err != nil || orep.Observed == 0 || orep.Flagged != 1 {
		t.Fatalf("observe: %+v %v", orep, err)
	}
	if o, f := counterValue(t, c.m.observed), counterValue(t, c.m.flagged); o != float64(orep.Observed) || f != 1 {
		t.Fatalf("observer metrics: observed %v, flagged %v; want %d and 1", o, f, orep.Observed)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, col := range c.m.collectors() {
		ch := make(chan *prometheus.Desc, 1)
		col.Describe(ch)
		d := (<-ch).String()
		i := strings.Index(d, `fqName: "`) + len(`fqName: "`)
		name := d[i : i+strings.IndexByte(d[i:], '"')]
		if !slices.Contains(names, name) {
			t.Errorf("metric %s is not registered (registered: %v)", name, names)
		}
	}
	if len(names) != 14 {
		t.Errorf("%d metrics registered, want 14: %v", len(names), names)
	}
}

// TestMetricsRegistrationFailureLeavesNothing: a registry where one of the
// collector's metric names is taken refuses New, and the metrics New had
// registered before the clash are unregistered again, so a collector can
// register once the name is free.
func TestMetricsRegistrationFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	// Another collector's metric of the same name: the last New registers.
	other, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	clash := other.flagged
	if err := reg.Register(clash); err != nil {
		t.Fatal(err)
	}
	deps := Deps{FSM: e.f, Store: e.store, Propose: e.propose, VerifyLeader: e.verifyLeader, Now: e.clock.Now, Registerer: reg}
	if _, err := New(baseConfig(), deps); err == nil {
		t.Fatal("New registered a metric whose name is taken")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "metastore_blobs_flagged_total" {
			t.Errorf("metric %s left registered by a New that failed", f.GetName())
		}
	}
	reg.Unregister(clash)
	c, err := New(baseConfig(), deps)
	if err != nil {
		t.Fatalf("New once the name is free: %v", err)
	}
	c.Close()
}

// TestStatusReportsItsConfig: Status shows the configuration in force,
// each field its own, and the cycle-duration histogram counts every cycle
// but dry runs.
func TestStatusReportsItsConfig(t *testing.T) {
	e := newEnv(t)
	cfg := Config{Interval: 7 * time.Second, Grace: 11 * time.Minute, BatchSize: 13, Rate: 17, TombstoneTTL: 19 * time.Hour,
		OrphanGrace: 23 * time.Minute, OrphanEvery: 29 * time.Minute, Prefix: "jobs/", DeleteTimeout: 31 * time.Second}
	c := e.collector(cfg)
	want := StatusConfig{Interval: fsm.Duration(cfg.Interval), Grace: fsm.Duration(cfg.Grace), BatchSize: cfg.BatchSize, Rate: cfg.Rate,
		TombstoneTTL: fsm.Duration(cfg.TombstoneTTL), OrphanGrace: fsm.Duration(cfg.OrphanGrace), OrphanEvery: fsm.Duration(cfg.OrphanEvery),
		Prefix: cfg.Prefix, DeleteTimeout: fsm.Duration(cfg.DeleteTimeout)}
	if got := c.Status().Config; got != want {
		t.Fatalf("status config %+v, want %+v", got, want)
	}
	e.runOnce(c, RunOptions{})
	e.runOnce(c, RunOptions{DryRun: true})
	e.runOnce(c, RunOptions{})
	var m dto.Metric
	if err := c.m.duration.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n != 2 {
		t.Fatalf("cycle durations observed %d times, want 2 (dry runs excluded)", n)
	}
}
