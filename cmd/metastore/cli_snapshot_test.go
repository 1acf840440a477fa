package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/node"
)

// makeBackup returns a backup of payload: the header line, then payload.
func makeBackup(t *testing.T, payload []byte) []byte {
	t.Helper()
	sum := sha256.Sum256(payload)
	line, err := json.Marshal(node.BackupInfo{Format: node.BackupFormat, Version: node.BackupVersion, Index: 42, Term: 3,
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:]),
		SchemaVersion: fsm.SchemaVersion})
	if err != nil {
		t.Fatal(err)
	}
	return append(append(line, '\n'), payload...)
}

func writeBackupFile(t *testing.T, path string, payload []byte) []byte {
	t.Helper()
	b := makeBackup(t, payload)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, err
}

func TestSnapshotSave(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 KB: several reads
	backup := makeBackup(t, payload)
	header := backup[:bytes.IndexByte(backup, '\n')+1]
	corrupt := bytes.Clone(backup)
	corrupt[len(corrupt)-7] ^= 0xff

	serve := func(body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "GET" || r.URL.Path != "/v1/snapshot" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(body)
		}
	}
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string // in the error line
	}{
		{"truncated", serve(backup[:len(backup)-1000]), "is truncated: 159000 of 160000 bytes arrived"},
		{"connection cut", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "999999")
			w.Write(backup[:len(backup)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "reading the answer: unexpected EOF"},
		{"corrupt", serve(corrupt), "does not match its hash"},
		{"trailing data", serve(append(bytes.Clone(backup), "more"...)), "has data after the 160000 bytes its header announces"},
		{"not a backup", serve([]byte("<html>hello</html>\n")), "is not a backup: not a metastore backup"},
		{"no header line", serve(bytes.Repeat([]byte("x"), 100_000)), "is not a backup: no header line in its first 65536 bytes"},
		{"header only", serve(header), "is truncated: 0 of 160000 bytes arrived"},
		{"api error", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"code":"no_leader","message":"the cluster has no leader at the moment; retry","retryable":true}}`)
		}, "no_leader: the cluster has no leader at the moment; retry"},
	}
	for _, tc := range cases {
		for _, existing := range []bool{false, true} {
			name := tc.name
			if existing {
				name += " over an existing file"
			}
			t.Run(name, func(t *testing.T) {
				srv := httptest.NewServer(tc.handler)
				defer srv.Close()
				dir := t.TempDir()
				file := filepath.Join(dir, "metastore.backup")
				if existing {
					os.WriteFile(file, []byte("the previous backup"), 0o600)
				}
				code, out, errOut := runCmd([]string{"snapshot", "save", file, "--addr", srv.URL}, nil)
				if code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "metastore: ") {
					t.Fatalf("exit %d, stdout %q, stderr %q; want one error line and exit 1", code, out, errOut)
				}
				if !strings.Contains(errOut, tc.want) {
					t.Errorf("stderr %q does not say %q", errOut, tc.want)
				}
				names, _ := readDirNames(dir)
				if existing {
					if got, _ := os.ReadFile(file); string(got) != "the previous backup" || len(names) != 1 {
						t.Errorf("after a failed save: files %q, %s holds %q", names, file, got)
					}
				} else if len(names) != 0 {
					t.Errorf("a failed save left %q", names)
				}
			})
		}
	}

	t.Run("ok", func(t *testing.T) {
		srv := httptest.NewServer(serve(backup))
		defer srv.Close()
		dir := t.TempDir()
		file := filepath.Join(dir, "metastore.backup")
		os.WriteFile(file, []byte("the previous backup"), 0o644)
		code, out, errOut := runCmd([]string{"snapshot", "save", file, "--addr", srv.URL}, nil)
		if code != exitOK || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		sum := sha256.Sum256(payload)
		expectLines(t, out, "saved "+file, "index 42 (term 3)", "created 2025-01-02T03:04:05Z",
			"size 160000 bytes (156.2 KiB), after a "+strconv.Itoa(len(header))+"-byte header", "sha256 "+hex.EncodeToString(sum[:]))
		got, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(got, backup) {
			t.Fatalf("saved file differs from the backup (%d bytes, want %d): %v", len(got), len(backup), err)
		}
		if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
			t.Errorf("mode %o, want 600: a backup holds the whole state", st.Mode().Perm())
		}
		if names, _ := readDirNames(dir); len(names) != 1 {
			t.Errorf("files after save: %q", names)
		}
		// --json prints the header with the file name.
		code, out, _ = runCmd([]string{"snapshot", "save", file, "--json", "--addr", srv.URL}, nil)
		var answer struct {
			File  string          `json:"file"`
			Saved node.BackupInfo `json:"saved"`
		}
		if code != exitOK || json.Unmarshal([]byte(out), &answer) != nil || answer.File != file || answer.Saved.Size != int64(len(payload)) {
			t.Errorf("--json: exit %d, %s", code, out)
		}
	})
}

// restoreNode is a fake node that records the backups PUT to it.
type restoreNode struct {
	mu     sync.Mutex
	bodies [][]byte
	status int
	answer string
}

func (n *restoreNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n.mu.Lock()
	n.bodies = append(n.bodies, body)
	status, answer := n.status, n.answer
	n.mu.Unlock()
	if r.Method != "PUT" || r.URL.Path != "/v1/snapshot" || r.ContentLength != int64(len(body)) {
		status, answer = 400, `{"error":{"code":"invalid_argument","message":"unexpected request"}}`
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, answer)
}

func (n *restoreNode) received() [][]byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bodies
}

// setConfirm makes the restore confirmation read input, from a terminal
// or not.
func setConfirm(t *testing.T, input string, tty bool) {
	t.Helper()
	saved := confirmInput
	confirmInput = func() (io.Reader, bool) { return strings.NewReader(input), tty }
	t.Cleanup(func() { confirmInput = saved })
}

func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	payload := bytes.Repeat([]byte("state "), 20000)
	good := filepath.Join(dir, "good.backup")
	backup := writeBackupFile(t, good, payload)
	bad := map[string][]byte{
		"truncated": backup[:len(backup)-10],
		"corrupt":   append(bytes.Clone(backup[:len(backup)-1]), backup[len(backup)-1]^1),
		"trailing":  append(bytes.Clone(backup), '\n'),
		"not":       []byte("PK\x03\x04 a zip file\n"),
		"empty":     nil,
		"headless":  bytes.Repeat([]byte("y"), 70_000),
	}
	for name, b := range bad {
		os.WriteFile(filepath.Join(dir, name+".backup"), b, 0o600)
	}
	rn := &restoreNode{status: 200, answer: `{"restored":` + string(backup[:bytes.IndexByte(backup, '\n')]) + `}`}
	srv := httptest.NewServer(rn)
	defer srv.Close()

	// Corrupt files are refused before anything is sent.
	setConfirm(t, "", false)
	for name, want := range map[string]string{
		"truncated":   "truncated: 119990 bytes follow the header, which announces 120000",
		"corrupt":     "corrupt: its content does not match the sha256 of its header",
		"trailing":    "longer than its header says: 120001 bytes follow the header, which announces 120000",
		"not":         "not a metastore backup",
		"empty":       "it is empty",
		"headless":    "no header line in its first 65536 bytes",
		"missing":     "no such file or directory",
		"a directory": "not a regular file",
	} {
		file := filepath.Join(dir, name+".backup")
		if name == "a directory" {
			file = dir
		}
		code, out, errOut := runCmd([]string{"snapshot", "restore", file, "--yes", "--addr", srv.URL}, nil)
		if code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) || !strings.HasSuffix(errOut, "; nothing was sent\n") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line saying %q", name, code, out, errOut, want)
		}
	}
	if n := len(rn.received()); n != 0 {
		t.Fatalf("%d requests sent for corrupt files", n)
	}

	// Without --yes and without a terminal to ask: a usage error.
	code, out, errOut := runCmd([]string{"snapshot", "restore", good, "--addr", srv.URL}, nil)
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "pass --yes") {
		t.Errorf("no terminal: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// At a terminal, anything but yes keeps the state.
	setConfirm(t, "y\n", true)
	code, _, errOut = runCmd([]string{"snapshot", "restore", good, "--addr", srv.URL}, nil)
	if code != exitFailure || !strings.Contains(errOut, "Type yes to continue: ") || !strings.HasSuffix(errOut, "metastore: snapshot restore: not confirmed; nothing was sent\n") {
		t.Errorf("not confirmed: exit %d, stderr %q", code, errOut)
	}
	if n := len(rn.received()); n != 0 {
		t.Fatalf("%d requests sent without confirmation", n)
	}

	// Confirmed: the file is sent as it is.
	setConfirm(t, "yes\n", true)
	code, out, errOut = runCmd([]string{"snapshot", "restore", good, "--addr", srv.URL}, nil)
	if code != exitOK || !strings.Contains(errOut, "replaces the whole state of the cluster at "+srv.URL) {
		t.Fatalf("confirmed: exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "restored "+good+" onto the cluster at "+srv.URL+": index 42 (term 3)") {
		t.Errorf("stdout %q", out)
	}
	setConfirm(t, "", false)
	if code, _, errOut := runCmd([]string{"snapshot", "restore", good, "--yes", "--addr", srv.URL}, nil); code != exitOK {
		t.Fatalf("--yes: exit %d, %q", code, errOut)
	}
	got := rn.received()
	if len(got) != 2 || !bytes.Equal(got[0], backup) || !bytes.Equal(got[1], backup) {
		t.Fatalf("the node received %d bodies, want the backup twice", len(got))
	}

	// The server's refusal is reported as the API's error.
	rn.mu.Lock()
	rn.status, rn.answer = 400, `{"error":{"code":"bad_backup","message":"node: bad backup: backup format 1, schema 9; this build reads up to 1, 1"}}`
	rn.mu.Unlock()
	code, _, errOut = runCmd([]string{"snapshot", "restore", good, "--yes", "--addr", srv.URL}, nil)
	if code != exitFailure || errOut != "metastore: bad_backup: node: bad backup: backup format 1, schema 9; this build reads up to 1, 1\n" {
		t.Errorf("refused: exit %d, stderr %q", code, errOut)
	}
}

func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(null) || isTerminal(f) {
		t.Error("the null device or a regular file counts as a terminal")
	}
}
