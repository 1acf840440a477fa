package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/freeport"
)

// heartbeatProbe is a member's transport, built by newTransport, that Raft
// asked for the heartbeat fast path, and a transport that sends it
// heartbeats.
type heartbeatProbe struct {
	recv     *heartbeatGate
	send     *raft.NetworkTransport
	fastPath chan raft.RPC
}

func newHeartbeatProbe(t *testing.T) *heartbeatProbe {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.RaftAddr = freeport.Addr(t)
	logger := hclog.NewNullLogger()
	recv, _, err := newTransport(cfg, logger, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Close() })
	p := &heartbeatProbe{recv: recv, fastPath: make(chan raft.RPC, 1)}
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		p.fastPath <- rpc
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	p.send, err = raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.send.Close() })
	return p
}

// heartbeat sends a heartbeat of term and reports whether it took the fast
// path (else it came out of Consumer(), the channel of Raft's main
// goroutine, which answers it).
func (p *heartbeatProbe) heartbeat(t *testing.T, term uint64) (fast bool) {
	t.Helper()
	// The shape NetworkTransport recognises as a heartbeat: a term and a
	// leader, no previous entry, no entries, no commit index.
	hb := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("n2"), Addr: []byte(p.send.LocalAddr())},
		Term:      term,
	}
	sent := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sent <- p.send.AppendEntries("n1", p.recv.LocalAddr(), hb, &resp)
	}()
	select {
	case rpc := <-p.recv.Consumer():
		req, ok := rpc.Command.(*raft.AppendEntriesRequest)
		if !ok || req.Term != term || len(req.Entries) != 0 {
			t.Fatalf("consumer got %#v, want the heartbeat", rpc.Command)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
	case <-p.fastPath:
		fast = true
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat reached neither the consumer nor the handler")
	}
	if err := <-sent; err != nil {
		t.Fatalf("heartbeat not answered: %v", err)
	}
	return fast
}

// TestHeartbeatsReachTheMainGoroutine sends a heartbeat of a newer term to
// a deposed leader's transport: it must come out of Consumer(), the
// channel Raft's main goroutine reads, and never reach the fast-path
// handler: a heartbeat handled beside the leader loop lets a deposed leader
// append entries under the new leader's term (heartbeat.go).
func TestHeartbeatsReachTheMainGoroutine(t *testing.T) {
	p := newHeartbeatProbe(t)
	p.recv.setMember(role{raft.Leader, 6})
	if p.heartbeat(t, 7) {
		t.Fatal("the heartbeat was handled by the fast-path handler, beside Raft's main goroutine")
	}
}

// role is a fixed Raft role and term for the gate.
type role struct {
	state raft.RaftState
	term  uint64
}

func (r role) State() raft.RaftState { return r.state }
func (r role) CurrentTerm() uint64   { return r.term }

// TestHeartbeatGate: a heartbeat takes the fast path only when the member
// is a follower and the heartbeat is of its term; every other one reaches
// Consumer(), the channel of Raft's main goroutine.
func TestHeartbeatGate(t *testing.T) {
	p := newHeartbeatProbe(t)
	for _, c := range []struct {
		name   string
		member *role
		term   uint64
		fast   bool
	}{
		{"before Raft runs", nil, 7, false},
		{"follower, its term", &role{raft.Follower, 7}, 7, true},
		{"follower, a newer term", &role{raft.Follower, 6}, 7, false},
		{"follower, an older term", &role{raft.Follower, 8}, 7, false},
		{"candidate, its term", &role{raft.Candidate, 7}, 7, false},
		{"leader, its term", &role{raft.Leader, 7}, 7, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.member != nil {
				p.recv.setMember(*c.member)
			}
			if got := p.heartbeat(t, c.term); got != c.fast {
				t.Errorf("fast path %v, want %v", got, c.fast)
			}
		})
	}
}

// blockingLogs is a log store whose appends wait while blocked.
type blockingLogs struct {
	*raft.InmemStore
	mu      sync.Mutex
	blocked chan struct{} // closed when unblocked; nil when not blocked
}

