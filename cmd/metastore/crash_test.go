package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultBinary is the metastore command built with -tags faultinject (its
// fault points, internal/faultpoint, are armed by the FAULTPOINTS variable),
// built once, beside the default binary, by the first test that needs it.
var (
	faultBinaryOnce sync.Once
	faultBinaryPath string
	faultBinaryErr  error
)

func faultBinary(t *testing.T) string {
	t.Helper()
	faultBinaryOnce.Do(func() {
		path := filepath.Join(filepath.Dir(binary), "metastore-faultinject")
		out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", path, ".").CombinedOutput()
		if err != nil {
			faultBinaryErr = fmt.Errorf("go build -tags faultinject: %v: %s", err, out)
			return
		}
		faultBinaryPath = path
	})
	if faultBinaryErr != nil {
		t.Fatal(faultBinaryErr)
	}
	return faultBinaryPath
}

// faultProc is one member run from the faultinject binary.
type faultProc struct {
	*clProc
}

func newFaultProc(t *testing.T) *faultProc {
	t.Helper()
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(t.TempDir(), "n1")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr,
		"--raft-addr", p.raftAddr}, clRaftFlags...)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() && p.stderr != nil {
			t.Logf("--- stderr (last 6 KiB):\n%s", tail(p.stderr.String(), 6144))
		}
	})
	return &faultProc{p}
}

// startWith starts the member from the faultinject binary with FAULTPOINTS
// set to points ("" arms nothing) and the variables env (for example
// FAULTPOINT_ADDR), and waits until it leads.
func (p *faultProc) startWith(t *testing.T, points string, env ...string) {
	t.Helper()
	p.env = append([]string(nil), env...)
	if points != "" {
		p.env = append(p.env, "FAULTPOINTS="+points)
	}
	saved := binary
	binary = faultBinary(t)
	p.start(t)
	binary = saved
	(&clCluster{t: t, procs: []*clProc{p.clProc}}).leader(30 * time.Second)
}

// crashed waits for the process to exit with the crash status at point.
func (p *faultProc) crashed(t *testing.T, point string) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the member did not crash at %s", point)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 137 || !strings.Contains(p.stderr.String(), "faultpoint: crash at "+point) {
		t.Fatalf("the member exited with %d, want the crash at %s (137)", code, point)
	}
}

// acks is the acknowledged acks of epoch 1 of job "j": task -> content hash.
type acks map[string]string

func setupJob(t *testing.T, p *faultProc, tasks int) {
	t.Helper()
	c := &clCluster{t: t, procs: []*clProc{p.clProc}}
	var specs []map[string]any
	for i := range tasks {
		specs = append(specs, map[string]any{"id": fmt.Sprintf("t%03d", i), "capabilities": []string{"state"}})
	}
	c.send("PUT", "/v1/jobs/j", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "1h"}})
	c.send("POST", "/v1/jobs/j/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})
	c.send("POST", "/v1/jobs/j/epochs", map[string]any{"generation": 1, "epoch": 1})
}

// ack acknowledges task i of epoch 1 and records it in got when answered
// 200; it returns the status.
func ack(p *faultProc, i int, got acks) int {
	tk := fmt.Sprintf("t%03d", i)
	status, body := clDo("PUT", p.url("/v1/jobs/j/epochs/1/acks/"+tk),
		map[string]any{"generation": 1, "payloads": map[string][]byte{"state": []byte("payload of " + tk)}})
	if status == http.StatusOK {
		var res struct {
			Ack struct {
				ContentHash string `json:"content_hash"`
			} `json:"ack"`
		}
		if json.Unmarshal(body, &res) == nil {
			got[tk] = res.Ack.ContentHash
		}
	}
	return status
}

// stored reads the acks of epoch 1 linearizably.
func stored(t *testing.T, p *faultProc) acks {
	t.Helper()
	var e struct {
		Acks []struct {
			Task        string `json:"task"`
			ContentHash string `json:"content_hash"`
		} `json:"acks"`
	}
	// A restarted leader serves linearizable reads once it has committed
	// an entry of its term.
	waitFor(t, 30*time.Second, func() error {
		return clGet(p.url("/v1/jobs/j/epochs/1?consistency=linearizable"), &e)
	})
	out := acks{}
	for _, a := range e.Acks {
		out[a.Task] = a.ContentHash
	}
	return out
}

func sameAcks(t *testing.T, what string, got, want acks, maybe ...string) {
	t.Helper()
	for tk, h := range want {
		if got[tk] != h {
			t.Fatalf("%s: ack of %s stored as %q, want %q", what, tk, got[tk], h)
		}
	}
	// Beyond the acknowledged ones, only an ack whose request went
	// unanswered (in flight at the crash) may be stored: its outcome is
	// unknown to the client, so either is correct.
	for tk := range got {
		if _, ok := want[tk]; !ok && !slices.Contains(maybe, tk) {
			t.Fatalf("%s: ack of %s stored but never sent or refused (%d acks stored, %d acknowledged, in doubt %v)",
				what, tk, len(got), len(want), maybe)
		}
	}
}

