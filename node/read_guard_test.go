package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/node"
)

// startCluster starts a static cluster of k members, with tune applied to
// each member's configuration, and returns its members.
func startCluster(t *testing.T, k int, tune func(*config.Config)) []*testNode {
	t.Helper()
	log := testLogger(t)
	var nodes []*testNode
	withFreePorts(t, k, func(addrs []string) error {
		nodes = nil
		var peers []config.Peer
		for i, a := range addrs {
			peers = append(peers, config.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: a})
		}
		for i, a := range addrs {
			tn := newTestNode(t, log, peers[i].ID, t.TempDir())
			tn.cfg.RaftAddr = a
			tn.cfg.InitialCluster = peers
			tune(&tn.cfg)
			if err := tn.start(); err != nil {
				for _, started := range nodes {
					started.stop()
				}
				return err
			}
			nodes = append(nodes, tn)
		}
		return nil
	})
	return nodes
}

// others returns the members of nodes other than but.
func others(nodes []*testNode, but ...*testNode) []*testNode {
	var out []*testNode
next:
	for _, tn := range nodes {
		for _, b := range but {
			if tn == b {
				continue next
			}
		}
		out = append(out, tn)
	}
	return out
}

// TestCutOffLeaderServesNoLinearizableRead: a leader that can no longer
// reach a quorum (both followers' transports closed), and still believes it
// leads (within its lease), refuses a linearizable read (VerifyLeader)
// instead of serving its possibly stale state.
func TestCutOffLeaderServesNoLinearizableRead(t *testing.T) {
	nodes := startCluster(t, 3, func(c *config.Config) {
		// A lease long enough to stop the followers within it.
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	})
	leader := waitLeader(t, nodes)
	linRead(t, leader.node) // the barrier of its term is done
	for _, tn := range others(nodes, leader) {
		// Cut off, not stopped: a member's shutdown would race with the
		// leader's heartbeats on the transport's fast path.
		if err := node.CutOff(tn.node); err != nil {
			t.Fatal(err)
		}
	}
	// The open connections carry one more RPC each; then nothing reaches
	// the followers (the leader sends a heartbeat every 100 ms).
	waitFor(t, 5*time.Second, "the followers no longer hearing from the leader", func() bool {
		for _, tn := range others(nodes, leader) {
			lc := tn.node.Status().LastContact
			if lc == nil || time.Since(*lc) < 300*time.Millisecond {
				return false
			}
		}
		return true
	})
	if !leader.node.IsLeader() {
		t.Skip("the leader stepped down before the read; nothing to check")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	idx, err := leader.node.LinearizableRead(ctx)
	if err == nil {
		t.Fatalf("a leader cut off from every follower served a linearizable read at index %d", idx)
	}
	// It learns it is no longer leader (the read's VerifyLeader is answered
	// when it steps down): the client is to go to the new leader.
	if !errors.Is(err, node.ErrNotLeader) {
		t.Fatalf("read on a leader cut off from every follower: %v, want ErrNotLeader", err)
	}
}
