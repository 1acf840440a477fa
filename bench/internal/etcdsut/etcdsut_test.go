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
