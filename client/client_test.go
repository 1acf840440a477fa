package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// worker simulates the tasks of a job through the client: a source with
// input offsets, a stateless map, an incremental state task whose every
// epoch uploads one changelog blob holding two segments (materialized every
// matEvery epochs), a state task without the incremental flag (whole
// manifests), and a sink with output state.
type worker struct {
	t        *testing.T
	c        *client.Client
	job      string
	gen      uint64
	tasks    []wire.Task
	states   map[string]*client.TaskState
	seq      map[string]uint64
	blobs    map[string][]byte // every blob uploaded, by key
	matEvery uint64
}

func baseTasks(t *testing.T) []wire.Task {
	return []wire.Task{
		{ID: "src-0", Caps: mustCaps(t, "input")},
		{ID: "map-0", Caps: mustCaps(t)},
		{ID: "agg-0", Caps: mustCaps(t, "state", "incremental")},
		{ID: "full-0", Caps: mustCaps(t, "state")},
		{ID: "sink-0", Caps: mustCaps(t, "output")},
	}
}

// newWorker creates the job if needed and starts attempt attemptID;
// restore says whether state tasks continue from the latest checkpoint.
func newWorker(t *testing.T, c *client.Client, job, attemptID string, tasks []wire.Task, restore bool) *worker {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.PutJob(ctx, job, wire.JobConfig{Retained: 2}); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartAttempt(ctx, job, attemptID, tasks)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, c: c, job: job, gen: a.Generation, tasks: tasks, states: map[string]*client.TaskState{},
		seq: map[string]uint64{}, blobs: map[string][]byte{}, matEvery: 10}
	for _, tk := range tasks {
		if !tk.Caps.Has(wire.KindState) {
			continue
		}
		var r *client.Restore
		if restore {
			if r, err = c.Restore(ctx, job, tk.ID, client.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			if m := r.StateManifest(); m != nil {
				for _, s := range m.Segments {
					w.seq[tk.ID] = max(w.seq[tk.ID], s.LastSeq)
				}
			}
		}
		if w.states[tk.ID], err = client.NewTaskState(r, tk.Caps); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func segmentBytes(task string, epoch uint64, part int) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("%s/e%d/p%d;", task, epoch, part), part+1))
}

func baseBytes(task string, epoch uint64) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("BASE %s@%d|", task, epoch), 3))
}

func (w *worker) upload(ctx context.Context, task string, data []byte) (string, error) {
	key, err := w.c.Upload(ctx, w.job, w.gen, task, bytes.NewReader(data), int64(len(data)))
	if err == nil {
		w.blobs[key] = data
	}
	return key, err
}

// stateOps uploads task's state for epoch and records it in its TaskState.
func (w *worker) stateOps(ctx context.Context, task string, epoch uint64) error {
	ts := w.states[task]
	if epoch%w.matEvery == 0 {
		data := baseBytes(task, epoch)
		key, err := w.upload(ctx, task, data)
		if err != nil {
			return err
		}
		if err := ts.AddBlob(key, uint64(len(data)), ""); err != nil {
			return err
		}
		// The base holds everything so far: truncate the whole changelog.
		return ts.Materialize([]manifests.Base{{Key: key, Length: uint64(len(data))}}, w.seq[task]+1)
	}
	a, b := segmentBytes(task, epoch, 0), segmentBytes(task, epoch, 1)
	data := append(append([]byte{}, a...), b...)
	key, err := w.upload(ctx, task, data)
	if err != nil {
		return err
	}
	if err := ts.AddBlob(key, uint64(len(data)), ""); err != nil {
		return err
	}
	s := w.seq[task]
	if err := ts.AddSegment(key, 0, uint64(len(a)), s+1, s+3); err != nil {
		return err
	}
	if err := ts.AddSegment(key, uint64(len(a)), uint64(len(b)), s+4, s+5); err != nil {
		return err
	}
	w.seq[task] = s + 5
	return nil
}