func (b *blockingLogs) block() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked = make(chan struct{})
}

func (b *blockingLogs) unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked != nil {
		close(b.blocked)
		b.blocked = nil
	}
}

func (b *blockingLogs) StoreLogs(logs []*raft.Log) error {
	b.mu.Lock()
	ch := b.blocked
	b.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return b.InmemStore.StoreLogs(logs)
}

func (b *blockingLogs) StoreLog(l *raft.Log) error { return b.StoreLogs([]*raft.Log{l}) }

// startGatedMembers starts three bootstrapped Raft members in memory on
// gated TCP transports, with blockable log stores; transport wraps a
// member's gate in what its Raft is given.
func startGatedMembers(t *testing.T, transport func(i int, g *heartbeatGate) raft.Transport) ([]*raft.Raft, []*blockingLogs) {
	t.Helper()
	const n = 3
	logger := hclog.NewNullLogger()
	var (
		gates = make([]*heartbeatGate, n)
		logs  = make([]*blockingLogs, n)
		rafts = make([]*raft.Raft, n)
		conf  raft.Configuration
	)
	for i := range n {
		nt, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 5*time.Second, logger)
		if err != nil {
			t.Fatal(err)
		}
		gates[i] = newHeartbeatGate(nt)
		t.Cleanup(func() { gates[i].Close() })
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(fmt.Sprint("n", i)), Address: nt.LocalAddr()})
	}
	for i := range n {
		rc := raft.DefaultConfig()
		rc.LocalID = conf.Servers[i].ID
		rc.Logger = logger
		rc.HeartbeatTimeout = 200 * time.Millisecond
		rc.ElectionTimeout = 200 * time.Millisecond
		rc.LeaderLeaseTimeout = 100 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
		logs[i] = &blockingLogs{InmemStore: raft.NewInmemStore()}
		stable := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		trans := transport(i, gates[i])
		if err := raft.BootstrapCluster(rc, logs[i], stable, snaps, trans, conf); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(rc, &raft.MockFSM{}, logs[i], stable, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		gates[i].setMember(r)
		rafts[i] = r
		t.Cleanup(func() { r.Shutdown().Error() })
	}
	return rafts, logs
}

