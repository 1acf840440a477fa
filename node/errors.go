package node

import (
	"errors"
	"fmt"
)

// Errors returned by Node. Callers match them with errors.Is; most are
// wrapped with detail.
var (
	// ErrNotLeader means this node is not the leader. Nothing was proposed,
	// so the request is safe to retry on the leader.
	ErrNotLeader = errors.New("node: not the leader")

	// ErrNoLeader means no leader is known right now (an election is under
	// way, or this node is cut off), or the leader's HTTP address is not yet
	// known.
	ErrNoLeader = errors.New("node: no known leader")

	// ErrUnknownOutcome means the command was handed to Raft but its fate is
	// unknown: leadership was lost, the node shut down, or the deadline
	// passed before the entry was applied. The write may or may not commit.
	// Retry only with an idempotent command and read back to find out.
	ErrUnknownOutcome = errors.New("node: outcome unknown: the write may or may not have been committed")

	// ErrShutdown means the node is shutting down or has shut down. When it
	// is returned by Propose alone (not wrapped in ErrUnknownOutcome), nothing
	// was proposed.
	ErrShutdown = errors.New("node: shut down")

	// ErrTryAgain means the request was not carried out and may be retried
	// shortly: Raft's queue was full, a leadership transfer is in progress,
	// or the leader has not yet committed an entry of its term.
	ErrTryAgain = errors.New("node: temporarily unavailable, nothing was applied; retry")

	// ErrNotReady is returned by Ready when the node knows a leader but its
	// state machine has not yet applied everything it knows to be committed.
	ErrNotReady = errors.New("node: not ready")

	// ErrUnknownMember is returned by RemoveServer for an id that is neither
	// in the Raft configuration nor in the member records (HTTP 404).
	ErrUnknownMember = errors.New("node: unknown member")

	// ErrMemberConflict is returned by AddVoter when the id is already in the
	// cluster at another Raft address, or the address belongs to another id.
	// The existing server must be removed first (HTTP 409).
	ErrMemberConflict = errors.New("node: member conflict")

	// ErrQuorumAtRisk is returned by AddVoter and RemoveServer for a change
	// after which the voters this leader can reach would not form a quorum
	// of the new configuration (etcd's strict reconfiguration check): the
	// cluster would be left without a leader. Nothing was changed (HTTP
	// 409); start the member, or repair the unreachable ones, first.
	ErrQuorumAtRisk = errors.New("node: membership change would leave no quorum of reachable voters")
)

// JoinError is a join request refused by the cluster with an HTTP status
// (JSON body {"error":{"code","field","message"}}).
type JoinError struct {
	// Addr is the HTTP address the request was sent to.
	Addr string
	// Status is the HTTP status code of the answer.
	Status int
	// Code, Field and Message come from the JSON error body, when present.
	Code    string
	Field   string
	Message string
}

func (e *JoinError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "no error message"
	}
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("node: join via %s refused (HTTP %d): %s", e.Addr, e.Status, msg)
}

// Temporary reports whether the request may succeed if retried: server
// errors, 409 Conflict and 429 Too Many Requests. Other 4xx answers are
// final.
func (e *JoinError) Temporary() bool {
	if e.Status >= 400 && e.Status < 500 {
		return e.Status == 409 || e.Status == 429
	}
	return true
}