func (w *worker) ackTask(ctx context.Context, tk wire.Task, epoch uint64) error {
	req := client.AckRequest{Payloads: map[wire.Kind][]byte{}}
	if tk.Caps.Has(wire.KindInput) {
		req.Payloads[wire.KindInput] = fmt.Appendf(nil, "offset=%d", epoch*100)
	}
	if tk.Caps.Has(wire.KindOutput) {
		req.Payloads[wire.KindOutput] = fmt.Appendf(nil, "txn-%d", epoch)
	}
	ts := w.states[tk.ID]
	if ts != nil {
		if err := w.stateOps(ctx, tk.ID, epoch); err != nil {
			return err
		}
		req.Manifest = ts.Manifest()
	}
	if _, err := w.c.Ack(ctx, w.job, w.gen, epoch, tk.ID, req); err != nil {
		return err
	}
	if ts != nil {
		ts.Acked()
	}
	return nil
}

// epoch checkpoints one epoch: begin, every expected task's ack, await.
func (w *worker) epoch(ctx context.Context, epoch uint64) error {
	if _, err := w.c.BeginEpoch(ctx, w.job, w.gen, epoch); err != nil {
		return fmt.Errorf("begin %d: %w", epoch, err)
	}
	for _, tk := range w.tasks {
		if !tk.Caps.Expected() {
			continue
		}
		if err := w.ackTask(ctx, tk, epoch); err != nil {
			return fmt.Errorf("ack %d %s: %w", epoch, tk.ID, err)
		}
	}
	d, err := w.c.AwaitEpoch(ctx, w.job, epoch)
	if err != nil {
		return fmt.Errorf("await %d: %w", epoch, err)
	}
	if d.State != wire.EpochCompleted {
		return fmt.Errorf("epoch %d is %s", epoch, d.State)
	}
	return nil
}

// expectedState is what OpenState must read for a task's manifest: bases,
// then segments by sequence, cut from the uploaded blobs.
func (w *worker) expectedState(m manifests.Manifest) []byte {
	var out []byte
	for _, b := range m.Bases {
		out = append(out, w.blobs[b.Key][b.Offset:b.Offset+b.Length]...)
	}
	segs := append([]manifests.Segment{}, m.Segments...)
	for i := range segs {
		for j := i + 1; j < len(segs); j++ {
			if segs[j].FirstSeq < segs[i].FirstSeq {
				segs[i], segs[j] = segs[j], segs[i]
			}
		}
	}
	for _, s := range segs {
		out = append(out, w.blobs[s.Key][s.Offset:s.Offset+s.Length]...)
	}
	return out
}

