// Package node is the Raft wiring of one metastore member: it opens the Raft
// log and stable store (raft-boltdb, fsync on), the snapshot store and the
// TCP transport in the data directory, starts hashicorp/raft over the
// persistent state machine of package fsm, and bootstraps a new cluster when
// the directory is empty and no join addresses are configured.
//
// On top of Raft it provides what the API layer and the leader tasks need:
//
//   - Propose is the one way to change the state: it stamps a command with
//     the member's clock (Now), proposes it on the leader, grouped with the
//     commands queued meanwhile, and maps Raft's failures onto a few
//     sentinel errors, separating "nothing happened, retry" (ErrNotLeader,
//     ErrTryAgain) from "the write may or may not have committed"
//     (ErrUnknownOutcome); a rule violation is a *wire.RuleError.
//   - LinearizableRead confirms leadership with a quorum and waits until the
//     state machine reflects everything committed before the call.
//   - Membership: AddVoter and RemoveServer (leader only, one change at a
//     time) keep the Raft configuration and the replicated member records,
//     which carry each member's HTTP address, in step; Join asks a running
//     cluster to add this node; followers of a static initial cluster ask the
//     leader to write their missing member record.
//   - Leadership: after each election the new leader commits a barrier, only
//     then serves linearizable reads and starts the leader tasks (handed
//     to Lead once the node exists), and cancels them when it loses
//     leadership.
//   - Status, Ready, Snapshot, TransferLeadership and Shutdown for operators,
//     health checks and tests; Prometheus metrics of the node and, bridged
//     from go-metrics, of hashicorp/raft itself.
//
// DESIGN.md beside this file explains the startup sequence, the bootstrap
// rule, the leader barrier and what "outcome unknown" means.
package node
