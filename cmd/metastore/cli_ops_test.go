package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
)

const gcStatusJSON = `{"enabled":true,"running":false,"leading":true,
 "last_run":{"dry_run":false,"started":"2025-01-02T03:04:05Z","finished":"2025-01-02T03:04:05.012Z","duration":"12ms",
  "expired_intents":1,"marks_proposed":3,"marked":3,"deleted":3,"resumed":0,"bytes_freed":5000,"orphan_sweep":false,
  "orphans_listed":0,"orphans_deleted":0,"purged":0,"delete_errors":0,"errors":0},
 "totals":{"since":"2025-01-02T00:00:00Z","cycles":7,"failed_cycles":0,"expired_intents":1,"marks_proposed":3,"marked":3,
  "deleted":3,"bytes_freed":5000,"orphan_sweeps":0,"orphans_deleted":0,"purged":0,"delete_errors":0,"errors":0},
 "pending_candidates":2,"deleting":0,"store":"file:///var/lib/metastore/blobs",
 "config":{"interval":"30s","grace":"10m0s","batch_size":1000,"rate":0,"tombstone_ttl":"24h0m0s","orphan_grace":"1h0m0s",
  "orphan_every":"1h0m0s","prefix":"","delete_timeout":"1m0s"}}`

func TestGC(t *testing.T) {
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/gc": answer(200, gcStatusJSON),
		"POST /v1/gc/run": answer(200, `{"dry_run":true,"started":"2025-01-02T03:04:05Z","finished":"2025-01-02T03:04:05Z","duration":"2ms",
			"expired_intents":0,"marks_proposed":2,"marked":2,"deleted":2,"resumed":0,"bytes_freed":2048,"orphan_sweep":true,
			"orphans_listed":10,"orphans_deleted":1,"purged":0,"delete_errors":0,"errors":0,
			"candidates":["orders/agg-0/a","orders/agg-0/b"],"orphans":["orders/x/stray"]}`),
	})
	code, out, errOut := runCmd([]string{"gc", "status", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out,
		"collector enabled, leading (this member collects)",
		"store file:///var/lib/metastore/blobs",
		"candidates 2 unreferenced blobs (grace 10m0s)",
		"last run 2025-01-02T03:04:05Z, took 12ms: 3 marked, 3 deleted, 5000 bytes (4.9 KiB) freed, 0 errors",
		"last orphan sweep never",
		"totals since 2025-01-02T00:00:00Z: 7 cycles (0 failed), 3 deleted, 5000 bytes (4.9 KiB) freed, 0 orphans deleted, 0 errors",
	)

	code, out, errOut = runCmd([]string{"gc", "run", "--dry-run", "--orphans", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("run: exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out,
		"dry run: what a cycle would do now; nothing was changed",
		"would be deleted 2 (0 resumed from an earlier cycle)",
		"would be freed 2048 bytes (2.0 KiB)",
		"orphan sweep 10 listed, 1 would be deleted",
		"candidates would be deleted:",
		"orders/agg-0/a",
		"orphans would be deleted:",
		"orders/x/stray",
	)
	code, _, _ = runCmd([]string{"gc", "run", "--addr", srv.URL}, nil)
	if code != exitOK {
		t.Fatalf("run without flags: exit %d", code)
	}
	seen := f.seen()
	if got := strings.Join(seen[1:], "|"); got != "POST /v1/gc/run?dry_run=true&orphans=true|POST /v1/gc/run" {
		t.Errorf("requests = %s", got)
	}

	// A cycle with errors fails, after its report.
	_, bad := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/gc/run": answer(200, `{"dry_run":false,"deleted":0,"delete_errors":2,"errors":2,"error":"object store: timeout"}`),
	})
	code, out, errOut = runCmd([]string{"gc", "run", "--addr", bad.URL}, nil)
	if code != exitFailure || !hasLine(out, "errors 2: object store: timeout") ||
		errOut != "metastore: gc run: the cycle met 2 errors; the first: object store: timeout\n" {
		t.Errorf("failed cycle: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
}

func TestVerify(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/jobs/good/verify": answer(200, `{"job":"good","index":42,"references":5,"blobs":3,"missing":[],"errors":[],"duration":"3ms"}`),
		"GET /v1/jobs/bad/verify": answer(200, `{"job":"bad","index":42,"references":5,"blobs":3,"missing":[
			{"job":"bad","epoch":7,"task":"agg-0","key":"bad/agg-0/k1","pinned":true},
			{"job":"bad","epoch":8,"task":"agg-0","key":"bad/agg-0/k1"}],"errors":[],"duration":"3ms"}`),
		"GET /v1/jobs/short/verify": answer(200, `{"job":"short","index":42,"references":1,"blobs":1,"missing":[],"changed":[
			{"job":"short","epoch":3,"task":"t","key":"short/t/k","declared_size":99,"observed_size":10,"size":10,
			 "mismatches":["size observed after the ack 10 bytes, ack declared 99"]}],"errors":[],"duration":"3ms"}`),
		"GET /v1/jobs/flaky/verify": answer(200, `{"job":"flaky","index":42,"references":1,"blobs":1,"missing":[],
			"errors":[{"key":"flaky/t/k","error":"403 Forbidden"}],"duration":"3ms"}`),
	})
	code, out, errOut := runCmd([]string{"verify", "good", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" || !hasLine(out, "job good: checked 3 blobs (5 references from retained and pinned checkpoints) in 3ms, at index 42") || !hasLine(out, "all present") {
		t.Errorf("good: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}

	code, out, errOut = runCmd([]string{"verify", "bad", "--addr", srv.URL}, nil)
	if code != exitFailure || errOut != "metastore: verify: job bad: 2 references to missing blobs; its checkpoints cannot all be restored\n" {
		t.Errorf("bad: exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out, "JOB EPOCH TASK KEY PINNED", "bad 7 agg-0 bad/agg-0/k1 yes", "bad 8 agg-0 bad/agg-0/k1 no")
	if strings.Contains(out, "all present") {
		t.Errorf("bad: says all present:\n%s", out)
	}
	// --json prints the report and still fails.
	code, out, _ = runCmd([]string{"verify", "bad", "--json", "--addr", srv.URL}, nil)
	var rep struct {
		Missing []any `json:"missing"`
	}
	if code != exitFailure || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Missing) != 2 {
		t.Errorf("bad --json: exit %d, %s", code, out)
	}
	// A blob acked as 99 bytes whose object holds 10 fails, its mismatch
	// named.
	code, out, errOut = runCmd([]string{"verify", "short", "--addr", srv.URL}, nil)
	if code != exitFailure || !strings.Contains(out, "  short/t/k: size observed after the ack 10 bytes, ack declared 99\n") ||
		errOut != "metastore: verify: job short: 1 reference to blobs whose object is not the one the ack committed; restoring them reads other bytes\n" {
		t.Errorf("short: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	// A blob that could not be checked is not a success either.
	code, out, errOut = runCmd([]string{"verify", "flaky", "--addr", srv.URL}, nil)
	if code != exitFailure || !hasLine(out, "flaky/t/k 403 Forbidden") || errOut != "metastore: verify: job flaky: 1 blob could not be checked\n" {
		t.Errorf("flaky: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
}

func TestFsck(t *testing.T) {
	okBody := `{"ok":true,"report":{"index":42,"blobs":3,"records":5,"lineages":2,"mismatches":[],"problems":[]}}`
	badBody := `{"ok":false,"report":{"index":42,"blobs":3,"records":5,"lineages":2,
		"mismatches":[{"key":"j/t/k","state":"live","stored":2,"recounted":1}],"problems":["record j/t/x has no blob"]}}`
	_, good := newFakeNode(t, map[string]func(http.ResponseWriter){"GET /v1/fsck": answer(200, okBody)})
	_, bad := newFakeNode(t, map[string]func(http.ResponseWriter){"GET /v1/fsck": answer(200, badBody)})

	code, out, errOut := runCmd([]string{"fsck", "--addr", good.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out, "index 42", "blobs 3", "references 5", "lineages 2", "mismatches 0", "ok: every reference count matches its manifests")

	code, out, errOut = runCmd([]string{"fsck", "--addr", bad.URL}, nil)
	if code != exitFailure || errOut != "metastore: fsck: 1 reference count mismatch and 1 other problem\n" {
		t.Errorf("mismatch: exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out, "KEY STATE STORED REFS RECOUNTED", "j/t/k live 2 1", "problem: record j/t/x has no blob")
	if code, _, _ := runCmd([]string{"fsck", "--json", "--addr", bad.URL}, nil); code != exitFailure {
		t.Errorf("mismatch --json: exit %d, want 1", code)
	}
}

func TestLeaderTransfer(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/leader/transfer": answer(200, `{"previous_leader":"n1","leader_id":"n2"}`),
	})
	code, out, errOut := runCmd([]string{"leader", "transfer", "--addr", srv.URL}, nil)
	if code != exitOK || out != "leadership moved from n1 to n2\n" || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, single := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/leader/transfer": answer(503, `{"error":{"code":"unavailable","message":"no other voter to transfer leadership to","retryable":true}}`),
	})
	code, _, errOut = runCmd([]string{"leader", "transfer", "--addr", single.URL}, nil)
	if code != exitFailure || errOut != "metastore: unavailable: no other voter to transfer leadership to\n" {
		t.Errorf("error: exit %d, stderr %q", code, errOut)
	}
}

// clientCommandLines is one valid command line of every client command.
var clientCommandLines = map[string][]string{
	"status":           {"status"},
	"members list":     {"members", "list"},
	"members add":      {"members", "add", "n4", "--raft-addr", "h:1", "--http-addr", "h:2"},
	"members remove":   {"members", "remove", "n4"},
	"leader transfer":  {"leader", "transfer"},
	"jobs list":        {"jobs", "list"},
	"jobs show":        {"jobs", "show", "orders"},
	"jobs delete":      {"jobs", "delete", "orders"},
	"checkpoints list": {"checkpoints", "list", "orders"},
	"checkpoints show": {"checkpoints", "show", "orders", "1"},
	"restore-plan":     {"restore-plan", "orders", "t"},
	"epochs abort":     {"epochs", "abort", "orders", "1"},
	"epochs pin":       {"epochs", "pin", "orders", "1"},
	"epochs unpin":     {"epochs", "unpin", "orders", "1"},
	"gc status":        {"gc", "status"},
	"gc run":           {"gc", "run"},
	"verify":           {"verify", "orders"},
	"fsck":             {"fsck"},
	"snapshot save":    {"snapshot", "save", "out.backup"},
	"snapshot restore": {"snapshot", "restore", "in.backup", "--yes"},
	"tokens create":    {"tokens", "create", "--role", "worker", "--job", "orders"},
	"tokens list":      {"tokens", "list"},
	"tokens revoke":    {"tokens", "revoke", "0123456789abcdef"},
}

// TestEveryClientCommand checks, for every client command of the table,
// that a dead address is one line naming it (exit 1), that a missing or
// extra argument is a usage line (exit 2), and that -h shows its synopsis.
func TestEveryClientCommand(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	t.Chdir(dir)
	// snapshot restore checks its file before it connects: give it a valid one.
	writeBackupFile(t, "in.backup", []byte("state"))

	for _, c := range commands {
		if !c.client {
			continue
		}
		args, ok := clientCommandLines[c.name]
		if !ok {
			t.Errorf("no command line for %q in clientCommandLines", c.name)
			continue
		}
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			code, out, errOut := runCmd(append(args, "--addr", dead), nil)
			want := "metastore: cannot connect to http://" + dead + ": connection refused (is 'metastore serve' running there?)"
			if code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) {
				t.Errorf("dead address: exit %d, stdout %q, stderr %q", code, out, errOut)
			}

			words := len(strings.Fields(c.name))
			var broken []string
			if c.args == "" {
				broken = append(append(append([]string{}, args...), "extra"), "--addr", dead)
			} else {
				broken = append(append([]string{}, args[:words]...), "--addr", dead) // arguments missing
			}
			code, out, errOut = runCmd(broken, nil)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "(usage: metastore "+c.synopsis()+")") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage line and exit 2", broken, code, out, errOut)
			}

			code, out, _ = runCmd(append(append([]string{}, args[:words]...), "-h"), nil)
			if code != exitOK || !strings.HasPrefix(out, "Usage: metastore "+c.synopsis()+"\n") || !strings.Contains(out, "-addr") {
				t.Errorf("-h: exit %d, stdout %q", code, out)
			}
		})
	}
	if entries, _ := readDirNames(dir); strings.Join(entries, ",") != "in.backup" {
		t.Errorf("files left behind: %q", entries)
	}
}

// TestUsageListsEveryCommand checks that help lists every command, and
// that a group without its subcommand is a usage error naming them.
func TestUsageListsEveryCommand(t *testing.T) {
	code, out, _ := runCmd([]string{"help"}, nil)
	if code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range commands {
		name := c.name
		if c.args != "" {
			name += " " + c.args
		}
		if !strings.Contains(out, "  "+name+"  ") {
			t.Errorf("help does not list %q:\n%s", name, out)
		}
	}
	for _, tc := range []struct{ group, subs string }{
		{"jobs", "list, show or delete"}, {"checkpoints", "list or show"}, {"gc", "status or run"},
		{"snapshot", "save or restore"}, {"epochs", "abort, pin or unpin"}, {"leader", "transfer"}, {"members", "list, add or remove"},
	} {
		code, out, errOut := runCmd([]string{tc.group}, nil)
		if code != exitUsage || out != "" || errOut != "metastore: "+tc.group+": want a subcommand: "+tc.subs+" (run 'metastore "+tc.group+" -h')\n" {
			t.Errorf("%s: exit %d, stderr %q", tc.group, code, errOut)
		}
		code, out, _ = runCmd([]string{tc.group, "-h"}, nil)
		if code != exitOK || !strings.HasPrefix(out, "Usage:\n  metastore "+tc.group+" ") {
			t.Errorf("%s -h: exit %d, %q", tc.group, code, out)
		}
		code, _, errOut = runCmd([]string{tc.group, "frobnicate"}, nil)
		if code != exitUsage || !strings.Contains(errOut, `unknown subcommand "frobnicate"`) {
			t.Errorf("%s frobnicate: exit %d, %q", tc.group, code, errOut)
		}
	}
}

// TestGCStatusShowsASweepRetry: a sweep that did not finish is shown with
// the time of its retry.
func TestGCStatusShowsASweepRetry(t *testing.T) {
	status := strings.Replace(gcStatusJSON, `"pending_candidates":2,`,
		`"pending_candidates":2,"last_orphan_sweep":"2025-01-02T03:04:05Z","orphan_sweep_retry_at":"2025-01-02T03:05:05Z",`, 1)
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){"GET /v1/gc": answer(200, status)})
	code, out, errOut := runCmd([]string{"gc", "status", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out, "last orphan sweep 2025-01-02T03:04:05Z, did not finish: tried again at 2025-01-02T03:05:05Z")
}