// TestLeaderKeepsLeaseWhileFollowersAppend: three Raft members on the
// gated transport; both followers' main goroutines are held in a log append
// for eight lease timeouts (as a snapshot install or a slow disk holds
// them). Their heartbeats still answer, so the leader keeps its lease and
// stays the leader throughout; the entry commits once the appends finish.
// Without the fast path the leader steps down within a lease timeout.
func TestLeaderKeepsLeaseWhileFollowersAppend(t *testing.T) {
	const n = 3
	rafts, logs := startGatedMembers(t, func(_ int, g *heartbeatGate) raft.Transport { return g })
	leader := -1
	deadline := time.Now().Add(10 * time.Second)
	for leader < 0 {
		for i, r := range rafts {
			if r.State() == raft.Leader {
				leader = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader after 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	if err := rafts[leader].Apply([]byte("warm"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the members shut down (cleanups run last first)
		for i := range n {
			logs[i].unblock()
		}
	})
	for i := range n {
		if i != leader {
			logs[i].block()
		}
	}
	roles := make(chan raft.Observation, 16)
	obs := raft.NewObserver(roles, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	rafts[leader].RegisterObserver(obs)
	defer rafts[leader].DeregisterObserver(obs)
	f := rafts[leader].Apply([]byte("held"), 10*time.Second)
	held := time.Now()
	select {
	case o := <-roles:
		t.Fatalf("the leader became %v %s after its followers' appends stalled (lease timeout 100ms)", o.Data, time.Since(held).Round(time.Millisecond))
	case <-time.After(800 * time.Millisecond): // the stall: eight lease timeouts
	}
	if s := rafts[leader].State(); s != raft.Leader {
		t.Fatalf("the leader is %v after the stall", s)
	}
	for i := range n {
		logs[i].unblock()
	}
	if err := f.Error(); err != nil {
		t.Fatalf("the held entry: %v", err)
	}
}

// TestStalledLeaderLosesLeadership: a leader whose log append waits for
// disk space (its main goroutine blocked in the append) sends no
// heartbeat, so the others elect a new leader instead of waiting with it.
// Without the check in retryPastGap the heartbeats go on and no one else
// leads.
func TestStalledLeaderLosesLeadership(t *testing.T) {
	stalled := make([]atomic.Bool, 3)
	rafts, logs := startGatedMembers(t, func(i int, g *heartbeatGate) raft.Transport {
		return retryPastGap{heartbeatGate: g, stalled: &stalled[i],
			termAt: func(uint64) (uint64, bool) { return 0, false }, retried: func(raft.ServerID, uint64, uint64, bool) {}}
	})
	leaderOf := func(skip int) int {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for i, r := range rafts {
				if i != skip && r.State() == raft.Leader {
					return i
				}
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
		}
		return -1
	}
	old := leaderOf(-1)
	if old < 0 {
		t.Fatal("no leader after 10s")
	}
	if err := rafts[old].Apply([]byte("warm"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs[old].unblock() }) // before the members shut down
	// The leader's next append waits, as for its next segment on a full disk.
	logs[old].block()
	stalled[old].Store(true)
	f := rafts[old].Apply([]byte("held"), 10*time.Second)
	next := leaderOf(old)
	if next < 0 {
		t.Fatal("no other member leads 10s after the leader's log stalled: its heartbeats held the followers")
	}
	if err := rafts[next].Apply([]byte("after"), 5*time.Second).Error(); err != nil {
		t.Fatalf("the new leader %d: %v", next, err)
	}
	// Space again: the old leader's append returns and it steps down.
	stalled[old].Store(false)
	logs[old].unblock()
	if err := f.Error(); err == nil {
		t.Log("the held entry was committed by the old leader before it stepped down")
	}
	deadline := time.Now().Add(10 * time.Second)
	for rafts[old].State() == raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("the old leader still leads 10s after its append returned")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestStopFastPathWaitsForTheFastPath: a heartbeat on the fast path holds
// the gate until its handler returns, so stopFastPath (called before
// Raft's shutdown) waits for it; after stopFastPath a heartbeat of the
// member's term goes to Raft's main goroutine. A heartbeat still on the
// fast path when the node closed its stores made Raft panic ("failed to
// save current term: closed").
func TestStopFastPathWaitsForTheFastPath(t *testing.T) {
	g := newHeartbeatProbe(t).recv
	g.setMember(role{raft.Follower, 7})
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := g.handler(func(rpc raft.RPC) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
	})
	heartbeat := func() raft.RPC {
		return raft.RPC{Command: &raft.AppendEntriesRequest{Term: 7}, RespChan: make(chan raft.RPCResponse, 1)}
	}
	go h(heartbeat())
	<-entered
	if g.fastMu.TryLock() {
		g.fastMu.Unlock()
		t.Fatal("a heartbeat on the fast path does not hold the gate: stopFastPath would not wait for it")
	}
	stopped := make(chan struct{})
	go func() { g.stopFastPath(); close(stopped) }()
	close(release)
	<-stopped

	done := make(chan struct{})
	go func() { h(heartbeat()); close(done) }()
	select {
	case rpc := <-g.Consumer():
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
	case <-done:
		t.Fatal("a heartbeat took the fast path after stopFastPath")
	}
	<-done
	if n := calls.Load(); n != 1 {
		t.Fatalf("the fast-path handler ran %d times, want 1", n)
	}
}

// TestShutdownTurnsTheFastPathOff: the node's shutdown turns the heartbeat
// fast path off (before Raft's shutdown and the stores' close, see
// heartbeatGate.stopFastPath).
func TestShutdownTurnsTheFastPathOff(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	n.trans.fastMu.RLock()
	off := n.trans.fastOff
	n.trans.fastMu.RUnlock()
	if !off {
		t.Fatal("the heartbeat fast path is still on after the node shut down")
	}
}
