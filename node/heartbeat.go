package node

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// heartbeatGate is the Raft transport with hashicorp/raft's heartbeat fast
// path kept for the heartbeats that cannot change this member's term or
// role, and every other heartbeat handed to Raft's main goroutine.
//
// The fast path (NetworkTransport.SetHeartbeatHandler) runs a heartbeat's
// appendEntries on the transport's connection goroutine, beside Raft's
// main goroutine. A heartbeat of a newer term then sets the current term
// and the follower state while the main goroutine may still run the leader
// loop of the older term: that loop's next dispatchLogs appends its own
// entries under a term whose leader is another member. Two members then
// hold different entries with the same index and term; the Log Matching
// check cannot tell them apart, and a commit index that covers them makes
// each apply its own (hashicorp/raft issue #695, open in v1.7.3 and
// v1.8.0). The consistency suite saw it under leader pauses: an old leader
// woken by SIGCONT proposed two queued commands as the heartbeat of the new
// leader arrived, and kept its versions of those entries for good.
//
// Without any fast path a heartbeat waits behind whatever the main
// goroutine is doing: a log append, and for seconds a snapshot install (it
// copies the snapshot and waits for the state machine to restore it). The
// leader hears from no follower for that long and, past its lease, steps
// down: a snapshot restore of a few tens of megabytes to two followers cost
// the leader its leadership every time under load, and the restore
// answered 503.
//
// So the gate lets a heartbeat take the fast path only when this member is
// a follower and the heartbeat is of its current term. appendEntries then
// changes neither: it records the leader and the contact and answers
// success. The term only grows, so if the member moved on between the
// check and the handler (an election of its own), the heartbeat is of an
// older term by then and refused, as the main goroutine would; and a
// member can only be the leader of a term in which it sent, not received,
// heartbeats. Every other heartbeat, and every heartbeat before Raft is
// running, goes to the main goroutine through Consumer() like any RPC.
type heartbeatGate struct {
	*raft.NetworkTransport
	// rpcs is what Raft's main goroutine reads (Consumer): the transport's
	// RPCs, forwarded, and the heartbeats the gate keeps off the fast path.
	rpcs chan raft.RPC
	stop chan struct{}
	once sync.Once
	// member is the Raft instance whose role and term decide; nil until
	// Raft runs.
	member atomic.Pointer[raftRole]
	// fastMu is held (read) by a heartbeat on the fast path from the gate's
	// check until the handler returns; stopFastPath takes it to turn the
	// path off (fastOff) once no heartbeat is on it.
	fastMu  sync.RWMutex
	fastOff bool
}

// raftRole is what the gate reads of Raft: *raft.Raft has both.
type raftRole interface {
	State() raft.RaftState
	CurrentTerm() uint64
}

func newHeartbeatGate(t *raft.NetworkTransport) *heartbeatGate {
	g := &heartbeatGate{NetworkTransport: t, rpcs: make(chan raft.RPC), stop: make(chan struct{})}
	go g.forward(t.Consumer())
	return g
}

func (g *heartbeatGate) forward(src <-chan raft.RPC) {
	for {
		select {
		case rpc := <-src:
			select {
			case g.rpcs <- rpc:
			case <-g.stop:
				return
			}
		case <-g.stop:
			return
		}
	}
}

// setMember makes r's role and term decide which heartbeats take the fast
// path.
func (g *heartbeatGate) setMember(r raftRole) { g.member.Store(&r) }

// Consumer returns the channel of RPCs for Raft's main goroutine.
func (g *heartbeatGate) Consumer() <-chan raft.RPC { return g.rpcs }

// SetHeartbeatHandler installs fn as the fast path for the heartbeats that
// pass the gate (see heartbeatGate).
func (g *heartbeatGate) SetHeartbeatHandler(fn func(raft.RPC)) {
	if fn == nil {
		g.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	g.NetworkTransport.SetHeartbeatHandler(g.handler(fn))
}

// handler is the transport's heartbeat handler around fast path fn.
func (g *heartbeatGate) handler(fn func(raft.RPC)) func(raft.RPC) {
	return func(rpc raft.RPC) {
		if g.runFast(rpc, fn) {
			return
		}
		// The connection's goroutine waits for the answer the main
		// goroutine sends on rpc's channel, as for any RPC.
		select {
		case g.rpcs <- rpc:
		case <-g.stop:
			rpc.Respond(nil, raft.ErrTransportShutdown)
		}
	}
}

// runFast runs fn on a heartbeat that passes the gate, unless the fast
// path was turned off, and reports whether it did.
func (g *heartbeatGate) runFast(rpc raft.RPC, fn func(raft.RPC)) bool {
	g.fastMu.RLock()
	defer g.fastMu.RUnlock()
	if g.fastOff || !g.fast(rpc) {
		return false
	}
	fn(rpc)
	return true
}

// stopFastPath turns the fast path off, once the heartbeats on it have
// returned; later heartbeats go to Raft's main goroutine. The node calls
// it before Raft's shutdown: a heartbeat that passed Raft's own shutdown
// check on the fast path just before Raft stopped saw a member no longer
// a follower and wrote its term to the stable store, which the node
// closes right after Raft and the transport, and Raft panicked ("failed
// to save current term").
func (g *heartbeatGate) stopFastPath() {
	g.fastMu.Lock()
	defer g.fastMu.Unlock()
	g.fastOff = true
}

// fast reports whether a heartbeat may be handled beside the main
// goroutine: this member is a follower and the heartbeat is of its term.
func (g *heartbeatGate) fast(rpc raft.RPC) bool {
	p := g.member.Load()
	req, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if p == nil || !ok {
		return false
	}
	r := *p
	return r.State() == raft.Follower && req.Term == r.CurrentTerm()
}

// Close stops the forwarding and closes the transport.
func (g *heartbeatGate) Close() error {
	g.once.Do(func() { close(g.stop) })
	return g.NetworkTransport.Close()
}

var (
	_ raft.Transport   = (*heartbeatGate)(nil)
	_ raft.WithClose   = (*heartbeatGate)(nil)
	_ raft.WithPreVote = (*heartbeatGate)(nil)
)
