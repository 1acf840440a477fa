package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// batchClient is a client of the proxy with one ack request in flight at
// most, so that acks made while one is in flight queue.
func batchClient(t *testing.T, p *proxy) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		Endpoints: []string{p.srv.URL}, MaxAttempts: 8, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		RequestTimeout: 10 * time.Second, DisableDiscovery: true, MaxAckRequests: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// manyTaskJob creates a job of n input tasks s0..s(n-1) and begins epoch
// 1; it returns the generation.
func manyTaskJob(t *testing.T, c *client.Client, job string, n int) uint64 {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.PutJob(ctx, job, wire.JobConfig{}); err != nil {
		t.Fatal(err)
	}
	var tasks []wire.Task
	for i := range n {
		tasks = append(tasks, wire.Task{ID: fmt.Sprintf("s%d", i), Caps: mustCaps(t, "input")})
	}
	a, err := c.StartAttempt(ctx, job, "a1", tasks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, job, a.Generation, 1); err != nil {
		t.Fatal(err)
	}
	return a.Generation
}

// queuedBehindOne sends the ack of s0 (held by the proxy's gate) and, once
// it is in flight, the acks of s1..s(n-1), and waits until they all queue
// behind it. It returns the acks' errors once the gate opens and they are
// answered.
func queuedBehindOne(t *testing.T, c *client.Client, p *proxy, gate chan struct{}, job string, epoch, gen uint64, n int, genOf func(i int) uint64) []error {
	t.Helper()
	ctx := ctxT(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ack := func(i int) {
		g := gen
		if genOf != nil {
			g = genOf(i)
		}
		_, errs[i] = c.Ack(ctx, job, g, epoch, fmt.Sprintf("s%d", i), input(fmt.Sprintf("o=%d", i)))
	}
	before := p.requests.Load()
	wg.Go(func() { ack(0) })
	waitFor(t, 10*time.Second, "the first ack at the proxy", func() bool { return p.requests.Load() > before })
	for i := 1; i < n; i++ {
		wg.Go(func() { ack(i) })
	}
	waitFor(t, 10*time.Second, "the other acks queued", func() bool { return client.QueuedAcks(c) == n-1 })
	close(gate)
	wg.Wait()
	return errs
}

// TestAcksTravelTogether: acks made while the client's ack requests are
// all in flight wait, and go in one request once one is answered; each is
// applied and answered as if sent alone.
func TestAcksTravelTogether(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := batchClient(t, p)
	gen := manyTaskJob(t, c, "together", 9)
	gate := p.setGate()
	before := c.Stats()
	for i, err := range queuedBehindOne(t, c, p, gate, "together", 1, gen, 9, nil) {
		if err != nil {
			t.Errorf("ack of s%d: %v", i, err)
		}
	}
	if got := p.batches.Load(); got != 1 {
		t.Errorf("%d batch requests for 8 queued acks, want 1", got)
	}
	if st := c.Stats().Sub(before); st.MetastoreRequests != 2 || st.AckBatches != 1 || st.AcksBatched != 8 {
		t.Errorf("requests %d, batches %d of %d acks for 9 acks (one alone, 8 queued), want 2, 1 and 8", st.MetastoreRequests, st.AckBatches, st.AcksBatched)
	}
	d, err := c.Epoch(ctxT(t), "together", 1)
	if err != nil || d.Acked != 9 || d.State != wire.EpochCompleted {
		t.Fatalf("epoch 1 after the acks: %+v %v", d, err)
	}
}

// TestAckBatchRefusalsAreTheirOwn: an ack of a superseded generation
// queued with good ones is answered ErrFenced; the others are applied.
func TestAckBatchRefusalsAreTheirOwn(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := batchClient(t, p)
	ctx := ctxT(t)
	old := manyTaskJob(t, c, "own", 4)
	var tasks []wire.Task
	for i := range 4 {
		tasks = append(tasks, wire.Task{ID: fmt.Sprintf("s%d", i), Caps: mustCaps(t, "input")})
	}
	a2, err := c.StartAttempt(ctx, "own", "a2", tasks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, "own", a2.Generation, 2); err != nil {
		t.Fatal(err)
	}
	gate := p.setGate()
	errs := queuedBehindOne(t, c, p, gate, "own", 2, a2.Generation, 4, func(i int) uint64 {
		if i == 2 {
			return old
		}
		return a2.Generation
	})
	for i, err := range errs {
		if (i == 2) != errors.Is(err, client.ErrFenced) || (i != 2 && err != nil) {
			t.Errorf("ack of s%d: %v", i, err)
		}
	}
	var ae *client.APIError
	if !errors.As(errs[2], &ae) || ae.Path != "/v1/jobs/own/epochs/2/acks/s2" || ae.Field != "generation" {
		t.Errorf("the fenced ack's error %#v does not name its ack", errs[2])
	}
	if p.batches.Load() != 1 {
		t.Errorf("%d batches, want 1", p.batches.Load())
	}
	if got := ackedCount(t, c, "own", 2); got != 3 {
		t.Errorf("epoch 2 has %d acks, want 3", got)
	}
}

// TestAckBatchWithoutTheRoute: against a member without the batch route
// (404), the queued acks are sent alone and applied, and later acks no
// longer try batches for a while; after it, they do again.
func TestAckBatchWithoutTheRoute(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	p.noBatchRoute.Store(true)
	c := batchClient(t, p)
	gen := manyTaskJob(t, c, "old", 5)
	gate := p.setGate()
	for i, err := range queuedBehindOne(t, c, p, gate, "old", 1, gen, 5, nil) {
		if err != nil {
			t.Errorf("ack of s%d: %v", i, err)
		}
	}
	if got := ackedCount(t, c, "old", 1); got != 5 {
		t.Fatalf("epoch 1 has %d acks, want 5", got)
	}
	if p.batches.Load() != 1 {
		t.Fatalf("%d batch requests, want the 1 refused", p.batches.Load())
	}
	// Later acks go alone at once.
	ctx := ctxT(t)
	if _, err := c.BeginEpoch(ctx, "old", gen, 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if _, err := c.Ack(ctx, "old", gen, 2, fmt.Sprintf("s%d", i), input("x")); err != nil {
				t.Errorf("ack of s%d, epoch 2: %v", i, err)
			}
		})
	}
	wg.Wait()
	if p.batches.Load() != 1 {
		t.Errorf("%d batch requests after the route was found missing, want 1", p.batches.Load())
	}
	// Once that time is over (the member may have been upgraded), acks
	// travel together again.
	p.noBatchRoute.Store(false)
	client.EndAlone(c)
	if _, err := c.BeginEpoch(ctx, "old", gen, 3); err != nil {
		t.Fatal(err)
	}
	gate = p.setGate()
	for i, err := range queuedBehindOne(t, c, p, gate, "old", 3, gen, 5, nil) {
		if err != nil {
			t.Errorf("ack of s%d, epoch 3: %v", i, err)
		}
	}
	if p.batches.Load() != 2 {
		t.Errorf("%d batch requests once the member has the route again, want 2", p.batches.Load())
	}
}

