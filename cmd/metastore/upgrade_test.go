package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/datadir"
)

// Data written by earlier releases is kept in testdata/upgrade/<name>/:
//
//	datadir.tar.gz  the data directory of a single-node member, stopped
//	                cleanly: Raft log, snapshots, state machine, local blobs
//	backup.snap     a backup taken with `metastore snapshot save`
//	expect.json     what the API answered for a set of reads, and the
//	                member's id and address when it was written
//
// TestReadsDataOfEarlierReleases starts the current build on each of them
// and checks it answers the same (fields added since are allowed, none may
// change or go missing), that the job resumes from its checkpoint, and that
// the backup restores. A change that cannot read an earlier release's data
// fails here.
//
// A release that changes a format (datadir.Current, fsm.SchemaVersion, the
// snapshot header, a command payload) adds a directory with the output of
//
//	METASTORE_WRITE_UPGRADE_DATA=vN go test ./cmd/metastore -run TestWriteUpgradeData
//
// written by the release BEFORE the change; directories already there are
// never rewritten.
const upgradeDataDir = "testdata/upgrade"

// upgradeExpect is expect.json.
type upgradeExpect struct {
	Release  string `json:"release"`
	Format   int    `json:"format"`
	NodeID   string `json:"node_id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
	// Job is the example job checkpointed into the directory.
	Job string `json:"job"`
	// Reads maps a GET path to the JSON it answered.
	Reads map[string]json.RawMessage `json:"reads"`
}

// upgradeReads are the paths whose answers are recorded. Restore answers
// are added per task. Answers that change with time alone (blob counts,
// which move as upload intents expire and the collector runs) are left out;
// fsck is checked instead.
var upgradeReads = []string{
	"/v1/jobs",
	"/v1/jobs/demo",
	"/v1/jobs/demo/epochs",
	"/v1/jobs/second",
	"/v1/jobs/second/epochs",
}

// upgradeTasks are the example job's tasks (examples/streamjob, topology
// "same").
var upgradeTasks = []string{"source-0", "source-1", "map-0", "agg-0", "agg-1", "sink-0"}

func buildStreamjob(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "streamjob")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/metastore/metastore/examples/streamjob").CombinedOutput()
	if err != nil {
		t.Fatalf("go build streamjob: %v\n%s", err, out)
	}
	return bin
}

func runStreamjob(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--addr", "http://" + addr}, args...)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("streamjob %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// singleNode starts one member on dataDir and waits until it leads.
func singleNode(t *testing.T, id, dataDir string, extra ...string) *clProc {
	t.Helper()
	p := &clProc{id: id, httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: dataDir}
	p.args = append([]string{"serve", "--node-id", id, "--data-dir", dataDir, "--http-addr", p.httpAddr,
		"--raft-addr", p.raftAddr}, clRaftFlags...)
	p.args = append(p.args, extra...)
	p.start(t)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- %s stderr (last 4 KiB):\n%s", p.id, tail(p.stderr.String(), 4096))
		}
	})
	c := &clCluster{t: t, procs: []*clProc{p}}
	if c.leader(30*time.Second) == nil {
		t.Fatalf("%s did not become leader; stderr:\n%s", id, tail(p.stderr.String(), 4096))
	}
	waitFor(t, 30*time.Second, func() error {
		if st, body := clDo(http.MethodGet, p.url("/readyz"), nil); st != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", st, body)
		}
		return nil
	})
	return p
}

func getRaw(t *testing.T, url string) json.RawMessage {
	t.Helper()
	status, body := clDo(http.MethodGet, url, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	return json.RawMessage(body)
}

func TestWriteUpgradeData(t *testing.T) {
	name := os.Getenv("METASTORE_WRITE_UPGRADE_DATA")
	if name == "" {
		t.Skip("writes testdata for TestReadsDataOfEarlierReleases; set METASTORE_WRITE_UPGRADE_DATA=<release name> to run")
	}
	out := filepath.Join(upgradeDataDir, name)
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("%s exists: the data of a release is never rewritten", out)
	}
	jobBin := buildStreamjob(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	// Snapshots every 32 entries with 16 trailing logs: the directory holds
	// a snapshot, and log entries past it.
	p := singleNode(t, "node1", dataDir)

	runStreamjob(t, jobBin, p.httpAddr, "--job", "demo", "run", "--epochs", "14")
	if st, body := clDo(http.MethodPut, p.url("/v1/jobs/demo/epochs/13/pin"), map[string]any{}); st != http.StatusOK {
		t.Fatalf("pin: %d %s", st, body)
	}
	if st, body := clDo(http.MethodPost, p.url("/v1/gc/run"), map[string]any{}); st != http.StatusOK {
		t.Fatalf("gc run: %d %s", st, body)
	}
	waitFor(t, 30*time.Second, func() error {
		if entries, _ := os.ReadDir(filepath.Join(dataDir, "snapshots", "snapshots")); len(entries) == 0 {
			return fmt.Errorf("no snapshot on disk yet")
		}
		return nil
	})
	runStreamjob(t, jobBin, p.httpAddr, "--job", "second", "run", "--epochs", "3")
	// The runs end by crashing in the middle of an epoch; abort those epochs
	// so that nothing in the recorded answers waits on a deadline.
	for _, e := range []string{"/v1/jobs/demo/epochs/15/abort", "/v1/jobs/second/epochs/4/abort"} {
		if st, body := clDo(http.MethodPost, p.url(e), map[string]any{"generation": 1, "reason": "left pending by the crashed run"}); st != http.StatusOK {
			t.Fatalf("POST %s: %d %s", e, st, body)
		}
	}

	exp := upgradeExpect{Release: readRecordedBuild(t).release(), Format: datadir.Current, NodeID: p.id,
		HTTPAddr: p.httpAddr, RaftAddr: p.raftAddr, Job: "demo", Reads: map[string]json.RawMessage{}}
	for _, path := range upgradeReads {
		exp.Reads[path] = getRaw(t, p.url(path))
	}
	for _, task := range upgradeTasks {
		path := "/v1/jobs/demo/tasks/" + task + "/restore"
		exp.Reads[path] = getRaw(t, p.url(path))
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd([]string{"snapshot", "save", "--addr", "http://" + p.httpAddr, filepath.Join(out, "backup.snap")}, nil)
	if code != 0 {
		t.Fatalf("snapshot save: %d\n%s\n%s", code, stdout, stderr)
	}
	if code := p.terminate(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	raw, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "expect.json"), append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeTarGz(filepath.Join(out, "datadir.tar.gz"), dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

func TestReadsDataOfEarlierReleases(t *testing.T) {
	dirs, err := os.ReadDir(upgradeDataDir)
	if err != nil {
		t.Fatalf("%s: %v (the data of earlier releases must stay in the tree)", upgradeDataDir, err)
	}
	if len(dirs) == 0 {
		t.Fatalf("%s is empty", upgradeDataDir)
	}
	jobBin := buildStreamjob(t)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		t.Run(d.Name(), func(t *testing.T) {
			src := filepath.Join(upgradeDataDir, d.Name())
			var exp upgradeExpect
			raw, err := os.ReadFile(filepath.Join(src, "expect.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &exp); err != nil {
				t.Fatal(err)
			}

			t.Run("datadir", func(t *testing.T) {
				dataDir := filepath.Join(t.TempDir(), "data")
				if err := extractTarGz(filepath.Join(src, "datadir.tar.gz"), dataDir); err != nil {
					t.Fatal(err)
				}
				p := singleNode(t, exp.NodeID, dataDir)
				checkReads(t, p, exp, exp.Reads)
				if info, err := datadir.Read(dataDir); err != nil || info.Format != datadir.Current || info.LastOpenedBy != readRecordedBuild(t).release() {
					t.Fatalf("format file after opening: %+v, %v", info, err)
				}
				// The job carries on from its checkpoint: resume restores
				// every task, checks what it restored, and checkpoints more.
				out := runStreamjob(t, jobBin, p.httpAddr, "--job", exp.Job, "resume", "--epochs", "2")
				if !strings.Contains(out, "restored") {
					t.Fatalf("resume printed no restore:\n%s", out)
				}
				fsckClean(t, p)
			})

			t.Run("rebuilt-from-snapshot", func(t *testing.T) {
				// Without its state machine file the member rebuilds it
				// from the release's snapshot and log.
				dataDir := filepath.Join(t.TempDir(), "data")
				if err := extractTarGz(filepath.Join(src, "datadir.tar.gz"), dataDir); err != nil {
					t.Fatal(err)
				}
				for _, name := range []string{"fsm.db", "fsm.db.state"} {
					if err := os.Remove(filepath.Join(dataDir, name)); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
				p := singleNode(t, exp.NodeID, dataDir)
				checkReads(t, p, exp, exp.Reads)
				fsckClean(t, p)
			})

			t.Run("backup", func(t *testing.T) {
				p := singleNode(t, "restored", filepath.Join(t.TempDir(), "data"))
				code, stdout, stderr := runCmd([]string{"snapshot", "restore", "--yes", "--addr", "http://" + p.httpAddr, filepath.Join(src, "backup.snap")}, nil)
				if code != 0 {
					t.Fatalf("snapshot restore: %d\n%s\n%s", code, stdout, stderr)
				}
				// The backup holds the state before the second job ran.
				reads := map[string]json.RawMessage{}
				for _, path := range []string{"/v1/jobs/demo", "/v1/jobs/demo/epochs"} {
					reads[path] = exp.Reads[path]
				}
				for _, task := range upgradeTasks {
					path := "/v1/jobs/demo/tasks/" + task + "/restore"
					reads[path] = exp.Reads[path]
				}
				checkReads(t, p, exp, reads)
			})
		})
	}
}

func fsckClean(t *testing.T, p *clProc) {
	t.Helper()
	var f struct {
		OK bool `json:"ok"`
	}
	if err := clGet(p.url("/v1/fsck"), &f); err != nil {
		t.Fatal(err)
	}
	if !f.OK {
		t.Fatalf("fsck not ok: %s", getRaw(t, p.url("/v1/fsck")))
	}
}

// checkReads compares each recorded answer with the member's: every field
// recorded must be there with the same value (fields added since are
// allowed). The recorded member's address is replaced by the running one's.
func checkReads(t *testing.T, p *clProc, exp upgradeExpect, reads map[string]json.RawMessage) {
	t.Helper()
	paths := make([]string, 0, len(reads))
	for path := range reads {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		want := decodeLoose(t, strings.ReplaceAll(string(reads[path]), exp.HTTPAddr, p.httpAddr))
		if strings.Contains(path, "/restore") {
			// Earlier releases listed a plan's segments by key; plans list
			// them in sequence order now (the same segments).
			inSequenceOrder(t, want)
		}
		got := decodeLoose(t, string(getRaw(t, p.url(path))))
		if diff := subsetDiff("", want, got); diff != "" {
			t.Errorf("GET %s differs from the release's answer: %s", path, diff)
		}
	}
}

// inSequenceOrder sorts the segments of a restore plan's state manifest
// (decoded by decodeLoose) as plans list them: by first_seq, last_seq, key
// and offset.
func inSequenceOrder(t *testing.T, plan any) {
	t.Helper()
	kinds, _ := plan.(map[string]any)["kinds"].(map[string]any)
	state, _ := kinds["state"].(map[string]any)
	m, _ := state["manifest"].(map[string]any)
	segs, _ := m["segments"].([]any)
	num := func(v any, field string) uint64 {
		n, err := strconv.ParseUint(string(v.(map[string]any)[field].(json.Number)), 10, 64)
		if err != nil {
			t.Fatalf("segment %v: %s: %v", v, field, err)
		}
		return n
	}
	slices.SortStableFunc(segs, func(a, b any) int {
		return cmp.Or(cmp.Compare(num(a, "first_seq"), num(b, "first_seq")), cmp.Compare(num(a, "last_seq"), num(b, "last_seq")),
			strings.Compare(a.(map[string]any)["key"].(string), b.(map[string]any)["key"].(string)),
			cmp.Compare(num(a, "offset"), num(b, "offset")))
	})
}

func decodeLoose(t *testing.T, s string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// subsetDiff reports the first place where want is not contained in got:
// objects may gain keys, arrays must have the same length.
func subsetDiff(at string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %T", at, got)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing", at, k)
			}
			if d := subsetDiff(at+"."+k, w[k], gv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %d elements, got %v", at, len(w), got)
		}
		for i := range w {
			if d := subsetDiff(fmt.Sprintf("%s[%d]", at, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("%s: want %v, got %v", at, want, got)
		}
		return ""
	}
}

// writeTarGz archives the regular files and directories under dir.
func writeTarGz(path, dir string) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.ModTime = time.Unix(0, 0)
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func extractTarGz(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("%s: entry %q leaves the directory", path, hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}
