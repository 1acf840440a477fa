package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// t0 is the base time of every test; the clock moves only when a test says.
var t0 = time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// events is an ordered log of what the collector did to the outside:
// "verify", "delete k1,k2", ...
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, s)
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// env drives a real state machine the way Raft would: commands are stamped
// with the fake clock and applied at increasing indexes under a mutex.
type env struct {
	t      *testing.T
	f      *fsm.FSM
	clock  *fakeClock
	local  *blobstore.Local
	store  *testStore
	events *events

	mu    sync.Mutex
	index uint64
	// proposed holds the commands the collector proposed, decoded.
	proposed []fsm.Command
	// beforeApply, if set, runs (with mu held) before a command of the
	// collector is applied; to apply commands of its own through do, it
	// releases mu and takes it again before returning.
	beforeApply func(c fsm.Command)

	verifyMu  sync.Mutex
	verifyErr error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	local, err := blobstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	return &env{t: t, f: f, clock: &fakeClock{now: t0}, local: local, events: ev, store: newTestStore(local, ev)}
}

func (e *env) applyLocked(cmd []byte) *fsm.Result {
	e.index++
	resp := e.f.Apply(&raft.Log{Index: e.index, Term: 1, Type: raft.LogCommand, Data: cmd})
	res, ok := resp.(*fsm.Result)
	if !ok {
		panic(fmt.Sprintf("apply at %d: response %T", e.index, resp))
	}
	return res
}

