package node

import (
	"errors"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// retryPastGap is the Raft transport as a leader uses it to send
// AppendEntries: when a follower refuses an append only because it has no
// entry at the request's previous index although its log goes further, the
// leader asks once more from the follower's last entry. Without it that
// follower can be sent the same snapshot forever.
//
// A follower of hashicorp/raft (v1.7.3) checks the previous entry of an
// append against its last entry, which may be its snapshot's, or else
// against the entry of that index in its log. After it installed a snapshot
// at index S its log has no entry S, so once it holds entries after S, an
// append whose previous index is S fails ("failed to get previous log";
// reported as hashicorp/raft issue #205, closed without a change). The
// leader then steps its next index down one entry at a time to the start of
// its log, finds it compacted, sends its newest snapshot again (index S
// once more), resumes at S+1 and is refused again: an endless loop that
// only a newer snapshot on the leader past the follower's log ends (with
// the default settings, some 8192 entries later).
//
// A follower gets there when another append of the leader crosses the
// snapshot install: one that reaches it while it installs the snapshot is
// taken right after, and appends past the snapshot before the replication
// that sent the snapshot resumes at S+1. `metastore rebuild` makes that
// crossing: the member is removed and at once added back at the same
// address, and the replication goroutine of its previous incarnation,
// stopped by the removal but possibly asleep in its back-off since the
// member went down, still sends one last append when it wakes. In
// TestCorruptMemberDetectedAndRebuilt under load the leader then reinstalled
// its snapshot on the rebuilt member thousands of times (tens a second),
// each restore rewinding the member's state machine, and the member never
// caught up.
//
// The retry is an ordinary append that the follower checks in full: its
// previous entry is the follower's last one (the index the refusal
// reports), with the term this leader holds at that index, and its entries
// are the original request's after it. When the follower accepts it, its
// log matches the leader's up to that index (Log Matching), so it holds the
// leader's entries up to the original request's last one as well, and the
// original request is answered with the retry's success. Any other outcome
// keeps the original refusal, and Raft goes on as before: a genuine
// conflict (a different term at that index) is refused by the retry too,
// and a follower whose last index is one this leader has no term for (past
// its log, or compacted) is not retried.
//
// Pipelined replication is off (newTransport), so every append of the
// leader goes through AppendEntries. Heartbeats carry no previous entry and
// are never retried.
type retryPastGap struct {
	*heartbeatGate
	// termAt returns the term of this member's entry at index, from its
	// log or, at its newest snapshot's index, from that snapshot.
	termAt func(index uint64) (uint64, bool)
	// retried is called after each retry with whether it was accepted.
	retried func(follower raft.ServerID, prev, from uint64, ok bool)
	// stalled is true while this member waits for disk space to write its
	// log or its term (stallingFiler, stallingStable); nil: never.
	stalled *atomic.Bool
}

// errStalledNoSend is what an append (a heartbeat among them) fails with
// while this member waits for disk space.
var errStalledNoSend = errors.New("node: not sending appends: this member waits for disk space to write its Raft log")

// AppendEntriesPipeline opens the transport's pipeline, through which
// nothing is sent either while this member waits for disk space: the
// leader's replication sends an append every --commit-timeout through it,
// which would hold the followers as heartbeats do.
func (t retryPastGap) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.heartbeatGate.AppendEntriesPipeline(id, target)
	if err != nil || t.stalled == nil {
		return p, err
	}
	return stallPipeline{AppendPipeline: p, stalled: t.stalled}, nil
}

// stallPipeline is a pipeline that refuses to send while stalled is true.
type stallPipeline struct {
	raft.AppendPipeline
	stalled *atomic.Bool
}

func (p stallPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.stalled.Load() {
		return nil, errStalledNoSend
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// AppendEntries sends args; see retryPastGap.
//
// While this member waits for disk space (stalled), nothing is sent. A
// leader whose log waits to create its next segment has its main
// goroutine blocked in the append, so it cannot step down, while
// hashicorp/raft's heartbeat goroutines would go on holding its followers:
// the cluster would take no write until this member's disk had space.
// Without its heartbeats the followers elect another leader, and this one
// steps down once its append returns.
func (t retryPastGap) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.stalled != nil && t.stalled.Load() {
		return errStalledNoSend
	}
	if err := t.heartbeatGate.AppendEntries(id, target, args, resp); err != nil || resp.Success {
		return err
	}
	last := resp.LastLog
	// NoRetryBackoff marks a refusal of the previous entry (missing, or of
	// another term) by a follower of the request's term.
	if !resp.NoRetryBackoff || resp.Term != args.Term || args.PrevLogEntry == 0 || last <= args.PrevLogEntry {
		return nil
	}
	term, ok := t.termAt(last)
	if !ok {
		return nil
	}
	retry := *args
	retry.PrevLogEntry, retry.PrevLogTerm, retry.Entries = last, term, nil
	for i, e := range args.Entries {
		if e.Index > last {
			retry.Entries = args.Entries[i:]
			break
		}
	}
	var again raft.AppendEntriesResponse
	if err := t.heartbeatGate.AppendEntries(id, target, &retry, &again); err != nil {
		return nil // the original refusal stands
	}
	if t.retried != nil {
		t.retried(id, args.PrevLogEntry, last, again.Success)
	}
	if again.Success || again.Term > args.Term {
		*resp = again
	}
	return nil
}

// termAt returns the term of the entry at index in this member's log, or of
// its newest snapshot when index is that snapshot's last index.
func (n *Node) termAt(index uint64) (uint64, bool) {
	var l raft.Log
	err := n.logs.GetLog(index, &l)
	if err == nil {
		return l.Term, true
	}
	if !errors.Is(err, raft.ErrLogNotFound) {
		return 0, false
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 || metas[0].Index != index {
		return 0, false
	}
	return metas[0].Term, true
}

var (
	_ raft.Transport   = retryPastGap{}
	_ raft.WithClose   = retryPastGap{}
	_ raft.WithPreVote = retryPastGap{}
)
