package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIEndToEnd drives the operator commands, as a separate process,
// against a real node: a job with inline and incremental state, every read
// command, a backup, and its restore into a fresh node, which then answers
// the same jobs, checkpoints and counts. A truncated copy of the backup is
// refused and changes nothing.
func TestCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts metastore processes; skipped in -short mode")
	}
	src := startCluster(t, 1)
	srcNode := src.leader(30 * time.Second)
	dir := t.TempDir()
	cli := func(node *clProc, args ...string) (int, string, string) {
		t.Helper()
		return runBinary(t, dir, nil, append(args, "--addr", node.httpAddr)...)
	}
	mustCLI := func(node *clProc, args ...string) string {
		t.Helper()
		code, out, errOut := cli(node, args...)
		if code != exitOK || errOut != "" {
			t.Fatalf("metastore %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, errOut, out)
		}
		return out
	}

	// The job, through the HTTP API as a worker would drive it.
	src.send("PUT", "/v1/jobs/orders", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "10m"}})
	src.send("POST", "/v1/jobs/orders/attempts", map[string]any{"attempt_id": "run-1", "tasks": []map[string]any{
		{"id": "source-0", "capabilities": []string{"input"}},
		{"id": "map-0", "capabilities": []string{}},
		{"id": "agg-0", "capabilities": []string{"state", "incremental"}},
		{"id": "sink-0", "capabilities": []string{"output"}},
	}})
	inline := func(kind, v string) map[string]any {
		return map[string]any{"generation": 1, "payloads": map[string]string{kind: base64.StdEncoding.EncodeToString([]byte(v))}}
	}
	segmentAck := func(key string, size, first, last int) map[string]any {
		return map[string]any{"generation": 1, "manifest": map[string]any{
			"blobs": []any{map[string]any{"key": key, "size": size}},
			"delta": map[string]any{"add_segments": []any{map[string]any{"key": key, "offset": 0, "length": size, "first_seq": first, "last_seq": last}}}}}
	}
	key1 := uploadBlob(t, src, "orders", "agg-0", bytes.Repeat([]byte("a"), 3000))
	src.send("POST", "/v1/jobs/orders/epochs", map[string]any{"generation": 1, "epoch": 1})
	src.send("PUT", "/v1/jobs/orders/epochs/1/acks/source-0", inline("input", "partition-0:offset=4711"))
	src.send("PUT", "/v1/jobs/orders/epochs/1/acks/agg-0", segmentAck(key1, 3000, 1, 800))
	src.send("PUT", "/v1/jobs/orders/epochs/1/acks/sink-0", inline("output", "txn-17"))
	key2 := uploadBlob(t, src, "orders", "agg-0", bytes.Repeat([]byte("b"), 1096))
	src.send("POST", "/v1/jobs/orders/epochs", map[string]any{"generation": 1, "epoch": 2})
	src.send("PUT", "/v1/jobs/orders/epochs/2/acks/source-0", inline("input", "partition-0:offset=5000"))
	src.send("PUT", "/v1/jobs/orders/epochs/2/acks/agg-0", segmentAck(key2, 1096, 801, 900))
	src.send("PUT", "/v1/jobs/orders/epochs/2/acks/sink-0", inline("output", "txn-18"))
	// Epoch 3 stays pending, held back by two stragglers.
	src.send("POST", "/v1/jobs/orders/epochs", map[string]any{"generation": 1, "epoch": 3})
	src.send("PUT", "/v1/jobs/orders/epochs/3/acks/source-0", inline("input", "partition-0:offset=5100"))
	waitFor(t, 10*time.Second, func() error {
		var e struct {
			State string `json:"state"`
		}
		if err := clGet(srcNode.url("/v1/jobs/orders/epochs/2"), &e); err != nil {
			return err
		}
		if e.State != "completed" {
			return fmt.Errorf("epoch 2 is %s", e.State)
		}
		return nil
	})

	// The read commands.
	out := mustCLI(srcNode, "jobs", "list")
	if !strings.HasPrefix(fields(out)[1], "orders 1 run-1 3 2 3 1,2 ") {
		t.Errorf("jobs list:\n%s", out)
	}
	expectLines(t, mustCLI(srcNode, "jobs", "show", "orders"),
		"tasks 4, 3 expected to ack each epoch",
		"started from fresh start",
		"restored attempts 0",
		"latest completed 2",
		"agg-0 state,incremental yes",
		"map-0 - no",
		"sink-0 output yes",
		"source-0 input yes")
	out = mustCLI(srcNode, "checkpoints", "list", "orders")
	if got := len(fields(out)); got != 4 || !strings.HasPrefix(fields(out)[1], "1 completed 1 3/3 29 ") ||
		!strings.HasPrefix(fields(out)[2], "2 completed 1 3/3 29 ") || !strings.HasPrefix(fields(out)[3], "3 pending 1 1/3 23 ") {
		t.Errorf("checkpoints list:\n%s", out)
	}
	if out := mustCLI(srcNode, "checkpoints", "list", "orders", "--state", "pending"); len(fields(out)) != 2 {
		t.Errorf("checkpoints list --state pending:\n%s", out)
	}
	out = mustCLI(srcNode, "checkpoints", "show", "orders", "2")
	expectLines(t, out, "state completed", "acked 3 of 3 expected tasks", "stragglers -")
	for _, prefix := range []string{"source-0 ", "agg-0 ", "sink-0 "} {
		if !strings.Contains(out, "\n"+prefix) {
			t.Errorf("checkpoints show has no ack row for %s:\n%s", prefix, out)
		}
	}
	expectLines(t, mustCLI(srcNode, "checkpoints", "show", "orders", "3"), "state pending", "acked 1 of 3 expected tasks", "stragglers agg-0, sink-0")
	expectLines(t, mustCLI(srcNode, "restore-plan", "orders", "agg-0"),
		"status restored",
		"source orders/agg-0, epoch 2 (generation 1)",
		"object-store reads 2, 4096 bytes (4.0 KiB)",
		"state restored - 0 2 4096 4096",
		"input nothing_to_recover - - - - 0")
	expectLines(t, mustCLI(srcNode, "restore-plan", "orders", "source-0", "--epoch", "1"),
		"source orders/source-0, epoch 1 (generation 1)", "inline bytes 23", "input restored 23 - - - 23")
	expectLines(t, mustCLI(srcNode, "restore-plan", "orders", "map-0"), "status nothing_to_recover")
	expectLines(t, mustCLI(srcNode, "restore-plan", "orders", "new-task"), "status no_prior_state")
	expectLines(t, mustCLI(srcNode, "fsck"), "blobs 2", "mismatches 0", "ok: every reference count matches its manifests")
	expectLines(t, mustCLI(srcNode, "gc", "status"), "collector enabled, leading (this member collects)")
	expectLines(t, mustCLI(srcNode, "gc", "run", "--dry-run"), "dry run: what a cycle would do now; nothing was changed", "would be deleted 0 (0 resumed from an earlier cycle)")
	expectLines(t, mustCLI(srcNode, "verify", "orders"), "all present")
	if code, _, errOut := cli(srcNode, "checkpoints", "show", "orders", "9"); code != exitFailure || !strings.HasPrefix(errOut, "metastore: not_found: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("unknown epoch: exit %d, stderr %q", code, errOut)
	}

	// Back up.
	out = mustCLI(srcNode, "snapshot", "save", "orders.backup")
	if !hasLine(out, "saved orders.backup") || !strings.Contains(out, "sha256 ") {
		t.Errorf("snapshot save:\n%s", out)
	}
	backup, err := os.ReadFile(filepath.Join(dir, "orders.backup"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "orders.backup.tmp")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is still there: %v", err)
	}

	// A fresh node, with its own data directory.
	dst := startCluster(t, 1)
	dstNode := dst.leader(30 * time.Second)
	emptyJobs := mustCLI(dstNode, "jobs", "list", "--json")
	emptyFsck := fsckCounts(t, mustCLI(dstNode, "fsck", "--json"))

	// A truncated copy is refused before anything is sent.
	os.WriteFile(filepath.Join(dir, "truncated.backup"), backup[:len(backup)-512], 0o600)
	code, out, errOut := cli(dstNode, "snapshot", "restore", "truncated.backup", "--yes")
	if code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "truncated.backup is not a valid backup: truncated") {
		t.Errorf("truncated backup: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Without --yes, with stdin not a terminal (the null device): refused.
	if code, _, errOut := cli(dstNode, "snapshot", "restore", "orders.backup"); code != exitUsage || !strings.Contains(errOut, "pass --yes") {
		t.Errorf("restore without --yes: exit %d, stderr %q", code, errOut)
	}
	if got := mustCLI(dstNode, "jobs", "list", "--json"); got != emptyJobs {
		t.Fatalf("a refused restore changed the jobs:\n%s", got)
	}
	if got := fsckCounts(t, mustCLI(dstNode, "fsck", "--json")); got != emptyFsck {
		t.Fatalf("a refused restore changed the blob counts: %s, was %s", got, emptyFsck)
	}

	out = mustCLI(dstNode, "snapshot", "restore", "orders.backup", "--yes")
	if !strings.HasPrefix(out, "restored orders.backup onto the cluster at http://"+dstNode.httpAddr+": index ") {
		t.Errorf("snapshot restore: %q", out)
	}

	// Same jobs, checkpoints and counts.
	waitFor(t, 10*time.Second, func() error {
		for _, args := range [][]string{
			{"jobs", "list", "--json"},
			{"checkpoints", "list", "orders", "--json"},
			{"checkpoints", "show", "orders", "3", "--json"},
			{"restore-plan", "orders", "agg-0", "--json"},
		} {
			a, b := mustCLI(srcNode, args...), mustCLI(dstNode, args...)
			if a != b {
				return fmt.Errorf("%s differs after the restore:\n%s\n---\n%s", strings.Join(args, " "), a, b)
			}
		}
		if a, b := fsckCounts(t, mustCLI(srcNode, "fsck", "--json")), fsckCounts(t, mustCLI(dstNode, "fsck", "--json")); a != b {
			return fmt.Errorf("fsck differs: %s, restored %s", a, b)
		}
		return nil
	})
	if got := mustCLI(dstNode, "jobs", "list", "--json"); got == emptyJobs {
		t.Fatal("the restored node has no jobs")
	}
	// A backup holds the metadata, not the blobs: the fresh node's own blob
	// store lacks them, and verify says which, exiting 1.
	code, out, errOut = cli(dstNode, "verify", "orders")
	if code != exitFailure || !strings.HasPrefix(errOut, "metastore: verify: job orders: ") {
		t.Errorf("verify on the restored node: exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out, "JOB EPOCH TASK KEY PINNED", "orders 1 agg-0 "+key1+" no", "orders 2 agg-0 "+key1+" no", "orders 2 agg-0 "+key2+" no")
}

// fsckCounts returns what fsck --json reports, without the index (which
// differs between two stores with the same content).
func fsckCounts(t *testing.T, out string) string {
	t.Helper()
	var answer struct {
		OK     bool `json:"ok"`
		Report struct {
			Blobs      int   `json:"blobs"`
			Records    int   `json:"records"`
			Lineages   int   `json:"lineages"`
			Mismatches []any `json:"mismatches"`
			Problems   []any `json:"problems"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &answer); err != nil {
		t.Fatalf("fsck --json: %v\n%s", err, out)
	}
	r := answer.Report
	return fmt.Sprintf("ok=%v blobs=%d records=%d lineages=%d mismatches=%d problems=%d", answer.OK, r.Blobs, r.Records, r.Lineages, len(r.Mismatches), len(r.Problems))
}

// uploadBlob asks the cluster for an upload slot and PUTs data to it.
func uploadBlob(t *testing.T, c *clCluster, job, task string, data []byte) string {
	t.Helper()
	var answer struct {
		Uploads []struct {
			Key string `json:"key"`
			URL string `json:"url"`
		} `json:"uploads"`
	}
	body := c.send("POST", "/v1/jobs/"+job+"/uploads", map[string]any{"generation": 1, "task": task, "count": 1})
	if err := json.Unmarshal(body, &answer); err != nil || len(answer.Uploads) != 1 {
		t.Fatalf("uploads: %s %v", body, err)
	}
	req, err := http.NewRequest("PUT", answer.Uploads[0].URL, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := clHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %s", answer.Uploads[0].URL, resp.Status)
	}
	return answer.Uploads[0].Key
}