func readState(t *testing.T, r *client.Restore) []byte {
	t.Helper()
	rc, err := r.OpenState(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWorkerCycle(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)
	w := newWorker(t, c, "orders", "run-1", baseTasks(t), false)
	if w.gen != 1 {
		t.Fatalf("generation %d, want 1", w.gen)
	}
	for e := uint64(1); e <= 11; e++ {
		if err := w.epoch(ctx, e); err != nil {
			t.Fatal(err)
		}
		for _, task := range []string{"agg-0", "full-0"} {
			got, err := c.EpochManifest(ctx, w.job, e, task)
			if err != nil {
				t.Fatal(err)
			}
			want := w.states[task].Current()
			if fmt.Sprint(*got) != fmt.Sprint(want) {
				t.Fatalf("epoch %d %s: stored manifest %v, TaskState %v", e, task, *got, want)
			}
		}
	}

	// Epoch 12: AwaitEpoch blocks until the last ack completes it.
	if _, err := c.BeginEpoch(ctx, w.job, w.gen, 12); err != nil {
		t.Fatal(err)
	}
	type awaited struct {
		d   *wire.EpochDetail
		err error
	}
	done := make(chan awaited, 1)
	go func() {
		d, err := c.AwaitEpoch(ctx, w.job, 12)
		done <- awaited{d, err}
	}()
	for _, tk := range w.tasks {
		if tk.Caps.Expected() {
			if err := w.ackTask(ctx, tk, 12); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := <-done
	if a.err != nil || a.d.State != wire.EpochCompleted || a.d.Acked != 4 || a.d.Expected != 4 {
		t.Fatalf("AwaitEpoch: %+v, %v", a.d, a.err)
	}

	// Restore every task from the latest checkpoint.
	before := c.Stats()
	src, err := c.Restore(ctx, w.job, "src-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(src.Payload(wire.KindInput)); got != "offset=1200" || src.Plan.Source.Epoch != 12 {
		t.Fatalf("src-0 restored %q from epoch %d", got, src.Plan.Source.Epoch)
	}
	if src.Status(wire.KindState) != wire.RestoreNothing || src.Status(wire.KindOutput) != wire.RestoreNothing {
		t.Fatalf("src-0 kinds: %+v", src.Plan.Kinds)
	}
	if _, err := src.OpenState(ctx); !errors.Is(err, client.ErrNothingToRecover) {
		t.Fatalf("OpenState of a source: %v", err)
	}
	mp, err := c.Restore(ctx, w.job, "map-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mp.Plan.Status != wire.RestoreNothing {
		t.Fatalf("map-0: %s", mp.Plan.Status)
	}
	if _, err := mp.OpenState(ctx); !errors.Is(err, client.ErrNothingToRecover) {
		t.Fatalf("OpenState of a stateless task: %v", err)
	}
	nw, err := c.Restore(ctx, w.job, "new-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nw.Plan.Status != wire.RestoreNoPriorState {
		t.Fatalf("new-0: %s", nw.Plan.Status)
	}
	if _, err := nw.OpenState(ctx); !errors.Is(err, client.ErrNoPriorState) {
		t.Fatalf("OpenState of a new task: %v", err)
	}
	if d := c.Stats().Sub(before); d.MetastoreRequests != 3 || d.ObjectRequests() != 0 {
		t.Fatalf("restores of tasks without state: %+v, want 3 metastore requests and no object-store request", d)
	}

	agg, err := c.Restore(ctx, w.job, "agg-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The base of epoch 10, then epochs 11 and 12, two segments each.
	want := bytes.Join([][]byte{baseBytes("agg-0", 10),
		segmentBytes("agg-0", 11, 0), segmentBytes("agg-0", 11, 1),
		segmentBytes("agg-0", 12, 0), segmentBytes("agg-0", 12, 1)}, nil)
	before = c.Stats()
	if got := readState(t, agg); !bytes.Equal(got, want) {
		t.Fatalf("agg-0 state:\n got %q\nwant %q", got, want)
	}
	if d := c.Stats().Sub(before); d.ObjectGets != 5 || int(d.ObjectGets) != agg.Plan.ObjectStoreReads || d.MetastoreRequests != 0 || uint64(d.ObjectBytesRead) != agg.Plan.ObjectStoreBytes {
		t.Fatalf("reading agg-0's state: %+v; plan says %d reads, %d bytes", d, agg.Plan.ObjectStoreReads, agg.Plan.ObjectStoreBytes)
	}
	full, err := c.Restore(ctx, w.job, "full-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readState(t, full), w.expectedState(*full.StateManifest()); !bytes.Equal(got, want) || len(got) == 0 {
		t.Fatalf("full-0 state:\n got %q\nwant %q", got, want)
	}

	// A new attempt continues from the restore: the first ack names the
	// base, later acks carry deltas; a task that restored nothing starts
	// empty.
	tasks := append(baseTasks(t), wire.Task{ID: "new-0", Caps: mustCaps(t, "state", "incremental")})
	w2 := newWorker(t, c, "orders", "run-2", tasks, true)
	w2.blobs = w.blobs
	if w2.gen != 2 {
		t.Fatalf("generation %d, want 2", w2.gen)
	}
	ts := w2.states["agg-0"]
	if b := ts.Base(); b == nil || *b != (wire.BaseRef{Job: "orders", Task: "agg-0", Epoch: 12}) {
		t.Fatalf("base %+v", b)
	}
	if ma := ts.Manifest(); ma == nil || ma.Base == nil || ma.Delta != nil {
		t.Fatalf("first manifest of the attempt: %+v", ma)
	}
	if w2.states["new-0"].Manifest() != nil {
		t.Fatal("a fresh task without changes has no manifest to send")
	}
	for e := uint64(13); e <= 14; e++ {
		if err := w2.epoch(ctx, e); err != nil {
			t.Fatal(err)
		}
		if ts.Base() != nil {
			t.Fatal("base still set after the first ack")
		}
	}
	agg, err = c.Restore(ctx, w.job, "agg-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, segmentBytes("agg-0", 13, 0)...)
	want = append(want, segmentBytes("agg-0", 13, 1)...)
	want = append(want, segmentBytes("agg-0", 14, 0)...)
	want = append(want, segmentBytes("agg-0", 14, 1)...)
	if got := readState(t, agg); !bytes.Equal(got, want) {
		t.Fatalf("agg-0 state after the new attempt:\n got %q\nwant %q", got, want)
	}

	// An ack without a manifest change keeps the manifest.
	if _, err := c.BeginEpoch(ctx, w.job, w2.gen, 15); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if !tk.Caps.Expected() {
			continue
		}
		req := client.AckRequest{Payloads: map[wire.Kind][]byte{}}
		if tk.Caps.Has(wire.KindInput) {
			req.Payloads[wire.KindInput] = []byte("offset=1500")
		}
		if tk.Caps.Has(wire.KindOutput) {
			req.Payloads[wire.KindOutput] = []byte("txn-15")
		}
		if ts := w2.states[tk.ID]; ts != nil {
			req.Manifest = ts.Manifest()
			if req.Manifest != nil {
				t.Fatalf("%s: manifest %+v with nothing changed", tk.ID, req.Manifest)
			}
		}
		if _, err := c.Ack(ctx, w.job, w2.gen, 15, tk.ID, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AwaitEpoch(ctx, w.job, 15); err != nil {
		t.Fatal(err)
	}
	agg, err = c.Restore(ctx, w.job, "agg-0", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readState(t, agg); agg.Plan.Source.Epoch != 15 || !bytes.Equal(got, want) {
		t.Fatalf("agg-0 state at epoch %d:\n got %q\nwant %q", agg.Plan.Source.Epoch, got, want)
	}
	// Restore from a named retained epoch.
	old, err := c.Restore(ctx, w.job, "agg-0", client.RestoreOptions{Epoch: 14})
	if err != nil || old.Plan.Source.Epoch != 14 {
		t.Fatalf("restore of epoch 14: %+v %v", old, err)
	}
	st := c.Stats()
	if st.ObjectPuts == 0 || st.ObjectGets == 0 || st.MetastoreRequests == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTypedErrors(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)

	var ae *client.APIError
	_, err := c.Job(ctx, "nope")
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || ae.Field != "job" {
		t.Fatalf("Job of an unknown job: %v (%+v)", err, ae)
	}
	if _, err := c.Epoch(ctx, "nope", 1); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Epoch of an unknown job: %v", err)
	}
	if _, err := c.PutJob(ctx, "bad id", wire.JobConfig{}); !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ae) || ae.Field != "job" {
		t.Fatalf("PutJob with a bad id: %v", err)
	}
	if _, err := c.PutJob(ctx, "j", wire.JobConfig{Retained: 5000}); !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ae) || ae.Field != "config.retained" {
		t.Fatalf("PutJob with a bad config: %v", err)
	}
	if _, err := c.PutJob(ctx, "j", wire.JobConfig{Retained: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, "j", 1, 1); !errors.Is(err, client.ErrConflict) || !errors.Is(err, wire.ErrNoAttempt) {
		t.Fatalf("BeginEpoch before an attempt: %v", err)
	}
	tasks := []wire.Task{
		{ID: "src", Caps: mustCaps(t, "input")},
		{ID: "map", Caps: mustCaps(t)},
		{ID: "agg", Caps: mustCaps(t, "state", "incremental")},
	}
	a1, err := c.StartAttempt(ctx, "j", "a1", tasks)
	if err != nil {
		t.Fatal(err)
	}
	// Retried start: same generation. Same id, other tasks: conflict.
	if again, err := c.StartAttempt(ctx, "j", "a1", tasks); err != nil || again.Generation != a1.Generation {
		t.Fatalf("retried start: %+v %v", again, err)
	}
	if _, err := c.StartAttempt(ctx, "j", "a1", tasks[:1]); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("start with the same id and other tasks: %v", err)
	}
	gen := a1.Generation
	if _, err := c.BeginEpoch(ctx, "j", gen, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, "j", gen, 1); err != nil {
		t.Fatalf("retried begin: %v", err)
	}

	// Same ack twice is one ack; a different one is a conflict.
	ack := client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte("o=1")}}
	r1, err := c.Ack(ctx, "j", gen, 1, "src", ack)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Ack(ctx, "j", gen, 1, "src", ack)
	if err != nil || r2.Ack.Index != r1.Ack.Index || r2.Epoch.Acked != 1 {
		t.Fatalf("repeated ack: %+v %v", r2, err)
	}
	_, err = c.Ack(ctx, "j", gen, 1, "src", client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte("o=2")}})
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "conflict" {
		t.Fatalf("different ack for the same slot: %v", err)
	}

	// Invalid requests.
	big := client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: make([]byte, wire.MaxInlinePayload+1)}}
	if _, err := c.Ack(ctx, "j", gen, 1, "src", big); !errors.Is(err, client.ErrInvalid) || !errors.Is(err, wire.ErrPayloadTooLarge) {
		t.Fatalf("payload too large: %v", err)
	}
	if _, err := c.Ack(ctx, "j", gen, 1, "map", client.AckRequest{}); !errors.Is(err, client.ErrInvalid) || !errors.Is(err, wire.ErrTaskNotExpected) {
		t.Fatalf("ack of a task without capabilities: %v", err)
	}
	if _, err := c.Ack(ctx, "j", gen, 1, "src", client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindState: []byte("x")}}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("payload of a kind the task lacks: %v", err)
	}
	drop := &wire.ManifestAck{Delta: &manifests.Delta{DropSegments: []manifests.Ref{{Key: "j/agg/none", Offset: 0}}}}
	if _, err := c.Ack(ctx, "j", gen, 1, "agg", client.AckRequest{Manifest: drop}); !errors.Is(err, client.ErrInvalid) || !errors.Is(err, wire.ErrManifestMismatch) {
		t.Fatalf("drop of a segment not in the manifest: %v", err)
	}

	// Abort: an ack of the aborted epoch is not pending; AwaitEpoch says why.
	if _, err := c.AbortEpoch(ctx, "j", gen, 1, "operator said so"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(ctx, "j", gen, 1, "agg", client.AckRequest{}); !errors.Is(err, client.ErrEpochNotPending) {
		t.Fatalf("ack of an aborted epoch: %v", err)
	}
	_, err = c.AwaitEpoch(ctx, "j", 1)
	var ab *client.EpochAbortedError
	if !errors.Is(err, client.ErrEpochAborted) || !errors.As(err, &ab) || ab.Reason != "operator said so" {
		t.Fatalf("AwaitEpoch of an aborted epoch: %v", err)
	}
	if _, err := c.BeginEpoch(ctx, "j", gen, 1); err != nil {
		t.Fatalf("retried begin of an aborted epoch: %v", err)
	}
	if _, err := c.BeginEpoch(ctx, "j", gen, 0); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("begin of epoch 0: %v", err)
	}

	// A new attempt fences the old generation and the old attempt id.
	if _, err := c.StartAttempt(ctx, "j", "a2", tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, "j", gen, 2); !errors.Is(err, client.ErrFenced) || !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("begin of a fenced generation: %v", err)
	}
	if _, err := c.Ack(ctx, "j", gen, 1, "src", ack); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("ack of a fenced generation: %v", err)
	}
	if _, err := c.StartAttempt(ctx, "j", "a1", tasks); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("start of a superseded attempt: %v", err)
	}
	if _, err := c.Pin(ctx, "j", 1, "sp"); !errors.Is(err, client.ErrConflict) || !errors.Is(err, wire.ErrEpochNotCompleted) {
		t.Fatalf("pin of an aborted epoch: %v", err)
	}
	if _, err := c.Restore(ctx, "j", "src", client.RestoreOptions{Pin: "none"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("restore of an unknown savepoint: %v", err)
	}
}

