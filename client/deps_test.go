package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientDependencies keeps the client light: a worker that imports it
// links the HTTP API's types (package wire), not the Raft member, its
// stores or its metrics.
func TestClientDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages; want the client's dependencies", len(deps))
	}
	forbidden := []string{
		"github.com/hashicorp/raft",
		"github.com/hashicorp/raft-boltdb",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/prometheus/",
		"github.com/metastore/metastore/fsm",
		"github.com/metastore/metastore/node",
		"github.com/metastore/metastore/gc",
		"github.com/metastore/metastore/api",
	}
	found := false
	for _, d := range deps {
		found = found || d == "github.com/metastore/metastore/wire"
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("the client depends on %s", d)
			}
		}
	}
	if !found {
		t.Errorf("the client does not depend on github.com/metastore/metastore/wire; its answers' types live there")
	}
}
