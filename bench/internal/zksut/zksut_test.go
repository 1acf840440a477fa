package zksut

import (
	"testing"

	"github.com/metastore/metastore/bench/internal/peertest"
)

func TestCluster(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("ZooKeeper is missing, so the ZooKeeper baseline cannot run: %v", err)
	}
	peertest.Run(t, "ZooKeeper", func() peertest.Peer { return New() })
}
