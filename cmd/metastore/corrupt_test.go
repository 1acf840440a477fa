package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// snapshotSums returns the SHA-256 of every file of every snapshot of the
// member whose data directory is dir, keyed by path.
func snapshotSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "snapshots", "snapshots", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		if strings.Contains(f, ".tmp") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // reaped meanwhile
		}
		sum := sha256.Sum256(raw)
		out[f] = hex.EncodeToString(sum[:])
	}
	return out
}

// restoreLines counts the log lines of p that say its state machine was
// replaced by a snapshot.
func restoreLines(p *clProc) int {
	s := strings.ToLower(p.stderr.String())
	return strings.Count(s, "installed remote snapshot") + strings.Count(s, "state restored from snapshot") +
		strings.Count(s, "restoring it from the snapshot")
}

// TestCorruptMemberDetectedAndRebuilt damages, on one stopped member of
// three, in turn its Raft log (raft-wal's wal-meta.db truncated; a log
// that lost entries is node's TestLogThatLostEntriesIsRefused), its snapshots (state.bin
// with flipped bytes) and its state machine file (fsm.db overwritten). Each
// time the member refuses to start with one error naming the file, exit
// status 1; `metastore rebuild` moves its data aside, has it removed from
// the configuration and added back, and it receives the state by snapshot:
// its state hash equals the others' at the same index. The other two
// members restore nothing and their snapshot files are never modified.
func TestCorruptMemberDetectedAndRebuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
	}
	c := startCluster(t, 3)
	c.leader(30 * time.Second)
	var specs []map[string]any
	for i := range 200 {
		specs = append(specs, map[string]any{"id": fmt.Sprintf("t%03d", i), "capabilities": []string{"state"}})
	}
	c.send("PUT", "/v1/jobs/j", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "1h"}})
	c.send("POST", "/v1/jobs/j/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})
	c.send("POST", "/v1/jobs/j/epochs", map[string]any{"generation": 1, "epoch": 1})
	next := 0
	ackSome := func(n int) {
		for end := next + n; next < end; next++ {
			tk := fmt.Sprintf("t%03d", next)
			c.send("PUT", "/v1/jobs/j/epochs/1/acks/"+tk, map[string]any{"generation": 1, "payloads": map[string][]byte{"state": []byte("payload " + tk)}})
		}
	}
	ackSome(60)
	c.converged(60 * time.Second)
	// Every member has a snapshot (threshold 32 entries).
	waitFor(t, 30*time.Second, func() error {
		for _, p := range c.procs {
			if files, _ := filepath.Glob(filepath.Join(p.dataDir, "snapshots", "snapshots", "*", "state.bin")); len(files) == 0 {
				return fmt.Errorf("%s has no snapshot yet", p.id)
			}
		}
		return nil
	})

	cases := []struct {
		name    string
		file    string // relative to the data directory, as the error names it
		moved   string // what the rebuild moves aside with it
		corrupt func(t *testing.T, dataDir string)
	}{
		{"wal-meta.db truncated", "raft/wal/wal-meta.db", "raft", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "raft", "wal", "wal-meta.db"), 3*4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"state.bin bytes flipped", "state.bin", "snapshots", func(t *testing.T, dir string) {
			files, _ := filepath.Glob(filepath.Join(dir, "snapshots", "snapshots", "*", "state.bin"))
			if len(files) == 0 {
				t.Fatal("no snapshot to corrupt")
			}
			for _, f := range files {
				raw, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for i := len(raw) / 2; i < len(raw)/2+16 && i < len(raw); i++ {
					raw[i] ^= 0xa5
				}
				if err := os.WriteFile(f, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"fsm.db overwritten", "fsm.db", "fsm.db", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "fsm.db")
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			garbage := make([]byte, info.Size()-2*4096) // all but the two meta pages
			rand.Read(garbage)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(garbage, 2*4096); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Logf("--- %s", tc.name)
		leader := c.leader(30 * time.Second)
		var victim *clProc
		var others []*clProc
		for _, p := range c.procs {
			if p != leader && victim == nil {
				victim = p
			} else {
				others = append(others, p)
			}
		}
		victim.kill(t)
		serveArgs := victim.args
		sums := map[string]map[string]string{}
		restores := map[string]int{}
		for _, p := range others {
			sums[p.id] = snapshotSums(t, p.dataDir)
			restores[p.id] = restoreLines(p)
		}
		tc.corrupt(t, victim.dataDir)

		// Detection: one error naming the file, exit status 1.
		victim.start(t)
		select {
		case <-victim.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the member started on a corrupt %s", tc.name, tc.file)
		}
		out := victim.stderr.String()
		if code := victim.cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("%s: exit status %d, want 1; stderr:\n%s", tc.name, code, tail(out, 4096))
		}
		var line string
		for l := range strings.SplitSeq(out, "\n") {
			if strings.Contains(l, "is corrupt") {
				line = l
			}
		}
		if line == "" || !strings.Contains(line, tc.file) || !strings.Contains(line, "metastore rebuild") {
			t.Fatalf("%s: no error line naming %s and the rebuild; stderr:\n%s", tc.name, tc.file, tail(out, 4096))
		}
		t.Logf("detected: %s", line)
		if strings.Contains(out, "panic") || strings.Contains(out, "fatal error") || strings.Contains(out, "SIGBUS") {
			t.Fatalf("%s: the member crashed instead of reporting:\n%s", tc.name, tail(out, 4096))
		}

		// Rebuild with the same flags, as rebuild, plus --join. The victim
		// is the first member that does not lead: another one than in the
		// previous round when leadership moved, so its quarantine
		// directories are counted from here.
		quarantinesBefore, _ := filepath.Glob(filepath.Join(victim.dataDir, "quarantine-*"))
		victim.args = append(append([]string{"rebuild"}, serveArgs[1:]...), "--join", others[0].httpAddr)
		victim.start(t)
		c.converged(90 * time.Second)
		if err := func() error {
			var st clStatus
			if err := clGet(others[0].url("/v1/status"), &st); err != nil {
				return err
			}
			voters := 0
			for _, m := range st.Members {
				if m.Suffrage == "voter" {
					voters++
				}
			}
			if voters != 3 {
				return fmt.Errorf("%d voters: %+v", voters, st.Members)
			}
			return nil
		}(); err != nil {
			t.Fatalf("%s: after the rebuild: %v", tc.name, err)
		}
		vout := strings.ToLower(victim.stderr.String())
		if !strings.Contains(vout, "installed remote snapshot") || !strings.Contains(vout, "removed from the raft configuration") {
			t.Fatalf("%s: the rebuilt member was not removed and sent a snapshot; stderr:\n%s", tc.name, tail(victim.stderr.String(), 6144))
		}
		dirs, _ := filepath.Glob(filepath.Join(victim.dataDir, "quarantine-*"))
		var added []string
		for _, d := range dirs {
			if !slices.Contains(quarantinesBefore, d) {
				added = append(added, d)
			}
		}
		if len(added) != 1 {
			t.Fatalf("%s: the rebuild made %d new quarantine directories, want 1 (%v, before %v)", tc.name, len(added), dirs, quarantinesBefore)
		}
		if _, err := os.Stat(filepath.Join(added[0], tc.moved)); err != nil {
			t.Fatalf("%s: the damaged data was not moved to the new quarantine directory: %v", tc.name, err)
		}
		// The majority was not touched: no restore, snapshot files as they were.
		for _, p := range others {
			if n := restoreLines(p); n != restores[p.id] {
				t.Fatalf("%s: %s restored a snapshot during the rebuild", tc.name, p.id)
			}
			now := snapshotSums(t, p.dataDir)
			for f, sum := range sums[p.id] {
				if got, ok := now[f]; ok && got != sum {
					t.Fatalf("%s: %s's snapshot file %s changed during the rebuild", tc.name, p.id, f)
				}
			}
		}
		// The cluster takes writes with the rebuilt member.
		ackSome(5)
		c.converged(60 * time.Second)
		victim.args = serveArgs
	}
	if status, body := clDo("GET", c.procs[0].url("/v1/jobs/j/epochs/1"), nil); status != http.StatusOK {
		t.Fatalf("read: %d %s", status, body)
	}
}
