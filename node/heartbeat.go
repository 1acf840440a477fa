package node

import "github.com/hashicorp/raft"

// serialHeartbeats is the Raft transport with hashicorp/raft's heartbeat
// fast path turned off: every AppendEntries, heartbeats included, is handled
// by Raft's main goroutine.
//
// The fast path (NetworkTransport.SetHeartbeatHandler) runs a heartbeat's
// appendEntries on the transport's connection goroutine. A heartbeat of a
// newer term then sets the current term and the follower state while the
// main goroutine may still be running the leader loop of the older term:
// the leader's next dispatchLogs reads the new term and appends its own
// entries under a term whose leader is another member. Two members then
// hold different entries with the same index and term; the Log Matching
// check cannot tell them apart, and a commit index that covers them makes
// each apply its own (hashicorp/raft issue #695, open in v1.7.3 and
// v1.8.0). The consistency suite saw it under leader pauses: an old leader
// woken by SIGCONT proposed two queued commands as the heartbeat of the new
// leader arrived, and kept its versions of those entries for good.
//
// Without the fast path a heartbeat waits behind a disk write of the main
// goroutine, which is how etcd's raft handles them too; election and lease
// timeouts must leave room for the slowest log append.
type serialHeartbeats struct {
	*raft.NetworkTransport
}

// SetHeartbeatHandler does not install the fast path: Raft's main goroutine
// receives heartbeats from Consumer() like every other RPC.
func (serialHeartbeats) SetHeartbeatHandler(func(raft.RPC)) {}

var (
	_ raft.Transport   = serialHeartbeats{}
	_ raft.WithClose   = serialHeartbeats{}
	_ raft.WithPreVote = serialHeartbeats{}
)
