package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
)

// TestRunResumeAuthCluster: a three-process cluster with --auth runs the
// example job with a worker token scoped to its job; the same token cannot
// read or write another job, run the collector or manage members, and no
// token at all gets nowhere.
func TestRunResumeAuthCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a cluster of metastore processes")
	}
	msBin, jobBin := binaries(t)
	dir := t.TempDir()
	opFile := filepath.Join(dir, "operator-token")
	op := api.GenerateToken()
	if err := os.WriteFile(opFile, []byte(op+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ms := serve(t, msBin, 3, "--auth", "--auth-bootstrap-token-file", opFile)

	// The operator creates the jobs' worker tokens with the CLI.
	create := func(job string) string {
		var out struct {
			Secret string `json:"secret"`
		}
		poll(t, 30*time.Second, "tokens create "+job, func() error {
			p := start(t, "tokens create", msBin, "tokens", "create", "--role", "worker", "--job", job, "--json",
				"--addr", ms[0].httpAddr, "--token-file", opFile)
			if code := p.wait(t, time.Minute); code != 0 {
				return fmt.Errorf("exit %d: %s", code, p.stderr)
			}
			return json.Unmarshal([]byte(p.stdout.String()), &out)
		})
		return out.Secret
	}
	worker := create("demo")
	create("other")

	out := runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "--token", worker, "run", "--epochs", "8")
	if !strings.Contains(out, "epoch 8 completed") {
		t.Fatalf("run output:\n%s", out)
	}
	out = runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "--token", worker, "resume", "--topology", "changed", "--epochs", "3")
	checkRestore(t, out, 8)

	// The worker token outside its job, through every member.
	for _, m := range ms {
		for _, c := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/v1/jobs/other", 403},
			{"PUT", "/v1/jobs/other", 403},
			{"POST", "/v1/jobs/other/epochs", 403},
			{"GET", "/v1/jobs/other/tasks/agg-0/restore", 403},
			{"POST", "/v1/gc/run", 403},
			{"GET", "/v1/gc", 403},
			{"POST", "/v1/members", 403},
			{"DELETE", "/v1/members/n1", 403},
			{"POST", "/v1/leader/transfer", 403},
			{"GET", "/v1/tokens", 403},
			{"GET", "/v1/jobs/demo", 200},
		} {
			if got := status(t, c.method, m.url(c.path), worker); got != c.want {
				t.Errorf("%s: worker token %s %s: %d, want %d", m.id, c.method, c.path, got, c.want)
			}
			if got := status(t, c.method, m.url(c.path), ""); got != http.StatusUnauthorized {
				t.Errorf("%s: no token %s %s: %d, want 401", m.id, c.method, c.path, got)
			}
		}
	}
	// The secrets never reach a member's log.
	for _, m := range ms {
		if logs := m.stderr.String(); strings.Contains(logs, op) || strings.Contains(logs, worker) {
			t.Errorf("%s logged a token secret", m.id)
		}
	}
}

func status(t *testing.T, method, u, token string) int {
	t.Helper()
	return statusWith(t, http.DefaultClient, method, u, token)
}
