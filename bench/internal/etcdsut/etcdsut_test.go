package etcdsut

import (
	"testing"

	"github.com/metastore/metastore/bench/internal/peertest"
)

func TestCluster(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	peertest.Run(t, "etcd", peertest.Lean, func() peertest.Peer { return New() })
}

func TestClusterCAS(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	peertest.Run(t, "etcd-cas", peertest.CAS, func() peertest.Peer { return NewCAS() })
}

// TestClusterBatched: the lean design with its acks batched, one ack
// request in flight at most, so that the second of two concurrent acks
// travels in a batch (a nested transaction).
func TestClusterBatched(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	var made []*System // Run makes more than the one it drives
	peertest.Run(t, "etcd-batched", peertest.Lean, func() peertest.Peer { s := newBatched(1); made = append(made, s); return s })
	var batches int64
	for _, s := range made {
		batches += s.acks.batches.Load()
	}
	if batches == 0 {
		t.Error("no ack travelled in a batch")
	}
	t.Logf("%d batches", batches)
}
