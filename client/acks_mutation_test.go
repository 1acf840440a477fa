package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// ackMember is a fake member for the ack batcher (acks.go): the ack of
// task s0 sent alone is held at the member until the test releases it, so
// that the acks made meanwhile queue behind it; batch answers the batches
// (POST /v1/acks, n counting them from 1) and alone the other acks sent
// alone (PUT .../acks/{task}).
type ackMember struct {
	t     *testing.T
	url   string
	batch func(n int, items []wire.AckBatchItem, w http.ResponseWriter, r *http.Request)
	alone func(task string, w http.ResponseWriter, r *http.Request)

	batches atomic.Int32
	arrived atomic.Int32 // acks other than s0 sent alone, this round

	mu      sync.Mutex
	held    chan struct{} // s0 is at the member
	release chan struct{} // closed: s0 is answered
	raw     map[string][]byte
}

func newAckMember(t *testing.T) *ackMember {
	m := &ackMember{t: t, raw: map[string][]byte{}}
	m.batch = func(_ int, items []wire.AckBatchItem, w http.ResponseWriter, _ *http.Request) {
		ans := wire.AckBatchAnswer{}
		for _, it := range items {
			ans.Results = append(ans.Results, wire.AckBatchResult{Status: http.StatusOK, Ack: okAck(it.Task)})
		}
		answer(w, http.StatusOK, ans)
	}
	m.alone = func(task string, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, okAck(task)) }
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/acks" {
			var req wire.AckBatchRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Errorf("batch body: %v", err)
			}
			m.batch(int(m.batches.Add(1)), req.Acks, w, r)
			return
		}
		_, task, ok := strings.Cut(r.URL.Path, "/acks/")
		if r.Method != http.MethodPut || !ok {
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			return
		}
		if task == "s0" {
			m.mu.Lock()
			held, release := m.held, m.release
			m.mu.Unlock()
			if held != nil {
				close(held)
				<-release
			}
			answer(w, http.StatusOK, okAck(task))
			return
		}
		m.arrived.Add(1)
		m.alone(task, w, r)
	})
	m.url = srv.URL
	t.Cleanup(m.releaseAll) // before srv.Close
	return m
}

func (m *ackMember) releaseAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.release != nil {
		close(m.release)
		m.release, m.held = nil, nil
	}
}

// client is a client of the member with one ack request in flight at most
// (limit -1: every ack alone).
func (m *ackMember) client(limit int) *client.Client {
	c, err := client.New(client.Config{Endpoints: []string{m.url}, MaxAttempts: 4, BackoffBase: time.Millisecond,
		BackoffMax: 2 * time.Millisecond, RequestTimeout: 10 * time.Second, DisableDiscovery: true, MaxAckRequests: limit})
	if err != nil {
		m.t.Fatal(err)
	}
	return c
}

func okAck(task string) *wire.AckResult {
	return &wire.AckResult{Ack: &wire.Ack{Task: task}, Epoch: &wire.Epoch{Job: "j", Epoch: 1, State: wire.EpochPending}}
}

// around acks s0, held at the member, and once it is there the acks of
// s1..s(n-1) (ctxOf and reqOf may give each its own context and request);
// once each of those is queued or at the member, it releases s0. It
// returns every ack's result and error, and how many acks were queued at
// the release.
func (m *ackMember) around(c *client.Client, n int, ctxOf func(i int) context.Context, reqOf func(i int) client.AckRequest) ([]*wire.AckResult, []error, int) {
	t := m.t
	t.Helper()
	held := m.hold()
	m.arrived.Store(0)
	res, errs := make([]*wire.AckResult, n), make([]error, n)
	var wg sync.WaitGroup
	ack := func(i int) {
		ctx := ctxT(t)
		if ctxOf != nil && ctxOf(i) != nil {
			ctx = ctxOf(i)
		}
		req := input(fmt.Sprintf("o=%d", i))
		if reqOf != nil {
			req = reqOf(i)
		}
		res[i], errs[i] = c.Ack(ctx, "j", 1, 1, fmt.Sprintf("s%d", i), req)
	}
	wg.Go(func() { ack(0) })
	arrive(t, held, "s0 at the member")
	for i := 1; i < n; i++ {
		wg.Go(func() { ack(i) })
	}
	queued := 0
	waitFor(t, 10*time.Second, "the acks queued or at the member", func() bool {
		queued = client.QueuedAcks(c)
		return queued+int(m.arrived.Load()) == n-1
	})
	m.releaseAll()
	wg.Wait()
	return res, errs, queued
}

