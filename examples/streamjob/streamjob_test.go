package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/freeport"
)

// These tests build the metastore binary and this example, start real
// `metastore serve` processes on free loopback ports, and run the example
// against them as a user would.

// binaries builds ./cmd/metastore and the example into a temporary
// directory.
func binaries(t *testing.T) (metastore, streamjob string) {
	t.Helper()
	dir := t.TempDir()
	metastore, streamjob = filepath.Join(dir, "metastore"), filepath.Join(dir, "streamjob")
	for bin, pkg := range map[string]string{metastore: "github.com/metastore/metastore/cmd/metastore", streamjob: "github.com/metastore/metastore/examples/streamjob"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return metastore, streamjob
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a process the test started.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	exited chan struct{}
}

// cleanEnv is the environment without METASTORE_* variables.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "METASTORE_") {
			out = append(out, kv)
		}
	}
	return out
}

func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s stdout:\n%s\n--- %s stderr (last 4 KiB):\n%s", name, p.stdout, name, tail(p.stderr.String(), 4096))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to die.
func (p *proc) kill() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// wait waits for the process to exit and returns its status.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// runJob runs the example to its end and returns its output; it must exit
// with status 0.
func runJob(t *testing.T, bin string, args ...string) string {
	t.Helper()
	p := start(t, "streamjob "+strings.Join(args, " "), bin, args...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("streamjob %q exited with %d\nstdout:\n%s\nstderr:\n%s", args, code, p.stdout, p.stderr)
	}
	return p.stdout.String()
}

// freeAddr returns a loopback address for a process to bind: free now,
// outside the kernel's ephemeral range and never given twice
// (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// poll calls cond every 10ms until it returns nil or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		<-tick.C
	}
}

var httpc = &http.Client{Timeout: 5 * time.Second}

func getJSON(url string, out any) error { return getJSONWith(httpc, url, out) }

func getJSONWith(hc *http.Client, url string, out any) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// raftFlags make elections fast enough for a test.
var raftFlags = []string{"--heartbeat-timeout", "300ms", "--election-timeout", "300ms", "--leader-lease-timeout", "150ms", "--log-level", "warn"}

type member struct {
	*proc
	id, httpAddr string
	// scheme is "https" for a member serving TLS ("" means http).
	scheme string
}

func (m *member) url(path string) string {
	scheme := m.scheme
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + m.httpAddr + path
}

// serve starts n `metastore serve` processes (n > 1: one cluster sharing a
// blob directory) and waits until every one is ready.
func serve(t *testing.T, bin string, n int, extra ...string) []*member {
	t.Helper()
	return serveWith(t, bin, n, nil, httpc, extra...)
}

// serveWith is serve with flags of each member's own (perMember, may be nil)
// and the HTTP client that checks readiness (https members need one that
// trusts their CA).
func serveWith(t *testing.T, bin string, n int, perMember func(m *member) []string, hc *http.Client, extra ...string) []*member {
	t.Helper()
	dir := t.TempDir()
	var ms []*member
	var peers []string
	raft := map[string]string{}
	for i := 1; i <= n; i++ {
		m := &member{id: fmt.Sprintf("n%d", i), httpAddr: freeAddr(t)}
		raft[m.id] = freeAddr(t)
		peers = append(peers, m.id+"="+raft[m.id])
		ms = append(ms, m)
	}
	for _, m := range ms {
		args := []string{"serve", "--node-id", m.id, "--data-dir", filepath.Join(dir, m.id),
			"--http-addr", m.httpAddr, "--raft-addr", raft[m.id]}
		if n > 1 {
			// One blob store for the cluster: with per-member local
			// directories, a new leader could not read the blobs the old
			// one stored.
			args = append(args, "--initial-cluster", strings.Join(peers, ","), "--blob-store", "file://"+filepath.Join(dir, "blobs"))
		}
		args = append(append(args, raftFlags...), extra...)
		if perMember != nil {
			args = append(args, perMember(m)...)
		}
		m.proc = start(t, "metastore "+m.id, bin, args...)
	}
	for _, m := range ms {
		poll(t, 30*time.Second, m.id+" ready", func() error {
			if !m.running() {
				return errors.New("exited")
			}
			var st struct{}
			return getJSONWith(hc, m.url("/readyz"), &st)
		})
	}
	return ms
}

func addrs(ms []*member) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.url(""))
	}
	return strings.Join(out, ",")
}

