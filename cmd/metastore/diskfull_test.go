package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/smallfs"
)

type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

type diskStatus struct {
	Disk struct {
		Dir           string `json:"dir"`
		FreeBytes     uint64 `json:"free_bytes"`
		MinFreeBytes  uint64 `json:"min_free_bytes"`
		WritesRefused bool   `json:"writes_refused"`
		RefusedTotal  uint64 `json:"refused_total"`
	} `json:"disk"`
}

// walSegmentOnSmallFS is the Raft log's segment size on the tests' 64 MiB
// file systems: a segment is preallocated whole, and the default (64 MiB)
// would not fit.
const walSegmentOnSmallFS = 4 << 20

// TestDiskFull runs a real member on a small file system and writes until
// it is full: writes are refused with 507 insufficient_storage naming the
// data directory and its free space, reads go on, a snapshot that meets a
// really full disk (ENOSPC) fails cleanly, the process neither crashes nor
// loses an acknowledged write, and writes succeed again, without a
// restart, once space is freed. A restart then finds every acknowledged
// write.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a metastore process; skipped in -short mode")
	}
	mnt := smallfs.Mount(t, 64<<20)
	const minFree = 12 << 20
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(mnt, "data")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr,
		"--raft-addr", p.raftAddr, "--min-free-disk", fmt.Sprint(minFree), "--raft-wal-segment-size", fmt.Sprint(walSegmentOnSmallFS)}, clRaftFlags...)
	p.start(t)
	c := &clCluster{t: t, procs: []*clProc{p}}
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- stderr (last 8 KiB):\n%s", tail(p.stderr.String(), 8192))
		}
	})
	c.leader(30 * time.Second)

	const tasks = 4000
	var specs []map[string]any
	for i := range tasks {
		specs = append(specs, map[string]any{"id": fmt.Sprintf("t%04d", i), "capabilities": []string{"state"}})
	}
	c.send("PUT", "/v1/jobs/big", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "1h"}})
	c.send("POST", "/v1/jobs/big/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})
	c.send("POST", "/v1/jobs/big/epochs", map[string]any{"generation": 1, "epoch": 1})

	// Leave a few MiB above the guard's minimum, then ack until refused.
	filler := filepath.Join(mnt, "filler")
	smallfs.Fill(t, filler, minFree+6<<20)

	acked := map[string]string{} // task -> content hash
	var mu sync.Mutex
	next := 0
	ack := func(i int) (int, []byte) {
		payload := make([]byte, 16<<10)
		rand.Read(payload)
		tk := fmt.Sprintf("t%04d", i)
		status, body := clDo("PUT", p.url("/v1/jobs/big/epochs/1/acks/"+tk),
			map[string]any{"generation": 1, "payloads": map[string][]byte{"state": payload}})
		if status == http.StatusOK {
			var res struct {
				Ack struct {
					ContentHash string `json:"content_hash"`
				} `json:"ack"`
			}
			if err := json.Unmarshal(body, &res); err != nil || res.Ack.ContentHash == "" {
				t.Errorf("ack answer %s: %v", body, err)
			}
			mu.Lock()
			acked[tk] = res.Ack.ContentHash
			mu.Unlock()
		}
		return status, body
	}
	var refused []byte
	for ; next < tasks && refused == nil; next++ {
		status, body := ack(next)
		switch {
		case status == http.StatusOK:
		case status == http.StatusInsufficientStorage:
			refused = body
		default:
			t.Fatalf("ack %d: %d %s", next, status, body)
		}
	}
	if refused == nil {
		t.Fatalf("%d acks written and none refused", next)
	}
	t.Logf("refused after %d acks: %s", len(acked), refused)
	var ae errorBody
	if err := json.Unmarshal(refused, &ae); err != nil {
		t.Fatalf("507 body %s: %v", refused, err)
	}
	if ae.Error.Code != "insufficient_storage" || !ae.Error.Retryable ||
		!strings.Contains(ae.Error.Message, p.dataDir) || !strings.Contains(ae.Error.Message, "bytes free") {
		t.Fatalf("507 error %+v: want code insufficient_storage, retryable, naming %s and its free bytes", ae.Error, p.dataDir)
	}

	// Reads go on; status and metrics show the condition.
	for _, q := range []string{"", "?consistency=linearizable", "?consistency=stale"} {
		if status, body := clDo("GET", p.url("/v1/jobs/big/epochs/1"+q), nil); status != http.StatusOK {
			t.Fatalf("read %s while the disk is full: %d %s", q, status, body)
		}
	}
	var st diskStatus
	if err := clGet(p.url("/v1/status"), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Disk.WritesRefused || st.Disk.Dir != p.dataDir || st.Disk.MinFreeBytes != minFree || st.Disk.RefusedTotal == 0 || st.Disk.FreeBytes >= minFree {
		t.Fatalf("status while full: %+v", st.Disk)
	}
	if status, body := clDo("GET", p.url("/metrics"), nil); status != http.StatusOK ||
		!strings.Contains(string(body), "metastore_node_disk_free_bytes") ||
		strings.Contains(string(body), "metastore_node_disk_writes_refused_total 0\n") {
		t.Fatalf("metrics: %d, want metastore_node_disk_free_bytes and a non-zero metastore_node_disk_writes_refused_total", status)
	}

	// Now fill the disk completely: a snapshot (here, a backup's) meets
	// ENOSPC and fails cleanly; Raft's own snapshot attempts fail the same
	// way in the background. The member stays up and consistent.
	smallfs.Fill(t, filler, 0)
	status, body := clDo("GET", p.url("/v1/snapshot"), nil)
	if err := json.Unmarshal(body, &ae); status != http.StatusInsufficientStorage || err != nil || ae.Error.Code != "insufficient_storage" {
		t.Fatalf("backup on a full disk: %d %.300s, want 507 insufficient_storage", status, body)
	}
	if status, body := ack(next); status != http.StatusInsufficientStorage {
		t.Fatalf("ack on a full disk: %d %s", status, body)
	}
	if !p.running() {
		t.Fatalf("the member exited on a full disk: %v", p.err)
	}
	t.Logf("backup on a full disk: %s", ae.Error.Message)

	// Space returns: writes succeed again without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		status, body := ack(next)
		if status != http.StatusOK {
			return fmt.Errorf("ack after space was freed: %d %s", status, body)
		}
		next++
		return nil
	})
	for end := next + 20; next < end; next++ {
		if status, body := ack(next); status != http.StatusOK {
			t.Fatalf("ack %d after space was freed: %d %s", next, status, body)
		}
	}
	if err := clGet(p.url("/v1/status"), &st); err != nil || st.Disk.WritesRefused {
		t.Fatalf("status after space was freed: %+v %v", st.Disk, err)
	}
	if status, body := clDo("GET", p.url("/v1/snapshot"), nil); status != http.StatusOK {
		t.Fatalf("backup after space was freed: %d %.300s", status, body)
	}
	if s := p.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "fatal error") {
		t.Fatalf("the member panicked:\n%s", tail(s, 4096))
	}

	// Every acknowledged ack is there, now and after a kill -9 and restart.
	check := func() {
		t.Helper()
		var e struct {
			Acks []struct {
				Task        string `json:"task"`
				ContentHash string `json:"content_hash"`
			} `json:"acks"`
		}
		// A restarted leader serves linearizable reads once it has
		// committed an entry of its term.
		waitFor(t, 30*time.Second, func() error {
			return clGet(p.url("/v1/jobs/big/epochs/1?consistency=linearizable"), &e)
		})
		got := map[string]string{}
		for _, a := range e.Acks {
			got[a.Task] = a.ContentHash
		}
		for tk, h := range acked {
			if got[tk] != h {
				t.Fatalf("acknowledged ack of %s: stored %q, acknowledged %q", tk, got[tk], h)
			}
		}
		if len(got) != len(acked) {
			t.Fatalf("%d acks stored, %d acknowledged", len(got), len(acked))
		}
	}
	check()
	t.Logf("log lines reporting ENOSPC: %d", strings.Count(p.stderr.String(), "no space left"))
	p.kill(t)
	p.start(t)
	c.leader(30 * time.Second)
	check()
}