// propose is the collector's Deps.Propose: it stamps the command with the
// test's clock, as node.Node.Propose stamps the member's.
func (e *env) propose(ctx context.Context, typ fsm.CommandType, payload any) (any, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	cmd, err := fsm.Encode(typ, e.clock.Now(), payload)
	if err != nil {
		return nil, 0, err
	}
	c, err := fsm.Decode(cmd)
	if err != nil {
		return nil, 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.proposed = append(e.proposed, c)
	if e.beforeApply != nil {
		e.beforeApply(c)
	}
	res := e.applyLocked(cmd)
	if res.Err != nil {
		return nil, res.Index, res.Err
	}
	return res.Value, res.Index, nil
}

func (e *env) verifyLeader(ctx context.Context) error {
	e.events.add("verify")
	e.verifyMu.Lock()
	defer e.verifyMu.Unlock()
	if e.verifyErr != nil {
		return e.verifyErr
	}
	return ctx.Err()
}

func (e *env) setVerifyErr(err error) {
	e.verifyMu.Lock()
	defer e.verifyMu.Unlock()
	e.verifyErr = err
}

func (e *env) proposals(typ fsm.CommandType) []fsm.BlobKeys {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []fsm.BlobKeys
	for _, c := range e.proposed {
		if c.Type != typ {
			continue
		}
		var p fsm.BlobKeys
		if err := c.DecodePayload(&p); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func (e *env) proposedCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.proposed)
}

// do applies a command of the test (a worker, the API) and returns its
// value; it fails the test on a rule violation.
func (e *env) do(typ fsm.CommandType, payload any) any {
	e.t.Helper()
	cmd, err := fsm.Encode(typ, e.clock.Now(), payload)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	res := e.applyLocked(cmd)
	e.mu.Unlock()
	if res.Err != nil {
		e.t.Fatalf("%s: %v", typ, res.Err)
	}
	return res.Value
}

func (e *env) collector(cfg Config, mod ...func(*Deps)) *Collector {
	e.t.Helper()
	return e.collectorWith(cfg, e.store, mod...)
}

func (e *env) collectorWith(cfg Config, store blobstore.Store, mod ...func(*Deps)) *Collector {
	e.t.Helper()
	d := Deps{FSM: e.f, Store: store, Propose: e.propose, VerifyLeader: e.verifyLeader, Now: e.clock.Now}
	for _, m := range mod {
		m(&d)
	}
	c, err := New(cfg, d)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) runOnce(c *Collector, opts RunOptions) *Report {
	e.t.Helper()
	rep, err := c.RunOnce(context.Background(), opts)
	if err != nil {
		e.t.Fatalf("run once: %v", err)
	}
	return rep
}

// put stores an object of size bytes.
func (e *env) put(key string, size int) {
	e.t.Helper()
	if err := e.local.Put(context.Background(), key, bytes.NewReader(make([]byte, size)), int64(size)); err != nil {
		e.t.Fatal(err)
	}
}

// age sets an object's modification time.
func (e *env) age(key string, mod time.Time) {
	e.t.Helper()
	if err := os.Chtimes(filepath.Join(e.local.Root(), filepath.FromSlash(key)), mod, mod); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) has(key string) bool {
	e.t.Helper()
	_, err := e.local.Head(context.Background(), key)
	if err != nil && !isNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) listStore() []string {
	e.t.Helper()
	var out []string
	if err := e.local.List(context.Background(), "", func(i blobstore.Info) error {
		out = append(out, i.Key)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) blob(key string) *wire.Blob {
	e.t.Helper()
	b, _, err := e.f.Blob(key)
	if err != nil {
		e.t.Fatalf("blob %s: %v", key, err)
	}
	return b
}

func (e *env) hash() string {
	e.t.Helper()
	_, h, err := e.f.StateHash()
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (e *env) fsck() {
	e.t.Helper()
	rep, err := e.f.Fsck()
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() {
		e.t.Fatalf("fsck: %+v %v", rep.Mismatches, rep.Problems)
	}
}

// referenced returns the distinct keys the job's retained and pinned epochs
// reference.
func (e *env) referenced(job string) []string {
	e.t.Helper()
	refs, _, err := e.f.ReferencedBlobs(job)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range refs {
		out = append(out, r.Key)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// checkReferencedPresent fails unless the store holds every blob the job
// references and each is live.
func (e *env) checkReferencedPresent(job string) {
	e.t.Helper()
	keys := e.referenced(job)
	if len(keys) == 0 {
		e.t.Fatalf("job %s references nothing", job)
	}
	for _, k := range keys {
		if !e.has(k) {
			e.t.Errorf("referenced blob %s was deleted from the store", k)
		}
		if b := e.blob(k); b.State != wire.BlobLive || b.Refs == 0 {
			e.t.Errorf("referenced blob %s is %s with %d refs", k, b.State, b.Refs)
		}
	}
}

// split returns the keys with references and those live without any.
func (e *env) split(keys []string) (referenced, unreferenced []string) {
	e.t.Helper()
	for _, k := range keys {
		b := e.blob(k)
		switch {
		case b.Refs > 0:
			referenced = append(referenced, k)
		case b.State == wire.BlobLive:
			unreferenced = append(unreferenced, k)
		}
	}
	return referenced, unreferenced
}

// ---- a stream job ----

// worker models an incremental task: a changelog blob every epoch and a
// materialized base every few, as in fsm/manifest_test.go.
type worker struct {
	job, task string
	gen, seq  uint64
	m         manifests.Manifest
}

const (
	logSize  = 100
	baseSize = 1000
)

// startJob creates a job retaining `retained` checkpoints with one
// incremental state task.
func (e *env) startJob(job string, retained int) *worker {
	e.t.Helper()
	e.do(fsm.CmdJobPut, fsm.JobPut{Job: job, Config: wire.JobConfig{Retained: retained}})
	caps, err := wire.ParseCaps([]string{"state", "incremental"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.do(fsm.CmdAttemptStart, fsm.AttemptStart{Job: job, AttemptID: "a1", Tasks: []wire.Task{{ID: "t0", Caps: caps}}})
	return &worker{job: job, task: "t0", gen: 1}
}

// epoch begins epoch n and acknowledges it: the task uploads (intent, then
// object) a changelog blob, and a base when materialize is set, and may add
// extra segments of blobs already committed. It returns the new keys.
func (e *env) epoch(w *worker, n uint64, materialize bool, extra ...manifests.Segment) []string {
	e.t.Helper()
	e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: n})
	logKey := fmt.Sprintf("%s/%s/log-%d-%d", w.job, w.task, w.gen, n)
	keys := []string{logKey}
	blobs := []fsm.BlobCommit{{Key: logKey, Size: logSize, Checksum: "crc:" + logKey}}
	var d manifests.Delta
	if materialize {
		baseKey := fmt.Sprintf("%s/%s/base-%d-%d", w.job, w.task, w.gen, n)
		keys = append(keys, baseKey)
		blobs = append(blobs, fsm.BlobCommit{Key: baseKey, Size: baseSize})
		d.Materialize = &manifests.Materialization{Bases: []manifests.Base{{Key: baseKey, Offset: 0, Length: baseSize}}, TruncateBefore: w.seq + 1}
	}
	d.AddSegments = []manifests.Segment{
		{Key: logKey, Offset: 0, Length: 60, FirstSeq: w.seq + 1, LastSeq: w.seq + 5},
		{Key: logKey, Offset: 60, Length: 40, FirstSeq: w.seq + 6, LastSeq: w.seq + 9},
	}
	w.seq += 9
	for _, s := range extra {
		s.FirstSeq, s.LastSeq = w.seq+1, w.seq+1
		w.seq++
		d.AddSegments = append(d.AddSegments, s)
	}
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: w.job, Generation: w.gen, Task: w.task, Keys: keys, LeaseUntil: e.clock.Now().Add(time.Hour)})
	for _, b := range blobs {
		e.put(b.Key, int(b.Size))
	}
	next, err := manifests.Apply(w.m, d)
	if err != nil {
		e.t.Fatalf("model: %v", err)
	}
	w.m = next
	res := e.do(fsm.CmdTaskAck, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: n, Task: w.task,
		Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: &d}}).(*wire.AckResult)
	if !res.Completed {
		e.t.Fatalf("epoch %d did not complete", n)
	}
	return keys
}

// run acknowledges epochs from..to, materializing every third.
func (e *env) run(w *worker, from, to uint64) []string {
	e.t.Helper()
	var keys []string
	for n := from; n <= to; n++ {
		keys = append(keys, e.epoch(w, n, n%3 == 0)...)
	}
	return keys
}

// ---- the object store under test ----

// testStore wraps the local store: it records Delete calls and can make
// them fail per key or as a whole, or hang until their context ends.
type testStore struct {
	blobstore.Store
	events *events

	mu       sync.Mutex
	calls    [][]string
	failKeys map[string]error
	failAll  error
	block    bool
	// gate, when set, holds every Delete until it is closed.
	gate chan struct{}
	// entered receives (without blocking) on every Delete call.
	entered               chan struct{}
	inFlight, maxInFlight int
}

func newTestStore(s blobstore.Store, ev *events) *testStore {
	return &testStore{Store: s, events: ev, failKeys: map[string]error{}, entered: make(chan struct{}, 1)}
}

func (s *testStore) Delete(ctx context.Context, keys []string) (map[string]error, error) {
	s.mu.Lock()
	s.calls = append(s.calls, slices.Clone(keys))
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	failAll, block, gate := s.failAll, s.block, s.gate
	failKeys := make(map[string]error, len(s.failKeys))
	for k, v := range s.failKeys {
		failKeys[k] = v
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if s.events != nil {
		s.events.add("delete " + strings.Join(keys, ","))
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if failAll != nil {
		return nil, failAll
	}
	failed := map[string]error{}
	var pass []string
	for _, k := range keys {
		if err := failKeys[k]; err != nil {
			failed[k] = err
		} else {
			pass = append(pass, k)
		}
	}
	more, err := s.Store.Delete(ctx, pass)
	for k, v := range more {
		failed[k] = v
	}
	return failed, err
}

func (s *testStore) set(fn func(s *testStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *testStore) deleteCalls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func isNotFound(err error) bool { return errors.Is(err, blobstore.ErrNotFound) }

// beforeFirst has fn run once, without e.mu held, just before the first
// command of type typ proposed from now on is applied: what lands in the
// state between the collector's read and its proposal.
func (e *env) beforeFirst(typ fsm.CommandType, fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beforeApply = func(cmd fsm.Command) {
		if cmd.Type != typ {
			return
		}
		e.beforeApply = nil
		e.mu.Unlock()
		fn()
		e.mu.Lock()
	}
}
