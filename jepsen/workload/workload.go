// Package workload drives the consistency suite's clients: stream workers of
// several jobs doing the real checkpoint cycle with the client package
// (attempts with capability flags, begin, acks with inline payloads and
// incremental state uploaded as blobs, completion, abort, restore), an
// operator pinning and unpinning savepoints and changing retention, and
// readers doing linearizable reads of each job's latest checkpoint through
// every member. Every operation is recorded in a history.History with its
// outcome; every value written is unique.
//
// Each client (history.Op.Client) has at most one operation outstanding.
package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Config configures a run.
type Config struct {
	// Members maps member ids to their API base URLs (http://host:port).
	Members map[string]string
	// Jobs is the number of jobs (default 3).
	Jobs int
	// Prefix starts every job name (default "wl").
	Prefix string
	// Readers is the number of reader clients per member (default 1).
	Readers int
	// Duration is how long the workers run (default 30s).
	Duration time.Duration
	// RestartProb is the chance, per epoch, that a job restarts with a new
	// attempt; AbortProb that its coordinator aborts the epoch; PinProb
	// that the operator pins the completed epoch (defaults 0.03, 0.05,
	// 0.08).
	RestartProb, AbortProb, PinProb float64
	// ReuseProb is the chance, per ack of a state task, that it references
	// again a blob that left its manifest earlier (default 0.25): the
	// collector must never delete a blob that is referenced again.
	ReuseProb float64
	// ReuseSameRef references a blob again at the offset it had when it
	// left the manifest, i.e. re-adds the very segment that was dropped.
	// Off by default: the state machine panicked on that pattern (see
	// docs/consistency.md, "Findings"; it now refuses it with
	// manifest_mismatch); by default the blob comes back at a new offset,
	// which exercises the collector just as well.
	ReuseSameRef bool
	// ReuseHold is how long a task neither materializes nor drops a
	// segment after it referenced a blob again (default 0), so the
	// reference outlives the collector's next deletion.
	ReuseHold time.Duration
	// GCGrace is the members' GC grace period (default 2s): a blob
	// unreferenced for that long is one the collector may delete, the
	// kind the workers reference again.
	GCGrace time.Duration
	// GCInterval is the members' GC cycle interval (default 2s).
	GCInterval time.Duration
	// ReuseWindow is how long past its listing a candidate may still be
	// deleted (default 1s; the GC control's window): a blob is referenced
	// again at an age past the grace period drawn from [0, GCInterval +
	// ReuseWindow).
	ReuseWindow time.Duration
	// OpTimeout bounds one operation (default 15s).
	OpTimeout time.Duration
	// Logf receives progress lines (nil: discarded).
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	if c.Jobs == 0 {
		c.Jobs = 3
	}
	if c.Prefix == "" {
		c.Prefix = "wl"
	}
	if c.Readers == 0 {
		c.Readers = 1
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.RestartProb == 0 {
		c.RestartProb = 0.03
	}
	if c.AbortProb == 0 {
		c.AbortProb = 0.05
	}
	if c.PinProb == 0 {
		c.PinProb = 0.08
	}
	if c.ReuseProb == 0 {
		c.ReuseProb = 0.25
	}
	if c.GCGrace == 0 {
		c.GCGrace = 2 * time.Second
	}
	if c.GCInterval == 0 {
		c.GCInterval = 2 * time.Second
	}
	if c.ReuseWindow == 0 {
		c.ReuseWindow = time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 15 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// SourceTask is the task whose inline input payload the linearizable
// reads observe.
const SourceTask = "src-0"

// TaskSpec is a task of a job with its capabilities.
type TaskSpec struct {
	ID   string
	Caps []string
}

// Tasks returns the task set of job number i: every job has a source
// (input only), a stateless map, an incremental aggregation (state,
// incremental) and a sink (output); odd jobs add a non-incremental state
// task that acknowledges whole manifests.
func Tasks(i int) []TaskSpec {
	ts := []TaskSpec{
		{SourceTask, []string{"input"}},
		{"map-0", nil},
		{"agg-0", []string{"state", "incremental"}},
		{"sink-0", []string{"output"}},
	}
	if i%2 == 1 {
		ts = append(ts, TaskSpec{"agg-1", []string{"state"}})
	}
	return ts
}

// TaskCaps returns the capabilities of the workload's task id (a task
// has the same in every job that has it); false for a task the workload
// does not run.
func TaskCaps(task string) (wire.Caps, bool) {
	for i := range 2 {
		for _, t := range Tasks(i) {
			if t.ID == task {
				caps, err := wire.ParseCaps(t.Caps)
				return caps, err == nil
			}
		}
	}
	return 0, false
}

// MainKind is the kind whose inline payload an ack op records as its
// Value (each task of the workload has at most one inline kind).
func MainKind(caps wire.Caps) wire.Kind {
	var main wire.Kind
	for _, k := range []wire.Kind{wire.KindOutput, wire.KindState, wire.KindInput} {
		if caps.Has(k) {
			main = k
		}
	}
	return main
}

// JobConfig is the config every job is created with: two retained
// checkpoints, an ack timeout longer than any run (so the leader never
// aborts on its own) and a history long enough that no ended epoch is
// forgotten during a run.
func JobConfig() wire.JobConfig {
	return wire.JobConfig{Retained: 2, AckTimeout: wire.Duration(10 * time.Minute), History: 10000}
}

// Workload is one run's shared state.
type Workload struct {
	cfg     Config
	h       *history.History
	clients atomic.Int64
	uniq    atomic.Int64
	all     []string // every endpoint
	rnd     *lockedRand

	// contents holds the bytes of every blob uploaded, by key.
	contents sync.Map
	// probe reads blob records for the workers' choices (blobRecord).
	probe *http.Client

	jobs []*jobRun
}

// Result sums up a run for the checkers.
type Result struct {
	// Jobs are the job names.
	Jobs []string
	// AckBatches and AcksBatched count the requests that carried the
	// workers' acks together and the acks in them (client.Stats).
	AckBatches, AcksBatched int64
	// Contents are the bytes of every uploaded blob.
	Contents map[string][]byte
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// New prepares a run recording into h.
func New(cfg Config, h *history.History) (*Workload, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Members) == 0 {
		return nil, errors.New("workload: no members")
	}
	w := &Workload{cfg: cfg, h: h, rnd: &lockedRand{r: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}, probe: &http.Client{}}
	for _, u := range cfg.Members {
		w.all = append(w.all, u)
	}
	slices.Sort(w.all)
	return w, nil
}

func (w *Workload) logf(format string, args ...any) { w.cfg.Logf(format, args...) }

// newClient returns a client and its history client number. endpoints nil
// means every member.
func (w *Workload) newClient(endpoints []string) (*client.Client, int) {
	return w.newClientWith(endpoints, 0)
}

// newClientWith is newClient with the client's Config.MaxAckRequests.
func (w *Workload) newClientWith(endpoints []string, maxAckRequests int) (*client.Client, int) {
	disc := endpoints != nil
	if endpoints == nil {
		endpoints = w.all
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	c, err := client.New(client.Config{
		Endpoints:        endpoints,
		HTTPClient:       &http.Client{Transport: tr},
		RequestTimeout:   5 * time.Second,
		MaxAttempts:      6,
		BackoffBase:      50 * time.Millisecond,
		BackoffMax:       500 * time.Millisecond,
		DisableDiscovery: disc,
		Logger:           slog.New(slog.DiscardHandler),
		MaxAckRequests:   maxAckRequests,
	})
	if err != nil {
		panic(err) // endpoints are well-formed URLs
	}
	return c, int(w.clients.Add(1)) - 1
}

// clientID is a history client number for a worker that shares another's
// client.
func (w *Workload) clientID() int { return int(w.clients.Add(1)) - 1 }

func (w *Workload) value(parts ...any) string {
	return fmt.Sprint(parts...) + fmt.Sprintf("#%d", w.uniq.Add(1))
}

// opCtx bounds one operation.
func (w *Workload) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.cfg.OpTimeout)
}

// Run creates the jobs and runs every client until the duration has passed
// or ctx ends. It returns what the checkers need beyond the history.
func (w *Workload) Run(ctx context.Context) (*Result, error) {
	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, id := w.newClient(nil)
	for i := range w.cfg.Jobs {
		name := fmt.Sprintf("%s-%d", w.cfg.Prefix, i)
		var err error
		for try := 0; try < 30; try++ {
			op := w.h.Invoke(&history.Op{Client: id, Kind: history.KindPutJob, Job: name})
			octx, ocancel := w.opCtx(setup)
			_, err = c.PutJob(octx, name, JobConfig())
			ocancel()
			w.h.Finish(op, err, true)
			if err == nil || setup.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return nil, fmt.Errorf("workload: create job %s: %w", name, err)
		}
		w.jobs = append(w.jobs, newJobRun(w, i, name))
	}

	runCtx, stop := context.WithTimeout(ctx, w.cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for _, j := range w.jobs {
		wg.Add(1)
		go func() { defer wg.Done(); j.run(runCtx) }()
	}
	ids := make([]string, 0, len(w.cfg.Members))
	for id := range w.cfg.Members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for range w.cfg.Readers {
			wg.Add(1)
			go func() { defer wg.Done(); w.reader(runCtx, id, []string{w.cfg.Members[id]}) }()
		}
	}
	wg.Add(2)
	go func() { defer wg.Done(); w.reader(runCtx, "", nil) }()
	go func() { defer wg.Done(); w.verifier(runCtx) }()
	wg.Wait()

	res := &Result{Contents: map[string][]byte{}}
	for _, j := range w.jobs {
		res.Jobs = append(res.Jobs, j.name)
		if len(j.workers) > 0 {
			st := j.workers[0].c.Stats() // the job's workers share it
			res.AckBatches += st.AckBatches
			res.AcksBatched += st.AcksBatched
		}
	}
	w.contents.Range(func(k, v any) bool {
		res.Contents[k.(string)] = v.([]byte)
		return true
	})
	return res, nil
}

// reader does linearizable reads of the latest checkpoint of random jobs
// (a restore plan of the source task) through the given endpoints.
func (w *Workload) reader(ctx context.Context, member string, endpoints []string) {
	c, id := w.newClient(endpoints)
	for ctx.Err() == nil {
		j := w.jobs[w.rnd.IntN(len(w.jobs))]
		op := w.h.Invoke(&history.Op{Client: id, Kind: history.KindRead, Job: j.name, Task: SourceTask, Member: member})
		octx, cancel := w.opCtx(ctx)
		r, err := c.Restore(octx, j.name, SourceTask, client.RestoreOptions{})
		cancel()
		if err == nil {
			if r.Plan.Status == wire.RestoreRestored {
				op.ReadEpoch = r.Plan.Source.Epoch
				op.Value = string(r.Payload(wire.KindInput))
			}
		}
		w.h.Finish(op, err, false)
		sleep(ctx, time.Duration(5+w.rnd.IntN(20))*time.Millisecond)
	}
}

// verifier restores random state tasks of random jobs from their latest
// checkpoint and reads every byte of their state, checking it against
// what was uploaded: the object store's reads of referenced blobs.
func (w *Workload) verifier(ctx context.Context) {
	c, id := w.newClient(nil)
	for ctx.Err() == nil {
		j := w.jobs[w.rnd.IntN(len(w.jobs))]
		var states []string
		for _, t := range j.tasks {
			if slices.Contains(t.Caps, "state") {
				states = append(states, t.ID)
			}
		}
		task := states[w.rnd.IntN(len(states))]
		w.restore(ctx, c, id, j.name, task, client.RestoreOptions{})
		sleep(ctx, time.Duration(50+w.rnd.IntN(100))*time.Millisecond)
	}
}

// restore records one restore (plan plus reads of every state range) and
// returns the restore when the plan and every read succeeded.
func (w *Workload) restore(ctx context.Context, c *client.Client, id int, job, task string, opts client.RestoreOptions) (*client.Restore, error) {
	op := w.h.Invoke(&history.Op{Client: id, Kind: history.KindRestore, Job: job, Task: task, Epoch: opts.Epoch})
	octx, cancel := w.opCtx(ctx)
	defer cancel()
	r, err := c.Restore(octx, job, task, opts)
	if err != nil {
		w.h.Finish(op, err, false)
		return nil, err
	}
	op.ReadEpoch = r.Plan.Source.Epoch
	// The payload of the task's own main kind (what its acks record), not
	// of the kinds the plan names: a plan that lost the kind records an
	// empty value, which the checkers compare with what was acked.
	if caps, ok := TaskCaps(task); ok {
		op.Value = string(r.Payload(MainKind(caps)))
	} else if r.Plan.Capabilities != nil {
		op.Value = string(r.Payload(MainKind(*r.Plan.Capabilities)))
	}
	if m := r.StateManifest(); m != nil {
		op.HasManifest = true
		op.Keys, op.Refs = manifestKeys(*m), history.ManifestRefs(*m)
	}
	for _, rg := range r.Ranges() {
		if err := w.readRange(octx, c, rg); err != nil {
			op.Key = rg.Key
			switch {
			case errors.Is(err, ErrContent):
				w.h.FinishAs(op, history.Fail, CodeContent, err)
			case errors.Is(err, client.ErrChecksum):
				// Every attempt read bytes other than those the ack
				// declared: a violation unless the S3 proxy corrupted
				// the answers (the checkers decide).
				w.h.FinishAs(op, history.Fail, CodeChecksum, err)
			default:
				w.h.Finish(op, err, false)
			}
			return nil, err
		}
	}
	w.h.Finish(op, nil, false)
	return r, nil
}

// CodeContent is the history code of a read whose bytes differ from what
// was uploaded.
const CodeContent = "content_mismatch"

// CodeChecksum is the history code of a restore whose range read failed
// the CRC32C its ack declared on every attempt (client.ErrChecksum): the
// bytes read back differ from those uploaded, unless the S3 proxy
// corrupted each answer (s3-corrupt-get).
const CodeChecksum = "checksum_mismatch"

// ErrContent is a blob read whose bytes differ from what was uploaded.
var ErrContent = errors.New("workload: blob content differs from what was uploaded")

// readRange reads a range of a restore plan through the client's
// verifying path (ReadRange: the CRC32C its ack declared, read again on
// a mismatch) and compares the bytes with what was uploaded: a mismatch
// that got past the client is ErrContent.
func (w *Workload) readRange(ctx context.Context, c *client.Client, rg manifests.Segment) error {
	got, err := c.ReadRange(ctx, rg)
	if err != nil {
		return err
	}
	want, ok := w.contents.Load(rg.Key)
	if !ok {
		return fmt.Errorf("%w: %s was never uploaded by this workload", ErrContent, rg.Key)
	}
	wb := want.([]byte)
	if rg.Offset+rg.Length > uint64(len(wb)) || !bytes.Equal(got, wb[rg.Offset:rg.Offset+rg.Length]) {
		return fmt.Errorf("%w: %s@%d+%d: read %d bytes", ErrContent, rg.Key, rg.Offset, rg.Length, len(got))
	}
	return nil
}

func manifestKeys(m manifests.Manifest) []string {
	keys := m.Blobs()
	if keys == nil {
		keys = []string{}
	}
	return keys
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
