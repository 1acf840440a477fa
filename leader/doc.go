// Package leader holds the tasks a member runs while it is the leader,
// beside the node's own duties (the barrier and its member record): they
// read the local state machine, which is current on the leader, and change
// the state through the node's one propose path (node.Node.Propose),
// stamped with its clock (node.Node.Now). node.Node.Lead starts them in
// every term the member leads and cancels them when the term ends.
//
//   - EpochTimeouts aborts the epochs whose ack timeout has passed.
//   - AuthBootstrap sets the object-URL signing key and creates the
//     bootstrap operator token.
//   - SlotKey sets the key that signs upload slots (fsm/upload_slots.go).
//
// The garbage collector (package gc) is the third leader task; it lives in
// its own package because the API also runs it on demand.
package leader

import (
	"context"
	"time"

	"github.com/metastore/metastore/fsm"
)

// Proposer is what the tasks need of their member; node.Node is one.
type Proposer interface {
	// Propose changes the state (node.Node.Propose).
	Propose(ctx context.Context, t fsm.CommandType, payload any) (any, uint64, error)
	// Now is the clock the proposer stamps into its commands.
	Now() time.Time
}
