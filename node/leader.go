package node

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// leaderSession is one term of leadership on this node: the barrier, the
// member record, and the leader tasks.
type leaderSession struct {
	term   uint64
	cancel context.CancelFunc
	done   chan struct{}
}

// Lead starts following leadership. For every term in which this node is
// leader it waits for the leader's barrier (everything from earlier terms
// is then applied), writes its member record, and runs each of tasks in its
// own goroutine with a context cancelled on leadership loss or shutdown. A
// task must return promptly once its context is cancelled: the next term
// does not start tasks until the previous ones have returned.
//
// Call Lead once, right after New: the tasks may then be built on the node
// (they propose with Propose). Until Lead is called the node may win an
// election but serves no linearizable read. A second call panics.
func (n *Node) Lead(tasks map[string]func(ctx context.Context)) {
	if !n.leading.CompareAndSwap(false, true) {
		panic("node: Lead called twice")
	}
	if n.closing.Load() {
		return
	}
	n.tasks = tasks
	n.wg.Add(1)
	go n.runLeadership()
}

// runLeadership follows Raft's state. Observations (delivered without ever
// blocking Raft; dropped if the buffer is full) wake it; a poll covers drops.
// Whenever this node is leader in a term it has no session for, it stops the
// old session and starts one for the new term; when it is not leader, it
// stops the session.
func (n *Node) runLeadership() {
	defer n.wg.Done()
	tick := time.NewTicker(leaderPollInterval)
	defer tick.Stop()
	var sess *leaderSession
	defer func() { n.stopSession(sess) }()
	var lastLeader raft.ServerID
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-n.obsCh:
			if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" && lo.LeaderID != lastLeader {
				lastLeader = lo.LeaderID
				n.metrics.leaderChanges.Inc()
				n.log.Info("leader changed", "leader_id", lo.LeaderID, "leader_raft_addr", lo.LeaderAddr)
				n.noteLeaderChange(string(lo.LeaderID))
				n.kickMemberCheck()
			}
		case <-tick.C:
		}
		leading := n.raft.State() == raft.Leader
		n.fsm.SetLeading(leading) // a follower commits its state file less often
		if leading {
			term := n.raft.CurrentTerm()
			if sess == nil || sess.term != term {
				n.stopSession(sess)
				sess = n.startSession(term)
			}
		} else if sess != nil {
			n.stopSession(sess)
			sess = nil
		}
	}
}

// noteLeaderChange records a leader change for Status.
func (n *Node) noteLeaderChange(leader string) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if len(n.leaderChanges) == MaxLeaderChanges {
		n.leaderChanges = append(n.leaderChanges[:0], n.leaderChanges[1:]...)
	}
	n.leaderChanges = append(n.leaderChanges, LeaderChange{At: time.Now(), LeaderID: leader, Term: n.raft.CurrentTerm()})
}

func (n *Node) startSession(term uint64) *leaderSession {
	ctx, cancel := context.WithCancel(n.ctx)
	s := &leaderSession{term: term, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		n.lead(ctx, term)
	}()
	return s
}

// stopSession cancels s and waits for its leader tasks to return, so that a
// task never runs twice at once on this node.
func (n *Node) stopSession(s *leaderSession) {
	if s == nil {
		return
	}
	s.cancel()
	n.readyTerm.CompareAndSwap(s.term, 0)
	warn := time.NewTimer(5 * time.Second)
	defer warn.Stop()
	select {
	case <-s.done:
	case <-warn.C:
		n.log.Warn("leader tasks slow to stop after leadership ended", "term", s.term)
		<-s.done
	}
	n.log.Info("leadership ended", "term", s.term)
}

// lead runs one term of leadership until ctx is cancelled.
func (n *Node) lead(ctx context.Context, term uint64) {
	log := n.log.With("term", term)
	log.Info("became leader; waiting for the barrier")

	// 1. Barrier: everything from earlier terms is committed and applied
	// once an entry of this term has been applied.
	start := time.Now()
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			log.Info("leadership ended before the barrier completed", "err", err)
			return
		}
		log.Warn("leader barrier failed; retrying", "err", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return
		}
	}
	// The barrier was enqueued after term was read, so it was committed in
	// term or later; if the term is still the same, it was this term.
	if n.raft.CurrentTerm() != term {
		return
	}
	n.readyTerm.Store(term)
	log.Info("leader barrier applied; serving linearizable reads", "took", time.Since(start), "commit_index", n.raft.CommitIndex())

	// 2. This node's member record, so followers and clients find its HTTP
	// address.
	n.ensureOwnRecord(ctx, log)

	// 3. Leader tasks.
	var wg sync.WaitGroup
	names := make([]string, 0, len(n.tasks))
	for name := range n.tasks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		task := n.tasks[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info("leader task starting", "task", name)
			task(ctx)
			log.Info("leader task stopped", "task", name)
		}()
	}
	<-ctx.Done()
	wg.Wait()
}

