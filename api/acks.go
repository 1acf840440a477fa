package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// acksBatch applies the acks of several tasks sent in one request (POST
// /v1/acks): a client with many tasks in flight (a worker process running
// many of a job's tasks, or tasks of many jobs) sends the acks that wait
// while its earlier requests are answered together, and pays the
// request's cost once. Each ack is checked, authorized, counted against
// its job's quota and proposed as if it came alone to its ack route
// (Server.ack); the proposals join one Raft entry as concurrent ones do
// (node/propose.go). Each is answered in its own result, with the status
// it would have had alone: a refused ack refuses nothing else. The request
// itself fails only as a whole (a malformed body, more than
// wire.MaxBatchAcks acks, the member's rate limit, or a token that is
// not valid).
func (s *Server) acksBatch(r *http.Request) (any, uint64, error) {
	var b wire.AckBatchRequest
	if err := decodeBody(r, &b, false); err != nil {
		return nil, 0, err
	}
	n := len(b.Acks)
	if n == 0 || n > wire.MaxBatchAcks {
		return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "acks", "%d acks; a batch holds 1 to %d", n, wire.MaxBatchAcks)
	}
	if e := s.chargeBatch(r, n); e != nil {
		return nil, 0, e
	}
	out := &wire.AckBatchAnswer{Results: make([]wire.AckBatchResult, n)}
	idx := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range b.Acks {
		p, err := s.batchAck(r, &b.Acks[i])
		if err != nil {
			out.Results[i] = batchResult(nil, err)
			continue
		}
		wg.Go(func() {
			v, at, err := s.ack(r.Context(), p)
			res, _ := v.(*wire.AckResult)
			idx[i], out.Results[i] = at, batchResult(res, err)
		})
	}
	wg.Wait()
	return out, max(s.fsm.AppliedIndex(), slices.Max(idx)), nil
}

// batchAck is one ack of a batch as its own route would build it: the
// target checked as a path's (routeTarget), the token's scope (authorize's
// permJob), the body (TaskAck.Validate).
func (s *Server) batchAck(r *http.Request, it *wire.AckBatchItem) (*fsm.TaskAck, error) {
	if err := wire.CheckID("job", it.Job); err != nil {
		return nil, err
	}
	if it.Epoch == 0 || it.Epoch > wire.MaxEpoch {
		return nil, apiErr(http.StatusBadRequest, wire.CodeInvalid, "epoch", "%d is not an epoch: 1 to %d (2^63-1)", it.Epoch, uint64(wire.MaxEpoch))
	}
	if err := wire.CheckID("task", it.Task); err != nil {
		return nil, err
	}
	if s.cfg.Auth {
		tok := principalToken(r)
		if tok == nil {
			return nil, apiErr(http.StatusUnauthorized, wire.CodeUnauthenticated, "", "acks need a bearer token")
		}
		if tok.Role != wire.RoleOperator && !tok.Covers(it.Job) {
			return nil, apiErr(http.StatusForbidden, wire.CodeForbidden, "job", "an ack of job %q needs permission %q: job %q is out of scope; token %s is scoped to %s",
				it.Job, permJob, it.Job, tok.Accessor, tok.Scope())
		}
	}
	p := &fsm.TaskAck{Job: it.Job, Generation: it.Generation, Epoch: it.Epoch, Task: it.Task, Payloads: it.Payloads, Manifest: fsmManifestAck(it.Manifest)}
	return p, p.Validate()
}

// batchResult is an ack's outcome in a batch's answer.
func batchResult(res *wire.AckResult, err error) wire.AckBatchResult {
	if err == nil && res != nil {
		return wire.AckBatchResult{Status: http.StatusOK, Ack: res}
	}
	if err == nil {
		// Not an answer the ack route gives (the drop-acks control's
		// answer is an *wire.AckResult too).
		err = apiErr(http.StatusInternalServerError, wire.CodeInternal, "", "internal error")
	}
	e := toAPIError(err)
	body := e.body().Error
	return wire.AckBatchResult{Status: e.Status, Error: &body}
}

// chargeBatch counts a batch of n acks against the client's request rate
// as n requests (limit counted its first): a client sends no more acks
// in batches than it could one by one. A burst smaller than n is charged
// whole. Requests forwarded by a member were counted where they arrived
// (Server.forward).
func (s *Server) chargeBatch(r *http.Request, n int) *Error {
	if s.clients == nil || n <= 1 || s.fromMember(r) {
		return nil
	}
	if d, ok := s.clients.charge(clientKey(r), n-1, time.Now()); !ok {
		s.metrics.rejections.WithLabelValues(rejectRate).Inc()
		return rateLimited(d)
	}
	return nil
}

// chargeForwardedBatch counts a batch that this member forwards to the
// leader as chargeBatch does, its acks counted from the body, which is
// left for the forward to send.
func (s *Server) chargeForwardedBatch(r *http.Request) *Error {
	if s.clients == nil || s.fromMember(r) {
		return nil
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return toAPIError(jsonError(err))
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var b struct {
		Acks []json.RawMessage `json:"acks"`
	}
	if json.Unmarshal(raw, &b) != nil {
		return nil // the leader answers what is wrong with it
	}
	return s.chargeBatch(r, len(b.Acks))
}