// TestBlobGone: a manifest that references a blob the collector deleted
// gets ErrBlobDeleting.
func TestBlobGone(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)
	tasks := []wire.Task{{ID: "agg", Caps: mustCaps(t, "state", "incremental")}}
	w := newWorker(t, c, "g", "a1", tasks, false)
	w.matEvery = 1000
	if _, err := c.PutJob(ctx, "g", wire.JobConfig{Retained: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.epoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ts := w.states["agg"]
	old := ts.Current().Segments
	for _, s := range old {
		if err := ts.DropSegment(s.ID()); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.epoch(ctx, 2); err != nil { // retains epoch 2 only: epoch 1's blob is garbage
		t.Fatal(err)
	}
	if code := rawJSON(t, "POST", m.URL+"/v1/gc/run", nil); code != http.StatusOK {
		t.Fatalf("gc run: %d", code)
	}
	var blob wire.Blob
	rawJSON(t, "GET", m.URL+"/v1/blobs/"+old[0].Key, &blob)
	if blob.State != wire.BlobGone && blob.State != wire.BlobDeleting {
		t.Fatalf("blob %s is %s after a collection", old[0].Key, blob.State)
	}
	if _, err := c.BeginEpoch(ctx, w.job, w.gen, 3); err != nil {
		t.Fatal(err)
	}
	ref := &wire.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{old[0]}}}
	_, err := c.Ack(ctx, w.job, w.gen, 3, "agg", client.AckRequest{Manifest: ref})
	if !errors.Is(err, client.ErrBlobDeleting) {
		t.Fatalf("ack referencing a collected blob: %v", err)
	}
	if _, err := c.ReadBlob(ctx, old[0].Key, 0, -1); !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("read of a collected blob: %v", err)
	}
}

