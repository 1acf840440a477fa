package etcdsut

import (
	"testing"

	"github.com/metastore/metastore/bench/internal/peertest"
)

func TestCluster(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skipf("etcd is missing, so the etcd baseline cannot run: %v", err)
	}
	peertest.Run(t, "etcd", func() peertest.Peer { return New() })
}
