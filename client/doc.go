// Package client is the Go client stream workers use to checkpoint through
// metastore: jobs and attempts, epochs and acks with inline payloads, blob
// uploads and incremental state manifests (TaskState), blocking waits for
// completion, and restores that read only what a task checkpointed. The
// operator calls (operator.go) manage the cluster: Members, AddMember,
// RemoveMember, TransferLeadership, CreateToken, Tokens, RevokeToken,
// SaveSnapshot, RestoreSnapshot, GCStatus, RunGC, Verify and Fsck.
//
//	c, err := client.New(client.Config{Endpoints: []string{"http://10.0.0.1:7070", "http://10.0.0.2:7070"}})
//	att, err := c.StartAttempt(ctx, "orders", "run-42", tasks)
//	_, err = c.BeginEpoch(ctx, "orders", att.Generation, 7)
//	_, err = c.Ack(ctx, "orders", att.Generation, 7, "source-0", client.AckRequest{
//		Payloads: map[wire.Kind][]byte{wire.KindInput: offsets}})
//	done, err := c.AwaitEpoch(ctx, "orders", 7)
//
// Requests and answers are the types of package wire (wire.Job,
// wire.EpochDetail, wire.RestorePlan, ...), which depends on the standard
// library only: a worker that imports the client does not link the
// server's Raft, storage or metrics packages.
//
// A cluster served over https takes Config.TLS, typically from
// LoadTLSConfig with the CA file the members' certificates chain to; bare
// host:port endpoints then mean https, and members learned from
// /v1/status are reached with the scheme of the endpoint that listed them.
//
// # Endpoints and retries
//
// Any member takes any request: a follower forwards writes (and reads that
// are not stale) to the leader. The client sends to one endpoint at a time;
// after an answer it prefers the member that served it (the leader, named
// by X-Metastore-Served-By, whose address it learns from /v1/status), and it
// moves to the next endpoint when one cannot be reached or answers 502, 503
// or 504.
//
// A call is repeated, up to Config.MaxAttempts with jittered exponential
// backoff, only when that is safe:
//
//   - the request certainly did not take effect: the member refused the
//     connection, or answered with "retryable": true (no_leader, not_leader,
//     unavailable);
//   - or its outcome is unknown (outcome_unknown, a timeout, a connection
//     broken after the request was sent) and repeating it cannot apply it
//     twice. Every mutation of the API is idempotent by content: the same
//     ack twice is one ack, an attempt start is keyed by its attempt id, a
//     begin, abort or pin of the same epoch answers the epoch. The one
//     exception is POST /v1/jobs/{job}/uploads, which hands out fresh keys
//     each time; repeating it is harmless (an unused slot expires and is
//     collected), see UploadSlots.
//
// When the attempts run out the error is a *RetryError matching
// ErrOutcomeUnknown if a mutation may have been applied (repeat the same
// call to find out; never assume it failed) and ErrUnavailable otherwise.
// When the caller's context ends, the error matches the context's error
// (errors.Is with context.Canceled or context.DeadlineExceeded), and also
// ErrOutcomeUnknown if an attempt already sent may have been applied; a
// context error that does not match ErrOutcomeUnknown means the call was
// not applied (it ended before its request went out: in an ack queue, in a
// backoff after refusals, or before its first attempt).
// Any other error answer is an *APIError whose code maps to a sentinel
// (ErrFenced, ErrConflict, ErrNotFound, ErrEpochNotPending, ErrBlobDeleting,
// ErrInvalid, ...); errors.Is also matches the fsm package's code sentinels.
//
// # Acks of many tasks
//
// One Client serves all the tasks of a worker process. It keeps at most
// Config.MaxAckRequests ack requests in flight (default 4): an ack made
// while that many are in flight waits, and the acks that waited go
// together in the next request (POST /v1/acks), each applied, fenced and
// answered as if it were sent alone. An ack with nothing waiting ahead of
// it goes alone at once. An ack the batch could not answer for certain is
// sent again alone, with the retries above; an ack whose batch may have
// been applied is reported ErrOutcomeUnknown rather than refused, as a
// single ack is.
//
// # State
//
// Small state travels inline in the ack (AckRequest.Payloads). Large state
// is uploaded as blobs (Upload) and acknowledged as a manifest of ranges;
// TaskState keeps a task's manifest and produces each ack's delta. Restore
// answers, per kind, what the task recovers; Restore.OpenState reads the
// state's ranges lazily and makes no request at all for a task that has
// nothing to recover (ErrNothingToRecover) or no prior state
// (ErrNoPriorState).
//
// Stats counts the requests made, so a worker can report what it asked of
// the metastore and of the object store.
package client
