package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// proxy sits in front of a member: it answers 503 unavailable to the first
// fail503 requests, and for the next dropAcks acks it forwards the ack,
// waits for the member's answer, and drops the client's connection instead
// of answering, so the client cannot know whether the ack was stored.
type proxy struct {
	fail503  atomic.Int64
	dropAcks atomic.Int64
	requests atomic.Int64
	dropped  atomic.Int64
	// afterDrop, if set (setAfterDrop), runs once an ack's answer is
	// withheld, before the connection is closed: the client cannot retry
	// before it returns.
	mu        sync.Mutex
	afterDrop func()
	// Batches of acks (POST /v1/acks): the next dropBatches are forwarded
	// and their answers dropped like dropAcks; with noBatchRoute the
	// proxy answers them as a member without the route does (404).
	dropBatches  atomic.Int64
	noBatchRoute atomic.Bool
	batches      atomic.Int64
	// gate, when set (setGate), holds every ack sent alone until it is
	// closed.
	gate chan struct{}
	srv  *httptest.Server
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if p.fail503.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"unavailable","message":"proxy says no","retryable":true}}`)
			return
		}
		batch := r.Method == http.MethodPost && r.URL.Path == "/v1/acks"
		if batch {
			p.batches.Add(1)
			if p.noBatchRoute.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"error":{"code":"route_not_found","message":"no route POST /v1/acks","retryable":false}}`)
				return
			}
		}
		p.mu.Lock()
		gate, afterDrop := p.gate, p.afterDrop
		p.mu.Unlock()
		if gate != nil && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/acks/") {
			<-gate
		}
		if (r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/acks/") && p.dropAcks.Add(-1) >= 0) ||
			(batch && p.dropBatches.Add(-1) >= 0) {
			out := r.Clone(r.Context())
			out.RequestURI = ""
			out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, u.Host
			resp, err := http.DefaultTransport.RoundTrip(out)
			if err != nil {
				t.Errorf("proxy: forwarding the ack: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.dropped.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("proxy: hijack: %v", err)
				return
			}
			if afterDrop != nil {
				afterDrop() // before the client can notice and retry
			}
			conn.Close()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) setAfterDrop(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.afterDrop = f
}

// setGate holds acks sent alone until the returned gate is closed.
func (p *proxy) setGate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
	return p.gate
}

func proxiedClient(t *testing.T, maxAttempts int, endpoints ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		Endpoints:        endpoints,
		MaxAttempts:      maxAttempts,
		BackoffBase:      time.Millisecond,
		BackoffMax:       5 * time.Millisecond,
		RequestTimeout:   10 * time.Second,
		DisableDiscovery: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// twoTaskJob creates a job whose epochs wait for two sources, begins epoch
// 1 and returns the generation.
func twoTaskJob(t *testing.T, c *client.Client, job string) uint64 {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.PutJob(ctx, job, wire.JobConfig{}); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartAttempt(ctx, job, "a1", []wire.Task{{ID: "s0", Caps: mustCaps(t, "input")}, {ID: "s1", Caps: mustCaps(t, "input")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, job, a.Generation, 1); err != nil {
		t.Fatal(err)
	}
	return a.Generation
}

func ackedCount(t *testing.T, c *client.Client, job string, epoch uint64) int {
	t.Helper()
	d, err := c.Epoch(ctxT(t), job, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return d.Acked
}

func input(s string) client.AckRequest {
	return client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte(s)}}
}

func TestRetryUnavailable(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := proxiedClient(t, 8, p.srv.URL)
	ctx := ctxT(t)
	gen := twoTaskJob(t, c, "r")

	p.fail503.Store(3)
	before, sent := c.Stats(), p.requests.Load()
	res, err := c.Ack(ctx, "r", gen, 1, "s0", input("o=1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Stats().Sub(before); d.Retries != 3 || d.MetastoreRequests != 4 || p.requests.Load()-sent != 4 {
		t.Fatalf("stats %+v, proxy saw %d requests; want 3 retries, 4 requests", d, p.requests.Load()-sent)
	}
	if res.Epoch.Acked != 1 || ackedCount(t, c, "r", 1) != 1 {
		t.Fatalf("acked %d, want exactly one ack", ackedCount(t, c, "r", 1))
	}
	// Reads retry the same way.
	p.fail503.Store(2)
	if j, err := c.Job(ctx, "r"); err != nil || j.Generation != gen {
		t.Fatalf("Job through 503s: %+v %v", j, err)
	}
}

func TestRetryOutcomeUnknown(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := proxiedClient(t, 8, p.srv.URL)
	ctx := ctxT(t)
	gen := twoTaskJob(t, c, "u")

	// The member stores the ack, the answer is lost, the client repeats
	// it and is answered with the stored ack.
	p.dropAcks.Store(2)
	before := c.Stats()
	res, err := c.Ack(ctx, "u", gen, 1, "s0", input("o=1"))
	if err != nil {
		t.Fatal(err)
	}
	if p.dropped.Load() != 2 || c.Stats().Sub(before).Retries != 2 {
		t.Fatalf("dropped %d answers, %d retries; want 2 and 2", p.dropped.Load(), c.Stats().Sub(before).Retries)
	}
	if res.Epoch.Acked != 1 || ackedCount(t, c, "u", 1) != 1 {
		t.Fatalf("acked %d after a repeated ack, want 1", ackedCount(t, c, "u", 1))
	}
	// The completing ack, its answer lost once: the epoch completes once.
	p.dropAcks.Store(1)
	res, err = c.Ack(ctx, "u", gen, 1, "s1", input("o=2"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.AwaitEpoch(ctx, "u", 1)
	if err != nil || d.Acked != 2 || d.State != wire.EpochCompleted || res.Epoch.Acked != 2 {
		t.Fatalf("epoch after a repeated completing ack: %+v %v (ack answer %+v)", d, err, res.Epoch)
	}
}

// An ack whose answer was lost, retried into a definite refusal that the
// first attempt itself may have caused: the caller learns the outcome is
// unknown, not that the ack was refused.
func TestRetryUnknownThenRefused(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := proxiedClient(t, 8, p.srv.URL)
	direct := proxiedClient(t, 1, m.URL)
	ctx := ctxT(t)
	gen := twoTaskJob(t, c, "f")

	// The ack lands, its answer is lost, and a new attempt fences the
	// generation before the client repeats it.
	p.setAfterDrop(func() {
		if _, err := direct.StartAttempt(ctx, "f", "a2", []wire.Task{{ID: "s0", Caps: mustCaps(t, "input")}}); err != nil {
			t.Errorf("new attempt: %v", err)
		}
	})
	p.dropAcks.Store(1)
	_, err := c.Ack(ctx, "f", gen, 1, "s0", input("o=1"))
	if !errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrFenced) {
		t.Fatalf("ack answered fenced after its lost answer: %v; want outcome unknown", err)
	}
	var re *client.RetryError
	if !errors.As(err, &re) || !re.Unknown {
		t.Fatalf("error %T %v, want a *RetryError with Unknown", err, err)
	}
	// It did land.
	if got := ackedCount(t, direct, "f", 1); got != 1 {
		t.Fatalf("epoch 1 has %d acks, want the one that landed", got)
	}

	// A malformed request is refused the same on every attempt: that
	// answer stays definite even after a lost answer.
	p.setAfterDrop(nil)
	if _, err := c.PutJob(ctx, "bad job id!", wire.JobConfig{}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("PutJob with a bad id: %v, want ErrInvalid", err)
	}
}

func TestRetriesExhausted(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := proxiedClient(t, 3, p.srv.URL)
	ctx := ctxT(t)
	gen := twoTaskJob(t, c, "x")

	// Always unavailable: the ack certainly did not happen.
	p.fail503.Store(1 << 40)
	sent := p.requests.Load()
	_, err := c.Ack(ctx, "x", gen, 1, "s0", input("o=1"))
	var re *client.RetryError
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &re) || re.Attempts != 3 {
		t.Fatalf("ack through a proxy that always answers 503: %v", err)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != "unavailable" {
		t.Fatalf("the last answer is not in the error: %v", err)
	}
	if n := p.requests.Load() - sent; n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if _, err := c.Job(ctx, "x"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("read through a proxy that always answers 503: %v", err)
	}
	p.fail503.Store(0)
	if n := ackedCount(t, c, "x", 1); n != 0 {
		t.Fatalf("acked %d", n)
	}

	// Every answer lost: the ack was stored, but the client cannot know.
	p.dropAcks.Store(1 << 40)
	_, err = c.Ack(ctx, "x", gen, 1, "s0", input("o=1"))
	if !errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("ack whose answers are all lost: %v", err)
	}
	p.dropAcks.Store(0)
	if n := ackedCount(t, c, "x", 1); n != 1 {
		t.Fatalf("acked %d after three lost answers, want 1", n)
	}
	// Repeating the call settles it: the stored ack.
	if res, err := c.Ack(ctx, "x", gen, 1, "s0", input("o=1")); err != nil || res.Epoch.Acked != 1 {
		t.Fatalf("repeated ack: %+v %v", res, err)
	}

	// Nobody listening: nothing was sent, so the outcome is known.
	l, dead := freeAddr(t)
	l.Close()
	dc := proxiedClient(t, 3, "http://"+dead)
	if _, err := dc.Ack(ctx, "x", gen, 1, "s1", input("o=2")); !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("ack to a dead endpoint: %v", err)
	}
	if _, err := dc.Job(ctx, "x"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("read from a dead endpoint: %v", err)
	}
	// The caller's context ends the retries.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := dc.Job(cctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled context: %v", err)
	}
}

func TestEndpointRotation(t *testing.T) {
	m := startSingle(t)
	l, dead := freeAddr(t)
	l.Close()
	c := newClient(t, "http://"+dead, m.URL)
	ctx := ctxT(t)
	before := c.Stats()
	if _, err := c.PutJob(ctx, "rot", wire.JobConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints()[0]; got != m.URL {
		t.Fatalf("preferred endpoint %s, want %s", got, m.URL)
	}
	if d := c.Stats().Sub(before); d.Retries != 1 {
		t.Fatalf("stats %+v, want one retry", d)
	}
	// The preference sticks: no more retries.
	before = c.Stats()
	for i := range 3 {
		if _, err := c.Job(ctx, "rot"); err != nil {
			t.Fatal(i, err)
		}
	}
	if d := c.Stats().Sub(before); d.Retries != 0 {
		t.Fatalf("stats %+v, want no retry", d)
	}
	st, err := c.Status(ctx)
	if err != nil || st.LeaderID != "n1" {
		t.Fatalf("status %+v %v", st, err)
	}
}

// TestClusterLeaderFailover runs a worker against three members; the
// leader shuts down mid-run and the client follows the new one.
func TestClusterLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster")
	}
	ms := startCluster(t)
	var urls []string
	for _, m := range ms {
		urls = append(urls, m.URL)
	}
	c := newClient(t, urls...)
	ctx := ctxT(t)
	w := newWorker(t, c, "ha", "a1", baseTasks(t), false)
	w.matEvery = 5
	const epochs = 14
	progress := make(chan uint64, epochs)
	done := make(chan error, 1)
	go func() {
		for e := uint64(1); e <= epochs; e++ {
			if err := w.epoch(ctx, e); err != nil {
				done <- err
				return
			}
			progress <- e
		}
		done <- nil
	}()
	old := leaderOf(ms)
	stopped := false
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if !stopped {
				t.Fatal("the run finished before the leader was stopped")
			}
			break wait
		case e := <-progress:
			if e == 4 && !stopped {
				old.Stop()
				stopped = true
			}
		}
	}
	var nl *member
	waitFor(t, 10*time.Second, "a new leader", func() bool { nl = leaderOf(ms); return nl != nil })
	if nl == old {
		t.Fatal("the stopped member is still leader")
	}
	j, err := c.Job(ctx, "ha")
	if err != nil || j.LatestCompleted != epochs {
		t.Fatalf("job %+v %v", j, err)
	}
	if got := c.Endpoints()[0]; got != nl.URL {
		t.Fatalf("the client prefers %s, the leader is %s", got, nl.URL)
	}
	for _, task := range []string{"agg-0", "full-0"} {
		r, err := c.Restore(ctx, "ha", task, client.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readState(t, r), w.expectedState(*r.StateManifest()); string(got) != string(want) || len(got) == 0 {
			t.Fatalf("%s state after failover:\n got %q\nwant %q", task, got, want)
		}
		// TaskState keeps its manifest in key order, the plan lists
		// segments in sequence order: compare them in key order.
		restored := manifests.Manifest{Bases: slices.Clone(r.StateManifest().Bases), Segments: slices.Clone(r.StateManifest().Segments)}
		restored.Sort()
		if cur := w.states[task].AckedManifest(); fmt.Sprint(cur) != fmt.Sprint(restored) {
			t.Fatalf("%s: restored manifest %v, TaskState %v", task, restored, cur)
		}
	}
	t.Logf("client stats: %+v", c.Stats())
}