// TestAckBatchResultCountMismatch: a batch answered with more or fewer
// results than it had acks cannot tell whose is whose: each ack is sent
// again alone, its outcome unknown (the batch may have applied it), and
// gets its own answer; a refusal then leaves it unknown.
func TestAckBatchResultCountMismatch(t *testing.T) {
	for _, extra := range []int{-3, 1} {
		m := newAckMember(t)
		m.batch = func(_ int, items []wire.AckBatchItem, w http.ResponseWriter, _ *http.Request) {
			ans := wire.AckBatchAnswer{Results: []wire.AckBatchResult{}}
			for range len(items) + extra {
				ans.Results = append(ans.Results, wire.AckBatchResult{Status: http.StatusOK, Ack: okAck("someone-else")})
			}
			answer(w, http.StatusOK, ans)
		}
		m.alone = func(task string, w http.ResponseWriter, _ *http.Request) {
			if task == "s1" {
				answer(w, http.StatusOK, okAck(task))
				return
			}
			refuse(w, http.StatusConflict, wire.CodeFenced, false)
		}
		res, errs, queued := m.around(m.client(1), 4, nil, nil)
		if queued != 3 || m.batches.Load() != 1 || m.arrived.Load() != 3 {
			t.Fatalf("%+d results: %d queued, %d batches, %d sent again alone; want 3, 1, 3", extra, queued, m.batches.Load(), m.arrived.Load())
		}
		if errs[1] != nil || res[1].Ack.Task != "s1" {
			t.Errorf("%+d results: s1, answered alone: %+v %v; want its own ack", extra, res[1], errs[1])
		}
		for i := 2; i < 4; i++ {
			if !errors.Is(errs[i], client.ErrOutcomeUnknown) || errors.Is(errs[i], client.ErrFenced) {
				t.Errorf("%+d results: s%d, refused alone after the batch: %v; want outcome unknown", extra, i, errs[i])
			}
		}
	}
}

// TestAckBatchItemAnswers: each ack of a batch is answered by its own
// result: one to retry goes again alone (with the outcome unknown when
// the result says it may have landed), and an ack is never answered with
// neither a result nor an error.
func TestAckBatchItemAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result wire.AckBatchResult
		alone  func(w http.ResponseWriter) // nil: not sent alone
		check  func(res *wire.AckResult, err error) bool
	}{
		{"200 without an ack", wire.AckBatchResult{Status: http.StatusOK}, nil,
			func(res *wire.AckResult, err error) bool { return (res != nil && res.Ack != nil) || err != nil }},
		{"429 rate limited", wire.AckBatchResult{Status: http.StatusTooManyRequests, Error: &wire.Error{Code: wire.CodeRateLimited, Retryable: true}},
			func(w http.ResponseWriter) { answer(w, http.StatusOK, okAck("s1")) },
			func(res *wire.AckResult, err error) bool { return err == nil && res.Ack.Task == "s1" }},
		{"504 without an error", wire.AckBatchResult{Status: http.StatusGatewayTimeout},
			func(w http.ResponseWriter) { refuse(w, http.StatusConflict, wire.CodeConflict, false) },
			func(_ *wire.AckResult, err error) bool { return errors.Is(err, client.ErrOutcomeUnknown) }},
		{"outcome_unknown", wire.AckBatchResult{Status: http.StatusServiceUnavailable, Error: &wire.Error{Code: wire.CodeOutcomeUnknown, Retryable: true}},
			func(w http.ResponseWriter) { refuse(w, http.StatusConflict, wire.CodeFenced, false) },
			func(_ *wire.AckResult, err error) bool {
				return errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrFenced)
			}},
	} {
		m := newAckMember(t)
		m.batch = func(_ int, items []wire.AckBatchItem, w http.ResponseWriter, _ *http.Request) {
			answer(w, http.StatusOK, wire.AckBatchAnswer{Results: []wire.AckBatchResult{tc.result}})
		}
		m.alone = func(task string, w http.ResponseWriter, _ *http.Request) {
			if tc.alone == nil {
				t.Errorf("%s: %s sent again alone", tc.name, task)
				answer(w, http.StatusOK, okAck(task))
				return
			}
			tc.alone(w)
		}
		res, errs, queued := m.around(m.client(1), 2, nil, nil)
		if queued != 1 || m.batches.Load() != 1 {
			t.Fatalf("%s: %d queued, %d batches; want 1 and 1", tc.name, queued, m.batches.Load())
		}
		if errs[0] != nil || !tc.check(res[1], errs[1]) {
			t.Errorf("%s: s1 answered %+v, %v", tc.name, res[1], errs[1])
		}
		want := int32(0)
		if tc.alone != nil {
			want = 1
		}
		if m.arrived.Load() != want {
			t.Errorf("%s: %d acks sent again alone", tc.name, m.arrived.Load())
		}
	}
}

