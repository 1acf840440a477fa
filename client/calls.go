package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

func jobPath(job string) string { return "/v1/jobs/" + url.PathEscape(job) }

func epochPath(job string, epoch uint64) string {
	return jobPath(job) + "/epochs/" + strconv.FormatUint(epoch, 10)
}

func (c *Client) mutate(ctx context.Context, method, path string, body any, out any) error {
	return c.mutateQuery(ctx, method, path, nil, body, out)
}

// mutateQuery is mutate with a query.
func (c *Client) mutateQuery(ctx context.Context, method, path string, query url.Values, body any, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = marshal(body); err != nil {
			return fmt.Errorf("metastore: %s %s: encoding the request: %w", method, path, err)
		}
	}
	_, err := c.do(ctx, &request{method: method, path: path, query: query, body: raw, class: classMutation}, out)
	return err
}

func (c *Client) get(ctx context.Context, path string, query url.Values, out any) error {
	_, err := c.do(ctx, &request{method: http.MethodGet, path: path, query: query, class: classRead}, out)
	return err
}

// Status returns the status of a member (role, leader, term, indexes,
// members), and teaches the client the members' addresses and the leader.
func (c *Client) Status(ctx context.Context) (*wire.Status, error) {
	var st wire.Status
	_, base := c.current()
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/status", class: classRead, local: true}, &st); err != nil {
		return nil, err
	}
	c.learn(&st, schemeOf(base))
	return &st, nil
}