// TestTaskStateModel checks TaskState against a naive model of the
// manifest: random operations, acked now and then; after every ack the
// acknowledged manifest must be the model's.
func TestTaskStateModel(t *testing.T) {
	for _, incremental := range []bool{true, false} {
		caps := mustCaps(t, "state")
		if incremental {
			caps = mustCaps(t, "state", "incremental")
		}
		ts, err := client.NewTaskState(nil, caps)
		if err != nil {
			t.Fatal(err)
		}
		var model manifests.Manifest
		seq := uint64(0)
		rnd := uint64(42)
		next := func(n uint64) uint64 {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			return (rnd >> 33) % n
		}
		for step := 0; step < 3000; step++ {
			switch op := next(10); {
			case op < 5:
				key := fmt.Sprintf("j/t/b%d", next(20))
				off := next(4) * 100
				l := next(50) + 1
				first := seq + 1
				seq += next(3) + 1
				err := ts.AddSegment(key, off, l, first, seq)
				clash := false
				for _, s := range model.Segments {
					if s.Key == key && s.Offset == off {
						clash = true
					}
				}
				if ts.Delta().Materialize != nil {
					for _, b := range model.Bases {
						if b.Key == key && b.Offset == off {
							clash = true // at the offset of a pending base
						}
					}
				}
				if clash != (err != nil) {
					t.Fatalf("step %d: add %s@%d: err %v, clash %v", step, key, off, err, clash)
				}
				if err == nil {
					model.Segments = append(model.Segments, manifests.Segment{Key: key, Offset: off, Length: l, FirstSeq: first, LastSeq: seq})
				}
			case op < 7:
				if len(model.Segments) == 0 {
					continue
				}
				i := int(next(uint64(len(model.Segments))))
				if err := ts.DropSegment(model.Segments[i].ID()); err != nil {
					t.Fatalf("step %d: drop %v: %v", step, model.Segments[i].ID(), err)
				}
				model.Segments = append(model.Segments[:i], model.Segments[i+1:]...)
			case op < 8:
				truncate := next(seq + 2)
				b := manifests.Base{Key: fmt.Sprintf("j/t/base%d", step), Length: next(100) + 1}
				if err := ts.Materialize([]manifests.Base{b}, truncate); err != nil {
					t.Fatalf("step %d: materialize: %v", step, err)
				}
				model.Bases = []manifests.Base{b}
				var keep []manifests.Segment
				for _, s := range model.Segments {
					if s.LastSeq >= truncate {
						keep = append(keep, s)
					}
				}
				model.Segments = keep
			default:
				ma := ts.Manifest()
				if ma != nil {
					if err := fsmManifestAck(ma).Validate(); err != nil {
						t.Fatalf("step %d: the manifest ack is invalid: %v", step, err)
					}
					if incremental && ma.Full != nil || !incremental && (ma.Delta != nil || ma.Full == nil) {
						t.Fatalf("step %d: delta %v full %v for incremental=%v", step, ma.Delta, ma.Full, incremental)
					}
				}
				ts.Acked()
				want := manifests.Manifest{Bases: append([]manifests.Base{}, model.Bases...), Segments: append([]manifests.Segment{}, model.Segments...)}
				want.Sort()
				got := ts.AckedManifest()
				if fmt.Sprint(got.Bases) != fmt.Sprint(want.Bases) || fmt.Sprint(got.Segments) != fmt.Sprint(want.Segments) {
					t.Fatalf("step %d: acked manifest\n got %v\nwant %v", step, got, want)
				}
				if ts.Pending() {
					t.Fatalf("step %d: pending after Acked", step)
				}
			}
			cur := ts.Current()
			want := manifests.Manifest{Bases: append([]manifests.Base{}, model.Bases...), Segments: append([]manifests.Segment{}, model.Segments...)}
			want.Sort()
			if fmt.Sprint(cur.Bases) != fmt.Sprint(want.Bases) || fmt.Sprint(cur.Segments) != fmt.Sprint(want.Segments) {
				t.Fatalf("step %d: current manifest\n got %v\nwant %v", step, cur, want)
			}
		}
	}
}

