package gc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
)

// observedEntries returns the blobs-observed commands the collector
// proposed, in order.
func (e *env) observedEntries() []fsm.BlobsObserved {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []fsm.BlobsObserved
	for _, c := range e.proposed {
		if c.Type != fsm.CmdBlobsObserved {
			continue
		}
		var p fsm.BlobsObserved
		if err := c.DecodePayload(&p); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// runObserver starts c's leader task and returns a channel of its
// observer's pass reports, after the starting pass (which must find
// nothing new).
func runObserver(t *testing.T, c *Collector, gathering func(pending int64)) <-chan ObserveReport {
	t.Helper()
	passes := make(chan ObserveReport, 100)
	c.hooks.afterObserve = func(r ObserveReport, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("observer pass: %v", err)
		}
		passes <- r
	}
	c.hooks.gathering = gathering
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	if r := next(t, passes); r.Observed != 0 {
		t.Fatalf("the starting pass observed %+v", r)
	}
	return passes
}

func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing within 10s")
		panic("unreachable")
	}
}

// TestObserverGathersUntilPass: with a delay longer than the test, acks
// reporting new blobs leave the observer gathering until they add up to
// ObservePass; then one pass proposes one blobs-observed entry for all.
func TestObserverGathersUntilPass(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	cfg := baseConfig()
	cfg.ObserveDelay = time.Hour
	cfg.ObservePass = 6
	c := e.collector(cfg)
	gathering := make(chan int64, 100)
	passes := runObserver(t, c, func(pending int64) { gathering <- pending })
	var keys []string
	for n := uint64(1); len(keys) < cfg.ObservePass; n++ {
		k := e.epoch(w, n, true) // a changelog and a base: 2 new blobs
		keys = append(keys, k...)
		c.ObserveSoon(len(k))
		if n == 1 {
			// Woken, the observer gathers instead of observing.
			if p := next(t, gathering); p != 2 {
				t.Fatalf("gathering with %d blobs pending, want 2", p)
			}
		}
	}
	if r := next(t, passes); r.Observed != len(keys) || r.Flagged != 0 || r.Errors != 0 {
		t.Fatalf("the pass after %d new blobs: %+v", len(keys), r)
	}
	entries := e.observedEntries()
	if len(entries) != 1 || len(entries[0].Blobs) != len(keys) {
		t.Fatalf("blobs-observed entries %+v, want one of %d blobs", entries, len(keys))
	}
	for _, k := range keys {
		if b := e.blob(k); b.Observed == nil || b.Observed.Missing || b.Flagged {
			t.Fatalf("%s: %+v", k, b)
		}
	}
}

// TestObserverPassAfterDelay: below ObserveBatch, the pass starts
// ObserveDelay after the first ack's wake-up (never earlier) and observes
// what the acks committed by then in one entry.
func TestObserverPassAfterDelay(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	cfg := baseConfig()
	cfg.ObserveDelay = 50 * time.Millisecond
	c := e.collector(cfg)
	passes := runObserver(t, c, nil)
	a := e.epoch(w, 1, true)
	b := e.epoch(w, 2, false)
	woken := time.Now()
	c.ObserveSoon(len(a))
	c.ObserveSoon(len(b))
	r := next(t, passes)
	if took := time.Since(woken); took < cfg.ObserveDelay {
		t.Fatalf("the pass came %s after the wake-up, before the delay %s", took, cfg.ObserveDelay)
	}
	if r.Observed != len(a)+len(b) {
		t.Fatalf("the pass: %+v, want %d observed", r, len(a)+len(b))
	}
	if entries := e.observedEntries(); len(entries) != 1 || len(entries[0].Blobs) != len(a)+len(b) {
		t.Fatalf("blobs-observed entries %+v", entries)
	}
}

