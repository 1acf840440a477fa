package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/freeport"
)

// binary is the metastore command built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metastore-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "metastore")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building metastore: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is the test process environment without METASTORE_* variables,
// plus extra.
func cleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// runBinary runs the built command in dir and returns its exit status and
// output.
func runBinary(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	default:
		t.Fatalf("running metastore %q: %v", args, err)
		return 0, "", ""
	}
}

func TestBinaryConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"bad node id", nil, []string{"serve", "--node-id", "bad id!"},
			[]string{"metastore: invalid --node-id: "}},
		{"bad duration from env", []string{"METASTORE_ELECTION_TIMEOUT=soon"}, []string{"serve"},
			[]string{"metastore: invalid --election-timeout: ", "METASTORE_ELECTION_TIMEOUT"}},
		{"bad node id from env", []string{"METASTORE_NODE_ID=bad id!"}, []string{"serve"},
			[]string{"metastore: invalid --node-id: ", "METASTORE_NODE_ID"}},
		{"bad initial cluster", nil, []string{"serve", "--initial-cluster", "node1"},
			[]string{"metastore: invalid --initial-cluster: "}},
		{"unknown flag", nil, []string{"serve", "--bogus"},
			[]string{"metastore: serve: ", "bogus"}},
		{"unknown command", nil, []string{"frobnicate"},
			[]string{`metastore: unknown command "frobnicate"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out, errOut := runBinary(t, dir, tc.env, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") {
				t.Errorf("stderr = %q, want exactly one line", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not contain %q", errOut, w)
				}
			}
			// A rejected configuration touches nothing.
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("working directory has %d entries after a rejected start", len(entries))
			}
		})
	}
}

func TestBinaryUsage(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runBinary(t, dir, nil); code != exitUsage || !strings.Contains(errOut, "Usage: metastore") {
		t.Errorf("no arguments: exit %d, stderr %q; want %d and the usage", code, errOut, exitUsage)
	}
	if code, out, _ := runBinary(t, dir, nil, "help"); code != exitOK || !strings.Contains(out, "serve") {
		t.Errorf("help: exit %d, stdout %q", code, out)
	}
	if code, out, _ := runBinary(t, dir, nil, "serve", "-h"); code != exitOK || !strings.Contains(out, "--initial-cluster") {
		t.Errorf("serve -h: exit %d, stdout %q", code, out)
	}
	if code, out, _ := runBinary(t, dir, nil, "version"); code != exitOK || !strings.HasPrefix(out, "metastore ") {
		t.Errorf("version: exit %d, stdout %q", code, out)
	}
}

// TestBinaryServeSingleNode starts the embedded single-node store, checks
// that it answers, and stops it with SIGTERM.
func TestBinaryServeSingleNode(t *testing.T) {
	dir := t.TempDir()
	raftAddr := freeAddr(t)
	cmd := exec.Command(binary, "serve",
		"--http-addr", "127.0.0.1:0",
		"--raft-addr", raftAddr,
		"--log-format", "json",
		"--shutdown-timeout", "5s")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader goroutine owns the stderr pipe; exited is closed once the
	// process has been waited for, and waitErr is valid after that.
	var (
		logs    syncBuffer
		waitErr error
	)
	exited := make(chan struct{})
	serving := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteLine(sc.Bytes())
			var rec struct {
				Msg      string `json:"msg"`
				HTTPAddr string `json:"http_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "metastore serving" {
				serving <- rec.HTTPAddr
			}
		}
		waitErr = cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})

	var httpAddr string
	select {
	case httpAddr = <-serving:
	case <-exited:
		t.Fatalf("serve exited before serving: %v\n%s", waitErr, &logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("no \"metastore serving\" log line within 30s\n%s", &logs)
	}

	// Ready within seconds: /v1/status answers 200.
	waitFor(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + httpAddr + "/v1/status")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})

	// The client commands reach it.
	if code, out, errOut := runBinary(t, dir, nil, "members", "list", "--addr", httpAddr); code != exitOK || !strings.Contains(out, "node1") {
		t.Errorf("members list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The status names the build: the revision the go command recorded.
	var st struct {
		Build struct {
			Version   string `json:"version"`
			Revision  string `json:"revision"`
			GoVersion string `json:"go_version"`
		} `json:"build"`
	}
	if err := clGet("http://"+httpAddr+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.Build.Version == "" || !strings.HasPrefix(st.Build.GoVersion, "go") {
		t.Errorf("status build %+v: no version or Go version", st.Build)
	}
	if rb := readRecordedBuild(t); st.Build.Version != rb.release() || st.Build.Revision != rb.revision {
		t.Errorf("status build %+v, want version %q and revision %q as recorded by the go command", st.Build, rb.release(), rb.revision)
	}
	if code, out, errOut := runBinary(t, dir, nil, "status", "--addr", httpAddr); code != exitOK ||
		!strings.Contains(strings.Join(fields(out), "\n"), "\nversion "+st.Build.Version+" (") || (st.Build.Revision != "" && !strings.Contains(out, "revision "+st.Build.Revision)) {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want the build %+v", code, out, errOut, st.Build)
	}

	info, err := os.Stat(filepath.Join(dir, "metastore-data"))
	if err != nil {
		t.Fatalf("data directory: %v", err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode = %o, want 700", perm)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("serve after SIGTERM: %v, want exit 0\n%s", waitErr, &logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not exit within 20s of SIGTERM\n%s", &logs)
	}
	if !strings.Contains(logs.String(), "shutdown complete") {
		t.Errorf("no \"shutdown complete\" log line\n%s", &logs)
	}
}

// syncBuffer collects log lines written by one goroutine and read by another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) WriteLine(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.buf.WriteByte('\n')
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address for a member process to bind: its
// port is free now, outside the kernel's ephemeral range, and never given
// twice, so that nothing but an explicit bind takes it before the process
// does, or between a kill and a restart on the same address
// (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// waitFor polls cond until it returns nil or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		<-tick.C
	}
}