// TestAckBatchItemAfterLostAnswer: a batch whose first answer was lost is
// repeated; an ack its repeat answers with a retryable refusal goes alone
// with its outcome unknown (refused alone: still unknown), and one refused
// as malformed gets that refusal (it could not have landed either).
func TestAckBatchItemAfterLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result wire.AckBatchResult
		check  func(err error) bool
	}{
		{"429 then fenced alone", wire.AckBatchResult{Status: http.StatusTooManyRequests, Error: &wire.Error{Code: wire.CodeRateLimited, Retryable: true}},
			func(err error) bool {
				return errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrFenced)
			}},
		{"invalid", wire.AckBatchResult{Status: http.StatusBadRequest, Error: &wire.Error{Code: wire.CodeInvalid, Field: "payloads"}},
			func(err error) bool {
				return errors.Is(err, client.ErrInvalid) && !errors.Is(err, client.ErrOutcomeUnknown)
			}},
	} {
		m := newAckMember(t)
		m.batch = func(n int, items []wire.AckBatchItem, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				hangUp(t, w, r)
				return
			}
			answer(w, http.StatusOK, wire.AckBatchAnswer{Results: []wire.AckBatchResult{tc.result}})
		}
		m.alone = func(task string, w http.ResponseWriter, _ *http.Request) {
			refuse(w, http.StatusConflict, wire.CodeFenced, false)
		}
		_, errs, queued := m.around(m.client(1), 2, nil, nil)
		if queued != 1 || m.batches.Load() != 2 {
			t.Fatalf("%s: %d queued, %d batch requests; want 1 and 2", tc.name, queued, m.batches.Load())
		}
		if !tc.check(errs[1]) {
			t.Errorf("%s: s1 answered %v", tc.name, errs[1])
		}
	}
}

// TestAckBatchMethodNotAllowed: a member that answers the batch route 405
// (an older release) is treated as one without it: the queued acks go
// alone, and so do the acks that follow, without trying a batch again.
func TestAckBatchMethodNotAllowed(t *testing.T) {
	m := newAckMember(t)
	m.batch = func(_ int, _ []wire.AckBatchItem, w http.ResponseWriter, _ *http.Request) {
		refuse(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, false)
	}
	c := m.client(1)
	_, errs, queued := m.around(c, 3, nil, nil)
	if queued != 2 || m.batches.Load() != 1 || m.arrived.Load() != 2 || errors.Join(errs...) != nil {
		t.Fatalf("first round: %d queued, %d batches, %d alone, errors %v; want 2, 1, 2, none", queued, m.batches.Load(), m.arrived.Load(), errs)
	}
	_, errs, queued = m.around(c, 3, nil, nil)
	if queued != 0 || m.batches.Load() != 1 || m.arrived.Load() != 2 || errors.Join(errs...) != nil {
		t.Fatalf("after the 405: %d queued, %d batches, %d alone, errors %v; want 0, 1, 2, none", queued, m.batches.Load(), m.arrived.Load(), errs)
	}
}

// hold makes the member hold the next ack of s0 until releaseAll; the
// channel is closed once it is there.
func (m *ackMember) hold() chan struct{} {
	held := make(chan struct{})
	m.mu.Lock()
	m.held, m.release = held, make(chan struct{})
	m.mu.Unlock()
	return held
}

