package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/metastore/metastore/wire"
)

// DefaultMaxAckRequests is Config.MaxAckRequests's default: enough
// requests in flight that an ack rarely waits for one to be answered, few
// enough that the acks which do wait travel together.
const DefaultMaxAckRequests = 4

// Bounds of one batch of acks: at most maxBatchAcks acks, and a body of
// at most maxBatchBytes, below the smallest --max-body-bytes a member
// accepts (64 KiB). An ack whose own encoding is larger than
// maxBatchedAckBytes is always sent alone.
const (
	maxBatchAcks       = 128
	maxBatchBytes      = 48 << 10
	maxBatchedAckBytes = 8 << 10
)

// ackQueue sends a client's acks: alone while fewer than
// Config.MaxAckRequests ack requests are in flight, else queued and sent
// together (POST /v1/acks) by the first request to be answered.
type ackQueue struct {
	mu       sync.Mutex
	queue    []*ackCall
	inflight int
	// aloneUntil: a member without the batch route (an older release,
	// 404 or 405) answered a batch; every ack goes alone until then
	// (aloneFor later), when batches are tried again: a rolling upgrade
	// may have replaced it.
	aloneUntil time.Time
}

// aloneFor is how long acks go alone after a member answered that it has
// no batch route.
const aloneFor = time.Minute

// alone reports whether acks go alone now; the caller holds q.mu.
func (q *ackQueue) alone() bool { return !q.aloneUntil.IsZero() && time.Now().Before(q.aloneUntil) }

// ackCall is an ack waiting in the queue or sent in a batch.
type ackCall struct {
	ctx  context.Context
	item wire.AckBatchItem
	// raw is the item's JSON, made by the caller's goroutine.
	raw  []byte
	sent bool // taken by a batch; guarded by ackQueue.mu
	done chan struct{}
	res  *wire.AckResult
	err  error
}

func (a *ackCall) finish(res *wire.AckResult, err error) {
	a.res, a.err = res, err
	close(a.done)
}

// ack sends it alone when a request slot is free and no ack waits, else
// queues it, and returns its answer.
func (q *ackQueue) ack(ctx context.Context, c *Client, it wire.AckBatchItem) (*wire.AckResult, error) {
	limit := c.cfg.MaxAckRequests
	if _, raw := ctx.Value(rawAnswerKey{}).(*[]byte); raw || limit < 0 {
		return c.ackAlone(ctx, &it, false)
	}
	q.mu.Lock()
	if q.alone() || (len(q.queue) == 0 && q.inflight < limit) {
		q.inflight++
		q.mu.Unlock()
		res, err := c.ackAlone(ctx, &it, false)
		q.release(c)
		return res, err
	}
	q.mu.Unlock()
	raw, err := marshal(&it)
	if err != nil {
		return nil, fmt.Errorf("metastore: ack: encoding the request: %w", err)
	}
	if len(raw) > maxBatchedAckBytes {
		return c.ackAlone(ctx, &it, false)
	}
	call := &ackCall{ctx: ctx, item: it, raw: raw, done: make(chan struct{})}
	q.mu.Lock()
	q.queue = append(q.queue, call)
	q.startLocked(c)
	q.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-call.done: // answered as the caller gave up
		return call.res, call.err
	default:
	}
	if !call.sent {
		for i, w := range q.queue {
			if w == call {
				q.queue = append(q.queue[:i], q.queue[i+1:]...)
				break
			}
		}
		return nil, fmt.Errorf("metastore: %s %s: %w", http.MethodPut, ackPath(&it), ctx.Err())
	}
	// The batch holding it may have applied it.
	return nil, &RetryError{Method: http.MethodPut, Path: ackPath(&it), Attempts: 1, Unknown: true, Last: ctx.Err()}
}

// release frees the request slot of an answered ack request, and sends
// what queued meanwhile.
func (q *ackQueue) release(c *Client) {
	q.mu.Lock()
	q.inflight--
	q.startLocked(c)
	q.mu.Unlock()
}