// TestCrashDuringSnapshotPersist: kill -9 (the crash action exits as a
// SIGKILL would, without running anything) while Raft persists a snapshot
// leaves a member that restarts with every acknowledged write, removes
// the partial snapshot and takes snapshots again.
func TestCrashDuringSnapshotPersist(t *testing.T) {
	if testing.Short() {
		t.Skip("runs metastore processes; skipped in -short mode")
	}
	p := newFaultProc(t)
	p.startWith(t, "")
	setupJob(t, p, 200)
	p.kill(t)

	// Armed from the start: the first snapshot (after 32 entries) crashes.
	p.startWith(t, "node.snapshot-persist=crash")
	acked := acks{}
	var inDoubt []string
	// Up to 150 of the 200 tasks: the snapshot may come only after the
	// loop (its timer fires late on a fast run), and the ack after the
	// restart needs a task left.
	for i := 0; i < 150 && p.running(); i++ {
		if ack(p, i, acked) == 0 {
			inDoubt = append(inDoubt, fmt.Sprintf("t%03d", i)) // no answer: the process died
		}
	}
	p.crashed(t, "node.snapshot-persist")
	partial, _ := filepath.Glob(filepath.Join(p.dataDir, "snapshots", "snapshots", "*.tmp"))
	if len(partial) == 0 {
		t.Fatal("the crash left no partial snapshot; was it during persist?")
	}

	p.startWith(t, "")
	sameAcks(t, "after the crash during snapshot persist", stored(t, p), acked, inDoubt...)
	// The crash's partial snapshots are gone. (The restarted member may
	// be writing a new snapshot of its own by now, under another name.)
	for _, f := range partial {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("partial snapshot %s left after restart (stat: %v)", f, err)
		}
	}
	// Snapshots work again (a backup takes one), and writes go on.
	if status, body := clDo("GET", p.url("/v1/snapshot"), nil); status != http.StatusOK {
		t.Fatalf("snapshot after restart: %d %.300s", status, body)
	}
	if st := ack(p, 199, acked); st != http.StatusOK {
		t.Fatalf("ack after restart failed: %d (acked %d, in doubt %v)", st, len(acked), inDoubt)
	}
	p.kill(t)
	p.startWith(t, "")
	sameAcks(t, "after a second restart", stored(t, p), acked, inDoubt...)
}

// TestCrashDuringRestore: kill -9 inside the state machine's restore, at
// each of its steps (restored file written but not renamed; renamed but not
// opened), during the restore of a backup. The snapshot holding the backup
// is durable before the state machine restores it, so the restarted member
// finishes the restore: it holds exactly the backup's acks, serves reads
// and writes, and keeps them over another restart.
func TestCrashDuringRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs metastore processes; skipped in -short mode")
	}
	for _, point := range []string{"fsm.restore-written", "fsm.restore-renamed"} {
		t.Run(point, func(t *testing.T) {
			p := newFaultProc(t)
			p.startWith(t, "")
			setupJob(t, p, 100)
			before := acks{}
			for i := range 20 {
				if ack(p, i, before) != http.StatusOK {
					t.Fatalf("ack %d failed", i)
				}
			}
			status, backup := clDo("GET", p.url("/v1/snapshot"), nil)
			if status != http.StatusOK {
				t.Fatalf("backup: %d %.300s", status, backup)
			}
			after := acks{}
			for k, v := range before {
				after[k] = v
			}
			for i := 20; i < 40; i++ {
				if ack(p, i, after) != http.StatusOK {
					t.Fatalf("ack %d failed", i)
				}
			}
			p.kill(t)

			p.startWith(t, point+"=crash")
			req, err := http.NewRequest("PUT", p.url("/v1/snapshot"), bytes.NewReader(backup))
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := clHTTP.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Fatal("the restore succeeded; the fault point did not fire")
				}
			}
			p.crashed(t, point)

			p.startWith(t, "")
			sameAcks(t, "after the crash during restore", stored(t, p), before)
			if _, err := os.Stat(filepath.Join(p.dataDir, "fsm.db.restore")); err == nil {
				t.Fatal("the partly restored file is still there")
			}
			next := acks{}
			for k, v := range before {
				next[k] = v
			}
			for i := 50; i < 60; i++ {
				if ack(p, i, next) != http.StatusOK {
					t.Fatalf("ack %d after restart failed", i)
				}
			}
			p.kill(t)
			p.startWith(t, "")
			sameAcks(t, "after a second restart", stored(t, p), next)
		})
	}
}
