package node_test

import (
	"errors"
	"testing"
	"time"

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