// TestConcurrentWorkers: many goroutines share one client.
func TestConcurrentWorkers(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)
	var tasks []wire.Task
	for i := range 16 {
		tasks = append(tasks, wire.Task{ID: fmt.Sprintf("t%d", i), Caps: mustCaps(t, "input")})
	}
	if _, err := c.PutJob(ctx, "cc", wire.JobConfig{}); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartAttempt(ctx, "cc", "a", tasks)
	if err != nil {
		t.Fatal(err)
	}
	for e := uint64(1); e <= 3; e++ {
		if _, err := c.BeginEpoch(ctx, "cc", a.Generation, e); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(tasks))
		for _, tk := range tasks {
			wg.Go(func() {
				_, err := c.Ack(ctx, "cc", a.Generation, e, tk.ID, client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte(tk.ID)}})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if d, err := c.AwaitEpoch(ctx, "cc", e); err != nil || d.Acked != len(tasks) {
			t.Fatalf("epoch %d: %+v %v", e, d, err)
		}
	}
}

// A transport error names the URL without its signed query.
func TestTransportErrorsRedactSignedQueries(t *testing.T) {
	c, err := client.New(client.Config{Endpoints: []string{"http://127.0.0.1:1"}, MaxAttempts: 1, DisableDiscovery: true, Token: "mst_secret-token"})
	if err != nil {
		t.Fatal(err)
	}
	slot := client.UploadSlot{Key: "j/t/k", Method: "PUT", URL: "http://127.0.0.1:1/v1/objects/j/t/k?expires=1&sig=SECRETSIG"}
	err = c.PutObject(context.Background(), slot, strings.NewReader("x"), 1)
	if err == nil || strings.Contains(err.Error(), "SECRETSIG") || strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("error: %v", err)
	}
	_, err = c.Job(context.Background(), "j")
	if err == nil || strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("error: %v", err)
	}
}