// startLocked sends the queued acks in one batch when a request slot is
// free, the caller holding q.mu.
func (q *ackQueue) startLocked(c *Client) {
	if len(q.queue) == 0 {
		return
	}
	if q.alone() {
		for _, a := range q.queue {
			a.sent = true
		}
		c.sendAlone(q.queue, false)
		q.queue = nil
		return
	}
	if q.inflight >= c.cfg.MaxAckRequests {
		return
	}
	n, size := 0, 0
	for n < len(q.queue) && n < maxBatchAcks && (n == 0 || size+len(q.queue[n].raw)+1 <= maxBatchBytes) {
		size += len(q.queue[n].raw) + 1
		n++
	}
	batch := make([]*ackCall, n)
	copy(batch, q.queue)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	for _, a := range batch {
		a.sent = true
	}
	q.inflight++
	go c.sendAcks(batch)
}

// sendAcks sends a batch of acks and hands each its answer. An ack the
// batch could not answer for certain (the request failed, or the ack's
// own answer is one to retry) is sent again alone, on its own route, with
// the ack route's retries: an ack is idempotent by content, so a batch
// that did land is answered there with the stored ack.
func (c *Client) sendAcks(batch []*ackCall) {
	defer c.acks.release(c)
	body := make([]byte, 0, 16+len(batch)*(len(batch[0].raw)+1))
	body = append(body, `{"acks":[`...)
	for i, a := range batch {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, a.raw...)
	}
	body = append(body, "]}"...)
	c.ackBatches.Add(1)
	c.acksBatched.Add(int64(len(batch)))
	var ans wire.AckBatchAnswer
	// The batch outlives any one caller's context; each caller stops
	// waiting at its own (ackQueue.ack).
	res, err := c.do(context.Background(), &request{method: http.MethodPost, path: "/v1/acks", body: body, class: classMutation}, &ans)
	if err == nil && len(ans.Results) != len(batch) {
		err = &RetryError{Method: http.MethodPost, Path: "/v1/acks", Attempts: 1, Unknown: true,
			Last: fmt.Errorf("%d results for %d acks", len(ans.Results), len(batch))}
	}
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && (ae.Code == wire.CodeRouteNotFound || ae.Status == http.StatusMethodNotAllowed) {
			c.acks.mu.Lock()
			c.acks.aloneUntil = time.Now().Add(aloneFor)
			c.acks.mu.Unlock()
		}
		c.sendAlone(batch, errors.Is(err, ErrOutcomeUnknown))
		return
	}
	for i, a := range batch {
		r := ans.Results[i]
		if r.Status == http.StatusOK && r.Ack != nil {
			a.finish(r.Ack, nil)
			continue
		}
		ae := &APIError{Status: r.Status, Code: wire.Code(fmt.Sprintf("http_%d", r.Status)), Method: http.MethodPut, Path: ackPath(&a.item)}
		if e := r.Error; e != nil {
			ae.Code, ae.Field, ae.Message, ae.Retryable = e.Code, e.Field, e.Message, e.Retryable
		}
		switch {
		case ae.Retryable || outcomeUnknownAnswer(ae):
			// A quota's 429, a full disk: the ack route's retries and
			// backoff take it from here.
			c.sendAlone([]*ackCall{a}, res.unknown || outcomeUnknownAnswer(ae))
		case res.unknown && !errors.Is(ae, ErrInvalid):
			// An earlier attempt of the batch may have applied it and
			// caused this refusal (ack route: Client.do).
			a.finish(nil, &RetryError{Method: http.MethodPut, Path: ae.Path, Attempts: 1, Unknown: true, Last: ae})
		default:
			a.finish(nil, ae)
		}
	}
}

// sendAlone sends each ack of batch on its own route, concurrently.
// maybeLanded: an earlier request may have applied them.
func (c *Client) sendAlone(batch []*ackCall, maybeLanded bool) {
	for _, a := range batch {
		go func() { a.finish(c.ackAlone(a.ctx, &a.item, maybeLanded)) }()
	}
}
