package gc

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
)

// brokenNameLister is an S3 store whose listings by name fail, as a
// store that throttles them.
type brokenNameLister struct {
	*blobstore.S3
}

func (s brokenNameLister) ListNames(context.Context, string, func(blobstore.Info) error) error {
	return errors.New("503 SlowDown")
}

// TestObserveFailuresLeaveBlobsUnobserved: a HEAD or a listing that fails
// says nothing about the object: its blob is neither recorded nor flagged
// missing, it stays queued, and a pass that could check nothing is an
// error.
func TestObserveFailuresLeaveBlobsUnobserved(t *testing.T) {
	check := func(t *testing.T, e *env, c *Collector, keys []string) {
		t.Helper()
		rep, err := c.Observe(context.Background())
		if err == nil || rep.Observed != 0 || rep.Flagged != 0 || rep.Errors != len(keys) {
			t.Fatalf("observe against a failing store: %+v %v; want %d errors and an error", rep, err, len(keys))
		}
		for _, k := range keys {
			if b := e.blob(k); b.Observed != nil || b.Flagged {
				t.Fatalf("%s recorded from a failed read: %+v", k, b)
			}
		}
		queued, err := e.f.Unobserved(1000)
		if err != nil || !slices.Equal(slices.Sorted(slices.Values(queued)), slices.Sorted(slices.Values(keys))) {
			t.Fatalf("queued %v %v, want %v", queued, err, keys)
		}
	}
	t.Run("HEAD", func(t *testing.T) {
		e := newEnv(t)
		w := e.startJob("j", 100)
		keys := e.run(w, 1, 3)
		s := &headHookStore{testStore: e.store, hook: func(context.Context, string) error { return errors.New("503 SlowDown") }}
		check(t, e, e.collectorWith(baseConfig(), s), keys)
	})
	t.Run("listing", func(t *testing.T) {
		e := newEnv(t)
		endpoint := blobtest.StartS3Server(t, "obsfail")
		store, err := blobstore.NewS3(context.Background(), blobtest.Config(endpoint, "obsfail", "ms"))
		if err != nil {
			t.Fatal(err)
		}
		w := e.startJob("j", 100)
		at := time.Unix(1_800_000_000, 0)
		keys := []string{blobstore.NewKey("j/t0", at), blobstore.NewKey("j/t0", at.Add(time.Millisecond))}
		e.commitKeys(w, 1, keys, 100)
		check(t, e, e.collectorWith(baseConfig(), brokenNameLister{store}), keys)
	})
}

// TestObservePassStopsAtAFailure: a pass in which a HEAD failed ends
// Observe even when the pass was full; the failed blob waits for the next
// pass instead of being read again at once, pass after pass.
func TestObservePassStopsAtAFailure(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	keys := e.run(w, 1, 4)
	queued, err := e.f.Unobserved(2)
	if err != nil || len(queued) != 2 {
		t.Fatalf("queue %v %v", queued, err)
	}
	bad := queued[0]
	var heads atomic.Int32
	s := &headHookStore{testStore: e.store, hook: func(_ context.Context, k string) error {
		if k == bad {
			heads.Add(1)
			return errors.New("503 SlowDown")
		}
		return nil
	}}
	cfg := baseConfig()
	cfg.ObservePass = 2
	c := e.collectorWith(cfg, s)
	rep, err := c.Observe(context.Background())
	if err != nil || rep.Observed != 1 || rep.Errors != 1 || heads.Load() != 1 {
		t.Fatalf("observe: %+v %v, %d HEADs of the failing key; want one pass of 2, 1 observed", rep, err, heads.Load())
	}
	s.mu.Lock()
	s.hook = nil
	s.mu.Unlock()
	rep, err = c.Observe(context.Background())
	if err != nil || rep.Observed != len(keys)-1 {
		t.Fatalf("the next Observe: %+v %v, want the %d others", rep, err, len(keys)-1)
	}
}

// TestObserverRetriesOnTheCycleTick: a pass that failed (here the
// starting pass of Run, for blobs a previous leader left unobserved) is
// retried at the next cycle of Run, with no ack to wake the observer.
func TestObserverRetriesOnTheCycleTick(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	keys := e.epoch(w, 1, true)
	var broken atomic.Bool
	broken.Store(true)
	s := &headHookStore{testStore: e.store, hook: func(context.Context, string) error {
		if broken.Load() {
			return errors.New("503 SlowDown")
		}
		return nil
	}}
	cfg := baseConfig()
	cfg.Interval = 5 * time.Millisecond
	c := e.collectorWith(cfg, s)
	passes := make(chan ObserveReport, 1000)
	c.hooks.afterObserve = func(r ObserveReport, err error) {
		select {
		case passes <- r:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	if r := next(t, passes); r.Errors != len(keys) || r.Observed != 0 {
		t.Fatalf("the starting pass against a failing store: %+v", r)
	}
	// Healed; no ack comes: a cycle's tick must start the next pass.
	broken.Store(false)
	observed := 0
	for observed < len(keys) {
		observed += next(t, passes).Observed
	}
	for _, k := range keys {
		if b := e.blob(k); b.Observed == nil || b.Flagged {
			t.Fatalf("%s: %+v", k, b)
		}
	}
}

// TestObserverCountsEachRoundAfresh: the new blobs acks report are
// counted from the start of the last pass: after a pass, an ack of fewer
// than ObservePass blobs makes the observer gather again rather than pass
// at once on the count of the blobs the last pass already read.
func TestObserverCountsEachRoundAfresh(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	cfg := baseConfig()
	cfg.ObserveDelay = time.Hour
	cfg.ObservePass = 4
	c := e.collector(cfg)
	gathering := make(chan int64, 100)
	passes := runObserver(t, c, func(pending int64) { gathering <- pending })
	// ObservePass new blobs reported at once: a pass.
	first := append(e.epoch(w, 1, true), e.epoch(w, 2, true)...)
	c.ObserveSoon(len(first))
	if r := next(t, passes); r.Observed != len(first) {
		t.Fatalf("the first pass: %+v, want %d observed", r, len(first))
	}
	// Two more: the observer gathers.
	second := e.epoch(w, 3, true)
	c.ObserveSoon(len(second))
	select {
	case p := <-gathering:
		if p != int64(len(second)) {
			t.Fatalf("gathering with %d blobs pending, want %d", p, len(second))
		}
	case r := <-passes:
		t.Fatalf("a pass after %d of %d new blobs: %+v", len(second), cfg.ObservePass, r)
	case <-time.After(10 * time.Second):
		t.Fatal("the observer neither gathered nor passed within 10s")
	}
}

// commitKeys acknowledges epoch n of w committing keys (one segment each,
// declared of size bytes) without uploading anything.
func (e *env) commitKeys(w *worker, n uint64, keys []string, size uint64) {
	e.t.Helper()
	e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: n})
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: w.job, Generation: w.gen, Task: w.task, Keys: keys, LeaseUntil: e.clock.Now().Add(time.Hour)})
	var blobs []fsm.BlobCommit
	d := &manifests.Delta{}
	for _, k := range keys {
		w.seq++
		blobs = append(blobs, fsm.BlobCommit{Key: k, Size: size})
		d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Length: max(size, 1), FirstSeq: w.seq, LastSeq: w.seq})
	}
	e.do(fsm.CmdTaskAck, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: n, Task: w.task, Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: d}})
}