// checkRestore checks resume's report of a restore from epoch r with the
// changed topology.
func checkRestore(t *testing.T, out string, r uint64) {
	t.Helper()
	want := []string{
		fmt.Sprintf(`restoring from the latest completed checkpoint: epoch %d \(`, r),
		fmt.Sprintf(`(?m)^\s+source-0\s+input\s+restored partition-0:offset=%d \(inline\), as checkpointed$`, r*1000),
		fmt.Sprintf(`(?m)^\s+source-1\s+input\s+restored partition-1:offset=%d \(inline\), as checkpointed$`, r*1000+7),
		`(?m)^\s+source-0\s+state\s+nothing to recover$`,
		`(?m)^\s+map-0\s+-\s+nothing to recover \(no capabilities\)$`,
		fmt.Sprintf(`(?m)^\s+agg-0\s+state\s+restored \d+ base\(s\) \+ \d+ segment\(s\), \d+ bytes in \d+ object-store GETs: %s through seq \d+, matches the aggregate checkpointed at epoch %d$`,
			regexp.QuoteMeta(aggregateAt("agg-0", r).String()), r),
		`(?m)^\s+agg-2\s+-\s+no prior state \(new task\)$`,
		fmt.Sprintf(`(?m)^\s+sink-0\s+output\s+restored txn-%d \(inline\), as checkpointed$`, r),
		`tasks without state \(source-0, source-1, map-0, agg-2, sink-0\) made 0 object-store requests`,
		`verified: every restored task holds what it checkpointed`,
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("resume output does not match %s", re)
		}
	}
	if strings.Contains(out, "MISMATCH") || strings.Contains(out, "agg-1") && !strings.Contains(out, "removed agg-1") {
		t.Errorf("resume output:\n%s", out)
	}
	if t.Failed() {
		t.Fatalf("resume output:\n%s", out)
	}
}

func TestRunResumeSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs metastore processes")
	}
	msBin, jobBin := binaries(t)
	ms := serve(t, msBin, 1)
	out := runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "run", "--epochs", "12")
	for _, s := range []string{"job demo: created", "epoch 10 completed", "epoch 12 completed", "crash: epoch 13 begun"} {
		if !strings.Contains(out, s) {
			t.Fatalf("run output lacks %q:\n%s", s, out)
		}
	}
	out = runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "resume", "--topology", "changed", "--epochs", "5")
	checkRestore(t, out, 12)
	if !strings.Contains(out, "topology changed: removed agg-1, added agg-2") || !strings.Contains(out, "epoch 18 completed") {
		t.Fatalf("resume output:\n%s", out)
	}
	t.Logf("resume output:\n%s", out)
}

func TestRunResumeLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a cluster of metastore processes")
	}
	msBin, jobBin := binaries(t)
	ms := serve(t, msBin, 3)
	run := start(t, "streamjob run", jobBin, "--addr", addrs(ms), "--job", "demo", "run", "--epochs", "20", "--interval", "50ms")

	// Once the job completed epoch 5, kill -9 the leader.
	var completed uint64
	poll(t, time.Minute, "the job to reach epoch 5", func() error {
		if !run.running() {
			return errors.New("the run exited")
		}
		var j struct {
			LatestCompleted uint64 `json:"latest_completed"`
		}
		if err := getJSON(ms[0].url("/v1/jobs/demo"), &j); err != nil {
			return err
		}
		if completed = j.LatestCompleted; completed < 5 {
			return fmt.Errorf("latest completed epoch %d", completed)
		}
		return nil
	})
	var leader *member
	poll(t, 10*time.Second, "the leader", func() error {
		for _, m := range ms {
			var st struct {
				State string `json:"state"`
			}
			if err := getJSON(m.url("/v1/status"), &st); err != nil {
				return err
			}
			if st.State == "leader" {
				leader = m
				return nil
			}
		}
		return errors.New("no member is leader")
	})
	leader.kill()
	t.Logf("killed the leader %s after epoch %d completed", leader.id, completed)
	if completed >= 20 {
		t.Fatal("the run finished before the leader was killed")
	}

	if code := run.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run exited with %d", code)
	}
	out := run.stdout.String()
	if !strings.Contains(out, "epoch 20 completed") || !strings.Contains(out, "crash: epoch 21 begun") {
		t.Fatalf("run output:\n%s", out)
	}
	t.Logf("run: %s", lastLine(out))

	out = runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "resume", "--topology", "changed", "--epochs", "5")
	checkRestore(t, out, 20)
	if !strings.Contains(out, "epoch 26 completed") {
		t.Fatalf("resume output:\n%s", out)
	}
	t.Logf("resume: %s", lastLine(out))
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// TestReplay checks the state encoding: a base and changelogs replay to
// the aggregate they were written from.
func TestReplay(t *testing.T) {
	a5, a7, a9 := aggregateAt("agg-0", 5), aggregateAt("agg-0", 7), aggregateAt("agg-0", 9)
	var b bytes.Buffer
	b.Write(baseSnapshot(a5, 20))
	b.Write(changelog(a5, a7, 21))
	b.Write(changelog(a7, a9, 25))
	got, seq, err := replay(&b)
	if err != nil || !got.equal(a9) || seq != 28 {
		t.Fatalf("replay: %v through %d, %v; want %v through 28", got, seq, err, a9)
	}
	if _, _, err := replay(strings.NewReader("seq=3 key=k0 add=1\nseq=2 key=k0 add=1\n")); err == nil {
		t.Fatal("replay accepted sequence numbers out of order")
	}
}