// TestAckBatchOutcomeUnknown: a batch applied whose answer is lost: its
// acks are repeated alone and answered with the stored acks (each applied
// once); and where a new attempt fences the generation before they are
// repeated, each learns its outcome is unknown, not that it was refused.
func TestAckBatchOutcomeUnknown(t *testing.T) {
	m := startSingle(t)
	p := newProxy(t, m.URL)
	c := batchClient(t, p)
	gen := manyTaskJob(t, c, "lost", 4)
	gate := p.setGate()
	p.dropBatches.Store(1)
	for i, err := range queuedBehindOne(t, c, p, gate, "lost", 1, gen, 4, nil) {
		if err != nil {
			t.Errorf("ack of s%d: %v", i, err)
		}
	}
	if got := ackedCount(t, c, "lost", 1); got != 4 || p.dropped.Load() != 1 {
		t.Fatalf("epoch 1 has %d acks (dropped answers %d), want 4 and 1", got, p.dropped.Load())
	}

	gen = manyTaskJob(t, c, "fenced", 4)
	direct := proxiedClient(t, 1, m.URL)
	p.setAfterDrop(func() {
		if _, err := direct.StartAttempt(context.Background(), "fenced", "a2", []wire.Task{{ID: "s0", Caps: mustCaps(t, "input")}}); err != nil {
			t.Errorf("new attempt: %v", err)
		}
	})
	gate = p.setGate()
	p.dropBatches.Store(1)
	errs := queuedBehindOne(t, c, p, gate, "fenced", 1, gen, 4, nil)
	if errs[0] != nil {
		t.Errorf("the ack sent alone before the batch: %v", errs[0])
	}
	for i, err := range errs[1:] {
		var re *client.RetryError
		if !errors.As(err, &re) || !re.Unknown || errors.Is(err, client.ErrFenced) {
			t.Errorf("ack of s%d, its batch applied, answer lost, then fenced: %v; want outcome unknown", i+1, err)
		}
	}
	if got := ackedCount(t, direct, "fenced", 1); got != 4 {
		t.Errorf("epoch 1 of fenced has %d acks, want the 4 that landed", got)
	}

	// Every attempt of the batch lands and loses its answer: the acks are
	// sent alone, after the generation was fenced: outcome unknown too.
	gen = manyTaskJob(t, c, "exhausted", 4)
	p.setAfterDrop(func() {
		// Idempotent by content: the attempt after the first answers it.
		if _, err := direct.StartAttempt(context.Background(), "exhausted", "a2", []wire.Task{{ID: "s0", Caps: mustCaps(t, "input")}}); err != nil {
			t.Errorf("new attempt: %v", err)
		}
	})
	gate = p.setGate()
	p.dropBatches.Store(1 << 20)
	errs = queuedBehindOne(t, c, p, gate, "exhausted", 1, gen, 4, nil)
	for i, err := range errs[1:] {
		var re *client.RetryError
		if !errors.As(err, &re) || !re.Unknown || errors.Is(err, client.ErrFenced) {
			t.Errorf("ack of s%d, every attempt of its batch applied and lost, then sent alone and fenced: %v; want outcome unknown", i+1, err)
		}
	}
	p.dropBatches.Store(0)
}
