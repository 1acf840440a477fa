package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// promtoolMissing is the reason metrics tests skip without promtool.
const promtoolMissing = "promtool not installed (Debian package prometheus; .ci/run installs it)"

// promtoolLint runs `promtool check metrics` on a /metrics answer and
// returns its findings, one a line; empty when the exposition is clean.
func promtoolLint(t *testing.T, promtool string, exposition []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case err == nil:
		return ""
	case out.Len() == 0:
		t.Fatalf("promtool check metrics: %v and no findings", err)
	}
	return strings.TrimSpace(out.String())
}

// TestMetricsPromtoolClean scrapes every member of a three-member cluster
// that has replicated writes and checks each /metrics answer with
// `promtool check metrics`: Raft's own metrics (bridged from go-metrics)
// follow the Prometheus conventions like the rest, and metastore_build_info
// names the build.
func TestMetricsPromtoolClean(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip(promtoolMissing)
	}
	c := startCluster(t, 3)
	leader := c.leader(30 * time.Second)

	c.send("PUT", "/v1/jobs/lint", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "10m"}})
	c.send("POST", "/v1/jobs/lint/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{
		{"id": "t0", "capabilities": []string{"state"}},
	}})
	c.send("POST", "/v1/jobs/lint/epochs", map[string]any{"generation": 1, "epoch": 1})
	c.send("PUT", "/v1/jobs/lint/epochs/1/acks/t0", map[string]any{"generation": 1,
		"payloads": map[string]string{"state": base64.StdEncoding.EncodeToString([]byte("s"))}})

	// The leader reports replication to each follower once it has sent
	// them entries; wait for those series so the check covers them.
	waitFor(t, 30*time.Second, func() error {
		status, body := clDo("GET", leader.url("/metrics"), nil)
		if status != http.StatusOK {
			return fmt.Errorf("GET /metrics: %d", status)
		}
		for _, want := range []string{"metastore_raft_replication_append_entries_rpc_seconds{", "metastore_raft_commit_time_seconds"} {
			if !bytes.Contains(body, []byte(want)) {
				return fmt.Errorf("no %s on the leader yet", want)
			}
		}
		return nil
	})

	buildInfo := regexp.MustCompile(`(?m)^metastore_build_info\{go_version="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`)
	for _, p := range c.procs {
		status, body := clDo("GET", p.url("/metrics"), nil)
		if status != http.StatusOK {
			t.Fatalf("%s: GET /metrics: %d %s", p.id, status, body)
		}
		if findings := promtoolLint(t, promtool, body); findings != "" {
			t.Errorf("%s: promtool check metrics found %d problems:\n%s", p.id, strings.Count(findings, "\n")+1, findings)
		}
		if !buildInfo.Match(body) {
			t.Errorf("%s: no metastore_build_info series:\n%s", p.id, grepLines(string(body), "build_info"))
		}
		if !bytes.Contains(body, []byte("metastore_raft_")) {
			t.Errorf("%s: no metastore_raft_* metrics", p.id)
		}
	}
}