// arrive waits until ch is closed.
func arrive(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	waitFor(t, 10*time.Second, what, func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	})
}

// TestAckCancelledInQueue: an ack whose caller gives up while it waits in
// the queue leaves the queue and is never sent: its error is the
// context's, with a known outcome.
func TestAckCancelledInQueue(t *testing.T) {
	m := newAckMember(t)
	c := m.client(1)
	m.batch = func(_ int, items []wire.AckBatchItem, w http.ResponseWriter, _ *http.Request) {
		t.Errorf("a batch of %d acks sent", len(items))
		refuse(w, http.StatusBadRequest, wire.CodeInvalid, false)
	}
	held := m.hold()
	first := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctxT(t), "j", 1, 1, "s0", input("o=0"))
		first <- err
	}()
	arrive(t, held, "s0 at the member")
	ctx, cancel := context.WithCancel(ctxT(t))
	second := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctx, "j", 1, 1, "s1", input("o=1"))
		second <- err
	}()
	waitFor(t, 10*time.Second, "s1 queued", func() bool { return client.QueuedAcks(c) == 1 })
	cancel()
	err := <-second
	queued := client.QueuedAcks(c)
	m.releaseAll()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("ack cancelled in the queue: %v; want the context's error, outcome known", err)
	}
	if queued != 0 {
		t.Errorf("the cancelled ack is still queued")
	}
}

// TestAckCancelledInBatch: an ack whose caller gives up while the batch
// carrying it is at the member has an unknown outcome.
func TestAckCancelledInBatch(t *testing.T) {
	m := newAckMember(t)
	c := m.client(1)
	atMember, answerBatch := make(chan struct{}), make(chan struct{})
	var arrived, answered sync.Once
	free := func() { answered.Do(func() { close(answerBatch) }) }
	t.Cleanup(free) // before the member's cleanups
	inner := m.batch
	m.batch = func(n int, items []wire.AckBatchItem, w http.ResponseWriter, r *http.Request) {
		arrived.Do(func() { close(atMember) })
		<-answerBatch
		inner(n, items, w, r)
	}
	held := m.hold()
	first := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctxT(t), "j", 1, 1, "s0", input("o=0"))
		first <- err
	}()
	arrive(t, held, "s0 at the member")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctx, "j", 1, 1, "s1", input("o=1"))
		second <- err
	}()
	waitFor(t, 10*time.Second, "s1 queued", func() bool { return client.QueuedAcks(c) == 1 })
	m.releaseAll()
	arrive(t, atMember, "the batch at the member")
	cancel()
	err := <-second
	free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Errorf("ack cancelled while its batch was at the member: %v; want outcome unknown (context cancelled)", err)
	}
}

// TestAcksThatSkipTheQueue: an ack whose caller wants the raw answer, an
// ack too big to batch, and every ack of a client with MaxAckRequests -1
// are sent alone at once, even while the ack requests are all in flight.
func TestAcksThatSkipTheQueue(t *testing.T) {
	big := client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte(strings.Repeat("x", 9<<10))}}
	var raw []byte
	m := newAckMember(t)
	for _, tc := range []struct {
		name  string
		limit int
		ctx   func(i int) context.Context
		req   func(i int) client.AckRequest
	}{
		{"raw answer", 1, func(i int) context.Context {
			if i == 1 {
				return client.WithRawAnswer(ctxT(t), &raw)
			}
			return nil
		}, nil},
		{"big ack", 1, nil, func(i int) client.AckRequest {
			if i == 1 {
				return big
			}
			return input("o=0")
		}},
		{"MaxAckRequests -1", -1, nil, nil},
	} {
		res, errs, queued := m.around(m.client(tc.limit), 2, tc.ctx, tc.req)
		if queued != 0 || m.arrived.Load() != 1 || m.batches.Load() != 0 || errs[1] != nil || res[1].Ack.Task != "s1" {
			t.Errorf("%s: %d queued, %d alone, %d batches, s1 answered %+v %v; want it alone at once", tc.name, queued, m.arrived.Load(), m.batches.Load(), res[1], errs[1])
		}
	}
	if !strings.Contains(string(raw), `"task":"s1"`) {
		t.Errorf("raw answer %q", raw)
	}
}