// TestObserveBatchBoundsEntries: a pass proposes at most ObserveBatch
// blobs per blobs-observed entry, and passes go on while they are full
// (ObservePass blobs).
func TestObserveBatchBoundsEntries(t *testing.T) {
	e := newEnv(t)
	all, _, _ := fill(e)
	cfg := baseConfig()
	cfg.ObserveBatch = 4
	cfg.ObservePass = 6 // two passes: entries of 4, 2, 4, 2... blobs
	c := e.collector(cfg)
	rep, err := c.Observe(context.Background())
	if err != nil || rep.Observed != len(all) {
		t.Fatalf("observe: %+v %v, want %d observed", rep, err, len(all))
	}
	// Passes of 6 blobs, each proposed in entries of at most 4.
	var want []int
	for left := len(all); left > 0; left -= min(left, 6) {
		pass := min(left, 6)
		want = append(want, min(pass, 4))
		if pass > 4 {
			want = append(want, pass-4)
		}
	}
	var got []int
	for _, en := range e.observedEntries() {
		got = append(got, len(en.Blobs))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries of %v blobs for %d blobs, want %v", got, len(all), want)
	}
}

func TestObserveConfig(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil || cfg.ObserveDelay != DefaultObserveDelay || cfg.ObserveBatch != DefaultObserveBatch || cfg.ObservePass != DefaultObservePass ||
		DefaultObserveDelay != time.Second || DefaultObserveBatch != 1000 || DefaultObservePass != 10_000 {
		t.Fatalf("defaults %v, %v, %v: %v", cfg.ObserveDelay, cfg.ObservePass, cfg.ObserveBatch, err)
	}
	if d := DefaultConfig(); d.ObserveDelay != DefaultObserveDelay || d.ObserveBatch != DefaultObserveBatch || d.ObservePass != DefaultObservePass {
		t.Fatalf("DefaultConfig %+v", d)
	}
	for _, bad := range []Config{{ObserveDelay: -time.Second}, {ObserveBatch: -1}, {ObserveBatch: MaxObserveBatch + 1}, {ObservePass: -1}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestObserveLogsFlaggedBlobs: blobs whose objects are missing or of
// another size than their acks declared are logged with both sizes, at
// most flaggedLogged one by one per entry and the rest counted in one
// line.
func TestObserveLogsFlaggedBlobs(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	var keys []string
	for n := uint64(1); n <= flaggedLogged+3; n++ {
		keys = append(keys, e.epoch(w, n, false)...)
	}
	// The first object holds 7 bytes instead of logSize; the others are
	// gone.
	e.put(keys[0], 7)
	for _, k := range keys[1:] {
		if _, err := e.local.Delete(context.Background(), []string{k}); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	c := e.collector(baseConfig(), func(d *Deps) { d.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	rep, err := c.Observe(context.Background())
	if err != nil || rep.Flagged != len(keys) {
		t.Fatalf("observe: %+v %v, want %d flagged", rep, err, len(keys))
	}
	var each, more int
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var line struct {
			Msg      string `json:"msg"`
			Key      string `json:"key"`
			Declared uint64 `json:"declared_size"`
			Observed uint64 `json:"observed_size"`
			Missing  bool   `json:"missing"`
			Count    int    `json:"count"`
		}
		if err := dec.Decode(&line); err != nil {
			t.Fatal(err)
		}
		switch line.Msg {
		case "new blob does not match its ack":
			each++
			want := line.Key == keys[0] && line.Observed == 7 && !line.Missing ||
				line.Key != keys[0] && line.Observed == 0 && line.Missing
			if !want || line.Declared != logSize {
				t.Errorf("logged %+v", line)
			}
		case "more new blobs do not match their acks":
			more++
			if line.Count != len(keys)-flaggedLogged {
				t.Errorf("summary counts %d, want %d", line.Count, len(keys)-flaggedLogged)
			}
		}
	}
	if each != flaggedLogged || more != 1 {
		t.Fatalf("%d lines of single blobs and %d summaries, want %d and 1:\n%s", each, more, flaggedLogged, buf.String())
	}
}
