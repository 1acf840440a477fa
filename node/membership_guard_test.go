package node_test

import (
	"errors"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// TestAddVoterChecksBeforeProposing: AddVoter refuses invalid arguments,
// a Raft address that belongs to another member, and a voter whose
// addition would leave no quorum of reachable voters (a second, not
// started, voter added to one), each before anything is proposed.
func TestAddVoterChecksBeforeProposing(t *testing.T) {
	tn := startSingle(t, testLogger(t), "n1", t.TempDir())
	waitFor(t, 5*time.Second, "own member record", func() bool { return hasMember(t, tn.fsm, "n1") })
	n := tn.node
	before := n.Status().LastLogIndex
	down := freeAddr(t) // nothing listens there

	var rule *wire.RuleError
	if err := n.AddVoter(ctxT(t), "bad id!", down, "x.example:2"); !errors.As(err, &rule) {
		t.Errorf("AddVoter with an invalid id: %v, want a *wire.RuleError", err)
	}
	if err := n.AddVoter(ctxT(t), "n2", tn.cfg.RaftAddr, "x.example:2"); !errors.Is(err, node.ErrMemberConflict) {
		t.Errorf("AddVoter at the Raft address of n1: %v, want ErrMemberConflict", err)
	}
	if err := n.AddVoter(ctxT(t), "n2", down, "x.example:2"); !errors.Is(err, node.ErrQuorumAtRisk) {
		t.Errorf("AddVoter of an unreachable second voter: %v, want ErrQuorumAtRisk", err)
	}
	st := n.Status()
	if st.LastLogIndex != before || len(st.Members) != 1 {
		t.Fatalf("last log index %d -> %d, members %+v: a refused change was proposed", before, st.LastLogIndex, st.Members)
	}
}

// TestMembershipChangesKeepAQuorumOfReachableVoters: with one of three
// voters down, removing another (live) voter is refused with
// ErrQuorumAtRisk, since the two left would include the one down, and
// nothing changes; removing the one that is down is accepted. A follower
// refuses membership changes with ErrNotLeader.
func TestMembershipChangesKeepAQuorumOfReachableVoters(t *testing.T) {
	nodes := startCluster(t, 3, func(*config.Config) {})
	leader := waitLeader(t, nodes)
	for _, tn := range others(nodes, leader) {
		// With the leader's record replicated, AddVoter of the leader
		// (a voter already, record up to date) would have nothing to
		// propose: only the leader check refuses it.
		waitFor(t, 10*time.Second, "the leader's member record on "+tn.cfg.NodeID, func() bool { return hasMember(t, tn.fsm, leader.cfg.NodeID) })
		if err := tn.node.AddVoter(ctxT(t), leader.cfg.NodeID, leader.cfg.RaftAdvertiseAddr(), leader.cfg.HTTPAdvertiseAddr()); !errors.Is(err, node.ErrNotLeader) {
			t.Fatalf("AddVoter on follower %s: %v, want ErrNotLeader", tn.cfg.NodeID, err)
		}
		if err := tn.node.RemoveServer(ctxT(t), "nope"); !errors.Is(err, node.ErrNotLeader) {
			t.Fatalf("RemoveServer on follower %s: %v, want ErrNotLeader", tn.cfg.NodeID, err)
		}
		break
	}

	down := others(nodes, leader)[0]
	down.stop()
	live := others(nodes, down)
	onLeader(t, live, "removing a live voter while another is down", func(l *testNode) error {
		other := others(live, l)[0]
		err := l.node.RemoveServer(ctxT(t), other.cfg.NodeID)
		if errors.Is(err, node.ErrQuorumAtRisk) {
			return nil
		}
		if err == nil {
			t.Fatalf("removing %s while %s is down was accepted: of the two voters left, only %s can be reached", other.cfg.NodeID, down.cfg.NodeID, l.cfg.NodeID)
		}
		return err
	})
	if st := waitLeader(t, live).node.Status(); len(st.Members) != 3 {
		t.Fatalf("members after a refused removal: %+v", st.Members)
	}
	onLeader(t, live, "removing the voter that is down", func(l *testNode) error {
		err := l.node.RemoveServer(ctxT(t), down.cfg.NodeID)
		if errors.Is(err, node.ErrUnknownMember) {
			return nil // an earlier attempt with an unknown outcome did it
		}
		return err
	})
}

// TestLeaderRemovesItself: a leader removing itself writes the removal of
// its member record first (it cannot write once it has left), then leaves
// the configuration; the others go on without it.
func TestLeaderRemovesItself(t *testing.T) {
	nodes := startCluster(t, 3, func(*config.Config) {})
	leader := waitLeader(t, nodes)
	waitFor(t, 15*time.Second, "member records of all nodes on the leader", func() bool {
		for _, tn := range nodes {
			if !hasMember(t, leader.fsm, tn.cfg.NodeID) {
				return false
			}
		}
		return true
	})
	if err := leader.node.RemoveServer(ctxT(t), leader.cfg.NodeID); err != nil {
		t.Fatalf("the leader removing itself: %v", err)
	}
	rest := others(nodes, leader)
	waitFor(t, 10*time.Second, "the removed leader gone from the configuration and the member records", func() bool {
		ls := leaders(rest)
		if len(ls) != 1 {
			return false
		}
		for _, m := range ls[0].node.Status().Members {
			if m.ID == leader.cfg.NodeID {
				return false
			}
		}
		return !hasMember(t, ls[0].fsm, leader.cfg.NodeID)
	})
}

// TestRemovingTheLastVoterChangesNothing: RemoveServer of the only voter
// is refused before any step, as a definite refusal (ErrQuorumAtRisk, not
// an unknown outcome), and the member keeps its record. It used to delete
// the record first (a self-removal's order) and then fail in Raft.
func TestRemovingTheLastVoterChangesNothing(t *testing.T) {
	tn := startSingle(t, testLogger(t), "n1", t.TempDir())
	waitFor(t, 5*time.Second, "own member record", func() bool { return hasMember(t, tn.fsm, "n1") })
	err := tn.node.RemoveServer(ctxT(t), "n1")
	if !errors.Is(err, node.ErrQuorumAtRisk) || errors.Is(err, node.ErrUnknownOutcome) {
		t.Fatalf("removing the only voter: %v, want ErrQuorumAtRisk", err)
	}
	if !hasMember(t, tn.fsm, "n1") {
		t.Fatalf("the refused removal of the last voter deleted its member record (members %v)", memberIDs(t, tn.fsm))
	}
}