// ensureOwnRecord upserts this node's member record unless it is already
// there with the right addresses. It retries until it succeeds, leadership
// ends, or the state machine refuses the record.
func (n *Node) ensureOwnRecord(ctx context.Context, log *slog.Logger) {
	want := n.ownRecord()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		if ok, err := n.hasRecord(want); err == nil && ok {
			return
		}
		_, index, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: want.ID, RaftAddr: want.RaftAddr, HTTPAddr: want.HTTPAddr})
		var rule *wire.RuleError
		switch {
		case errors.As(err, &rule):
			log.Error("state machine refused this node's member record", "err", err)
			return
		case err == nil:
			log.Info("member record written", "raft_addr", want.RaftAddr, "http_addr", want.HTTPAddr, "index", index)
			return
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrShutdown), ctx.Err() != nil:
			return
		}
		log.Warn("writing this node's member record failed; retrying", "err", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return
		}
	}
}

func (n *Node) ownRecord() fsm.Member {
	return fsm.Member{ID: n.cfg.NodeID, RaftAddr: n.cfg.RaftAdvertiseAddr(), HTTPAddr: n.cfg.HTTPAdvertiseAddr()}
}

// hasRecord reports whether the FSM holds exactly the member record want.
func (n *Node) hasRecord(want fsm.Member) (bool, error) {
	members, err := n.fsm.Members()
	if err != nil {
		return false, err
	}
	for _, m := range members {
		if m.ID == want.ID {
			return m.RaftAddr == want.RaftAddr && m.HTTPAddr == want.HTTPAddr, nil
		}
	}
	return false, nil
}

func (n *Node) kickMemberCheck() {
	select {
	case n.kickCh <- struct{}{}:
	default:
	}
}

// runMemberCheck makes sure a follower that is a voter has a member record
// with its addresses: nodes of a static initial cluster are voters from the
// start but have no record. When the record is missing or stale it asks the
// leader, over HTTP, to add it (the API calls AddVoter on the leader, which
// is idempotent for an existing voter and writes the record).
func (n *Node) runMemberCheck() {
	defer n.wg.Done()
	fastUntil := time.Now().Add(memberCheckFastPeriod)
	timer := time.NewTimer(memberCheckFastInterval)
	defer timer.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.kickCh:
			fastUntil = time.Now().Add(memberCheckFastPeriod)
		case <-timer.C:
		}
		if done := n.checkOwnRecord(); done {
			fastUntil = time.Time{}
		}
		next := memberCheckInterval
		if time.Now().Before(fastUntil) {
			next = memberCheckFastInterval
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// checkOwnRecord runs one check; it reports true when nothing is left to do
// for now (the record is right, or this node is not a follower voter).
func (n *Node) checkOwnRecord() bool {
	if n.raft.State() != raft.Follower {
		return true
	}
	_, leaderID := n.raft.LeaderWithID()
	if leaderID == "" || string(leaderID) == n.cfg.NodeID {
		return false
	}
	want := n.ownRecord()
	servers, err := n.configuration()
	if err != nil {
		return false
	}
	voter := false
	for _, s := range servers {
		if string(s.ID) == want.ID {
			voter = s.Suffrage == raft.Voter && string(s.Address) == want.RaftAddr
		}
	}
	if !voter {
		// Not (or no longer) a voter here: Join adds a new node, and a
		// removed node must not add itself back.
		return true
	}
	if ok, err := n.hasRecord(want); err != nil || ok {
		return err == nil
	}
	leaderHTTP, err := n.LeaderHTTPAddr()
	if err != nil {
		n.log.Debug("own member record missing; leader HTTP address not known yet", "err", err)
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, joinRequestTimeout)
	defer cancel()
	if err := n.postJoin(ctx, leaderHTTP); err != nil {
		n.log.Warn("own member record missing; asking the leader to add it failed", "leader_http_addr", leaderHTTP, "err", err)
		return false
	}
	n.log.Info("asked the leader to write this node's member record", "leader_http_addr", leaderHTTP)
	return false // confirmed on a later check, once the record is replicated
}

// sleepCtx sleeps for d or until ctx is done; it reports whether it slept
// the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