// TestDiskFullWithoutGuard runs the member with the free-space guard off
// (--min-free-disk 0), so writes meet the full disk itself (ENOSPC) in the
// Raft log, the state machine and snapshots. The member must not crash,
// must answer writes with errors (507 insufficient_storage, or a
// retryable 503/504 while it stalls), must keep every acknowledged write,
// and must take writes again once space is freed, without a restart.
func TestDiskFullWithoutGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a metastore process; skipped in -short mode")
	}
	mnt := smallfs.Mount(t, 64<<20)
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(mnt, "data")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr,
		"--raft-addr", p.raftAddr, "--min-free-disk", "0", "--apply-timeout", "3s", "--raft-wal-segment-size", fmt.Sprint(walSegmentOnSmallFS)}, clRaftFlags...)
	p.start(t)
	c := &clCluster{t: t, procs: []*clProc{p}}
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- stderr (last 8 KiB):\n%s", tail(p.stderr.String(), 8192))
		}
	})
	c.leader(30 * time.Second)
	const tasks = 4000
	var specs []map[string]any
	for i := range tasks {
		specs = append(specs, map[string]any{"id": fmt.Sprintf("t%04d", i), "capabilities": []string{"state"}})
	}
	c.send("PUT", "/v1/jobs/big", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "1h"}})
	c.send("POST", "/v1/jobs/big/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})
	c.send("POST", "/v1/jobs/big/epochs", map[string]any{"generation": 1, "epoch": 1})
	filler := filepath.Join(mnt, "filler")
	smallfs.Fill(t, filler, 4<<20)

	acked := map[string]string{}
	ack := func(i int) (int, []byte) {
		payload := make([]byte, 16<<10)
		rand.Read(payload)
		tk := fmt.Sprintf("t%04d", i)
		status, body := clDo("PUT", p.url("/v1/jobs/big/epochs/1/acks/"+tk),
			map[string]any{"generation": 1, "payloads": map[string][]byte{"state": payload}})
		if status == http.StatusOK {
			var res struct {
				Ack struct {
					ContentHash string `json:"content_hash"`
				} `json:"ack"`
			}
			if err := json.Unmarshal(body, &res); err != nil || res.Ack.ContentHash == "" {
				t.Errorf("ack answer %s: %v", body, err)
			}
			acked[tk] = res.Ack.ContentHash
		}
		return status, body
	}
	next := 0
	failures := map[int]int{}
	failed := 0
	// A member whose Raft log waits for space to start its next segment
	// answers every write "outcome unknown" after --apply-timeout: three
	// failures of any kind are enough.
	for ; next < tasks && failed < 3 && failures[http.StatusInsufficientStorage] == 0; next++ {
		status, body := ack(next)
		if status == http.StatusOK {
			continue
		}
		if status != http.StatusInsufficientStorage && !retryable(status, body) {
			t.Fatalf("ack %d on a full disk: %d %s", next, status, body)
		}
		failures[status]++
		failed++
		t.Logf("ack %d: %d %s", next, status, strings.Join(strings.Fields(string(body)), " "))
		if status == 0 {
			break
		}
	}
	if len(failures) == 0 {
		t.Fatalf("%d acks written and none failed", next)
	}
	if !p.running() {
		t.Fatalf("the member exited on a full disk: %v", p.err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() error {
		status, body := ack(next)
		if status != http.StatusOK {
			return fmt.Errorf("ack after space was freed: %d %s", status, body)
		}
		next++
		return nil
	})
	if s := p.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "fatal error") {
		t.Fatalf("the member panicked:\n%s", tail(s, 4096))
	}
	t.Logf("%d acks acknowledged; log lines reporting ENOSPC: %d", len(acked), strings.Count(p.stderr.String(), "no space left"))
	p.kill(t)
	p.start(t)
	c.leader(30 * time.Second)
	var e struct {
		Acks []struct {
			Task        string `json:"task"`
			ContentHash string `json:"content_hash"`
		} `json:"acks"`
	}
	waitFor(t, 30*time.Second, func() error {
		return clGet(p.url("/v1/jobs/big/epochs/1?consistency=linearizable"), &e)
	})
	got := map[string]string{}
	for _, a := range e.Acks {
		got[a.Task] = a.ContentHash
	}
	for tk, h := range acked {
		if got[tk] != h {
			t.Fatalf("acknowledged ack of %s: stored %q, acknowledged %q", tk, got[tk], h)
		}
	}
}
