package zksut

import (
	"testing"

	"github.com/metastore/metastore/bench/internal/peertest"
)

func TestCluster(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("ZooKeeper is missing, so the ZooKeeper baseline cannot run: %v", err)
	}
	peertest.Run(t, "ZooKeeper", peertest.Lean, func() peertest.Peer { return New() })
}

func TestClusterCAS(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("ZooKeeper is missing, so the ZooKeeper baseline cannot run: %v", err)
	}
	peertest.Run(t, "zookeeper-cas", peertest.CAS, func() peertest.Peer { return NewCAS() })
}
