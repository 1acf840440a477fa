package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
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

// TestLiveMetrics scrapes every member of a three-member cluster that has
// replicated writes (one epoch completed, one pending) and checks each
// /metrics answer with `promtool check metrics`: Raft's own metrics
// (bridged from go-metrics) follow the Prometheus conventions like the
// rest, and metastore_build_info names the build. Then every metric the
// dashboard and the alert rules in deploy/ query must be on these answers
// or documented in docs/operations.md.
func TestLiveMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
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
	c.send("POST", "/v1/jobs/lint/epochs", map[string]any{"generation": 1, "epoch": 2})

	// The leader reports replication to each follower once it has sent
	// them entries, and every member the pending epoch once it applied
	// it; wait for those series so the checks cover them.
	waitFor(t, 30*time.Second, func() error {
		for _, p := range c.procs {
			status, body := clDo("GET", p.url("/metrics"), nil)
			if status != http.StatusOK {
				return fmt.Errorf("%s: GET /metrics: %d", p.id, status)
			}
			want := []string{`metastore_epochs_pending{job_id="lint"} 1`, "\nmetastore_blobs_unobserved "}
			if p == leader {
				want = append(want, "metastore_raft_replication_append_entries_rpc_seconds{", "metastore_raft_commit_time_seconds")
			}
			for _, w := range want {
				if !bytes.Contains(body, []byte(w)) {
					return fmt.Errorf("no %s on %s yet", w, p.id)
				}
			}
		}
		return nil
	})

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("/metrics not linted: %s", promtoolMissing)
	}
	buildInfo := regexp.MustCompile(`(?m)^metastore_build_info\{go_version="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`)
	live := map[string]bool{}
	for _, p := range c.procs {
		status, body := clDo("GET", p.url("/metrics"), nil)
		if status != http.StatusOK {
			t.Fatalf("%s: GET /metrics: %d %s", p.id, status, body)
		}
		if promtool != "" {
			if findings := promtoolLint(t, promtool, body); findings != "" {
				t.Errorf("%s: promtool check metrics found %d problems:\n%s", p.id, strings.Count(findings, "\n")+1, findings)
			}
		}
		if !buildInfo.Match(body) {
			t.Errorf("%s: no metastore_build_info series:\n%s", p.id, grepLines(string(body), "build_info"))
		}
		for f := range liveFamilies(body) {
			live[f] = true
		}
	}
	if !live["metastore_raft_commit_time_seconds"] {
		t.Errorf("no Raft metrics (metastore_raft_*) on the members")
	}
	// up is Prometheus's own series for each scrape.
	live["up"] = true
	checkDeployMetricNames(t, live)
}

// TestGoGCPercent: serve gives Go's collector --go-gc-percent (200 by
// default), and leaves the environment's GOGC alone when it is set; the
// runtime's own gauge on /metrics reports which applied.
func TestGoGCPercent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short mode")
	}
	_, inherited := os.LookupEnv("GOGC")
	for _, tc := range []struct {
		name  string
		env   []string
		extra []string
		want  string
	}{
		{"default", nil, nil, "go_gc_gogc_percent 200\n"},
		{"flag", nil, []string{"--go-gc-percent", "300"}, "go_gc_gogc_percent 300\n"},
		{"environment", []string{"GOGC=150"}, []string{"--go-gc-percent", "300"}, "go_gc_gogc_percent 150\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if inherited && tc.env == nil {
				t.Skip("the test process has GOGC set, which its members inherit")
			}
			c := startClusterWith(t, 1, tc.env, tc.extra...)
			c.leader(30 * time.Second)
			status, body := clDo("GET", c.procs[0].url("/metrics"), nil)
			if status != http.StatusOK || !bytes.Contains(body, []byte(tc.want)) {
				t.Fatalf("GET /metrics: %d, no %q", status, strings.TrimSpace(tc.want))
			}
		})
	}
}