// PutJob creates a job or changes its config; zero fields of cfg take the
// store's defaults.
func (c *Client) PutJob(ctx context.Context, job string, cfg wire.JobConfig) (*wire.Job, error) {
	var out wire.Job
	err := c.mutate(ctx, http.MethodPut, jobPath(job), wire.JobPutRequest{Config: cfg}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteJob deletes a job and releases every reference its checkpoints
// and manifests hold; its upload intents expire. While the job has pinned
// savepoints it is refused (an *APIError with code job_pinned, matching
// ErrConflict, whose message names them) unless force, which releases
// them too. Deleting a deleted job answers the same deletion; a job that
// never existed is ErrNotFound. The deleted job's workers are answered
// ErrJobDeleted; the name can be used again with PutJob, and the new job's
// generations start above the deleted one's. Safe to retry.
func (c *Client) DeleteJob(ctx context.Context, job string, force bool) (*wire.JobDeletion, error) {
	var out wire.JobDeletion
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	if _, err := c.do(ctx, &request{method: http.MethodDelete, path: jobPath(job), query: q, class: classMutation}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Job reads a job: generation, last and latest completed epochs, pending
// and retained epochs.
func (c *Client) Job(ctx context.Context, job string) (*wire.Job, error) {
	var out wire.Job
	if err := c.get(ctx, jobPath(job), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Jobs lists every job.
func (c *Client) Jobs(ctx context.Context) ([]wire.Job, error) {
	var out wire.JobList
	if err := c.get(ctx, "/v1/jobs", nil, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// StartAttempt starts an attempt of the job with its task set: it bumps the
// generation (fencing the previous attempt's workers), aborts the epochs
// still pending, and answers the generation every later write carries. The
// attempt id makes it safe to retry: the same id with the same tasks
// answers the same generation, with other tasks it is ErrConflict, and once
// a newer attempt started it is ErrFenced.
func (c *Client) StartAttempt(ctx context.Context, job, attemptID string, tasks []wire.Task) (*wire.Attempt, error) {
	var out wire.Attempt
	body := wire.AttemptStartRequest{AttemptID: attemptID, Tasks: make([]wire.TaskRequest, len(tasks))}
	for i := range tasks {
		body.Tasks[i] = wire.TaskRequest{ID: tasks[i].ID, Caps: &tasks[i].Caps}
	}
	if err := c.mutate(ctx, http.MethodPost, jobPath(job)+"/attempts", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Attempt reads attempt generation gen of a job with its tasks; 0 means
// the current attempt.
func (c *Client) Attempt(ctx context.Context, job string, gen uint64) (*wire.AttemptDetail, error) {
	g := "current"
	if gen != 0 {
		g = strconv.FormatUint(gen, 10)
	}
	var out wire.AttemptDetail
	if err := c.get(ctx, jobPath(job)+"/attempts/"+g, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BeginEpoch opens an epoch of the current attempt. Epochs are strictly
// increasing per job; a retried begin of the same epoch in the same
// generation answers the epoch.
func (c *Client) BeginEpoch(ctx context.Context, job string, gen, epoch uint64) (*wire.Epoch, error) {
	var out wire.Epoch
	body := wire.EpochBeginRequest{Generation: gen, Epoch: epoch}
	if err := c.mutate(ctx, http.MethodPost, jobPath(job)+"/epochs", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AckRequest is what a task acknowledges an epoch with.
type AckRequest struct {
	// Payloads are inline payloads by kind (at most wire.MaxInlinePayload
	// bytes each); the task must have the kind's capability.
	Payloads map[wire.Kind][]byte
	// Manifest is the task's state manifest change, from
	// TaskState.Manifest; nil keeps the manifest of the attempt's previous
	// ack.
	Manifest *wire.ManifestAck
}

// Ack acknowledges epoch for task. Repeating the same ack is answered with
// the stored ack (one ack); a different ack for the same task and epoch is
// ErrConflict. On ErrOutcomeUnknown, repeat the same call: it is the only
// way to learn whether the ack was stored. Acks made while
// Config.MaxAckRequests ack requests are in flight travel together in
// one request (acks.go), each applied and answered as if sent alone.
func (c *Client) Ack(ctx context.Context, job string, gen, epoch uint64, task string, ack AckRequest) (*wire.AckResult, error) {
	return c.acks.ack(ctx, c, wire.AckBatchItem{Job: job, Epoch: epoch, Task: task, Generation: gen, Payloads: ack.Payloads, Manifest: ack.Manifest})
}

// ackAlone sends one ack on its own route. maybeLanded: a batch that held
// it may have applied it.
func (c *Client) ackAlone(ctx context.Context, it *wire.AckBatchItem, maybeLanded bool) (*wire.AckResult, error) {
	raw, err := marshal(wire.TaskAckRequest{Generation: it.Generation, Payloads: it.Payloads, Manifest: it.Manifest})
	if err != nil {
		return nil, fmt.Errorf("metastore: ack: encoding the request: %w", err)
	}
	var out wire.AckResult
	r := &request{method: http.MethodPut, path: ackPath(it), body: raw, class: classMutation, maybeLanded: maybeLanded}
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func ackPath(it *wire.AckBatchItem) string {
	return epochPath(it.Job, it.Epoch) + "/acks/" + url.PathEscape(it.Task)
}

// AbortEpoch aborts a pending epoch with a reason (may be empty). Aborting
// an aborted epoch again answers it; a completed one is
// ErrEpochNotPending.
func (c *Client) AbortEpoch(ctx context.Context, job string, gen, epoch uint64, reason string) (*wire.Epoch, error) {
	var out wire.Epoch
	body := wire.EpochAbortRequest{Generation: gen, Reason: reason}
	if err := c.mutate(ctx, http.MethodPost, epochPath(job, epoch)+"/abort", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pin keeps a completed epoch as a savepoint, optionally named; retention
// never subsumes it until Unpin.
func (c *Client) Pin(ctx context.Context, job string, epoch uint64, name string) (*wire.Epoch, error) {
	var out wire.Epoch
	var body any // no body without a name
	if name != "" {
		body = wire.PinRequest{Name: name}
	}
	if err := c.mutate(ctx, http.MethodPut, epochPath(job, epoch)+"/pin", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unpin releases a savepoint.
func (c *Client) Unpin(ctx context.Context, job string, epoch uint64) (*wire.Epoch, error) {
	var out wire.Epoch
	if err := c.mutate(ctx, http.MethodDelete, epochPath(job, epoch)+"/pin", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Epoch reads an epoch with its per-task statistics and stragglers.
func (c *Client) Epoch(ctx context.Context, job string, epoch uint64) (*wire.EpochDetail, error) {
	var out wire.EpochDetail
	if err := c.get(ctx, epochPath(job, epoch), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Epochs lists the remembered epochs of a job; state filters when not
// empty.
func (c *Client) Epochs(ctx context.Context, job string, state wire.EpochState) ([]wire.Epoch, error) {
	var q url.Values
	if state != "" {
		q = url.Values{"state": {string(state)}}
	}
	var out wire.EpochList
	if err := c.get(ctx, jobPath(job)+"/epochs", q, &out); err != nil {
		return nil, err
	}
	return out.Epochs, nil
}

// AwaitEpoch blocks until the epoch is no longer pending, with blocking
// queries (?index=&wait=), not polling. It returns the epoch once it
// completed (also when it has since been subsumed), an error matching
// ErrEpochAborted (an *EpochAbortedError with the reason) when it was
// aborted, or the context's error.
func (c *Client) AwaitEpoch(ctx context.Context, job string, epoch uint64) (*wire.EpochDetail, error) {
	var index uint64
	for {
		q := url.Values{}
		r := &request{method: http.MethodGet, path: epochPath(job, epoch), query: q, class: classRead}
		if index > 0 {
			q.Set("index", strconv.FormatUint(index, 10))
			q.Set("wait", AwaitWait.String())
			r.wait = AwaitWait
		}
		var d wire.EpochDetail
		if _, err := c.do(ctx, r, &d); err != nil {
			return nil, err
		}
		switch d.State {
		case wire.EpochCompleted, wire.EpochSubsumed:
			return &d, nil
		case wire.EpochAborted:
			return &d, &EpochAbortedError{Job: job, Epoch: epoch, Reason: d.Reason, Detail: &d}
		}
		index = max(d.ModifyIndex, 1)
	}
}

// EpochManifest reads the manifest task acknowledged in epoch.
func (c *Client) EpochManifest(ctx context.Context, job string, epoch uint64, task string) (*manifests.Manifest, error) {
	var out wire.ManifestAnswer
	if err := c.get(ctx, epochPath(job, epoch)+"/manifests/"+url.PathEscape(task), nil, &out); err != nil {
		return nil, err
	}
	if out.Manifest == nil {
		out.Manifest = &manifests.Manifest{}
	}
	return out.Manifest, nil
}
