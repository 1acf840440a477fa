package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file run a cluster of real metastore processes, built
// from the tree by TestMain, on loopback.

// clProc is one metastore process.
type clProc struct {
	id       string
	httpAddr string
	raftAddr string
	dataDir  string
	args     []string
	env      []string
	workDir  string // the working directory; "" for the test's

	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
	err    error
	starts int // how many times start was called, for the kept log files
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

// clRaftFlags make elections and snapshots fast enough for a test, and
// trailing logs short so a lagging or new member must be sent a snapshot.
var clRaftFlags = []string{
	"--heartbeat-timeout", "300ms", "--election-timeout", "300ms", "--leader-lease-timeout", "150ms",
	"--commit-timeout", "5ms", "--snapshot-interval", "200ms", "--snapshot-threshold", "32", "--trailing-logs", "16",
	"--log-level", "info",
}

// keepLogsEnv names a directory; when it is set, the whole stderr of every
// process a cluster test starts is also written there, one file a start
// (<dir>/<test>/<id>.<n>.log), so that the logs of a failed run, even one
// ended by go test's -timeout, can be read afterwards. The test buffers
// keep only the current start's log and print its last 4 KiB.
const keepLogsEnv = "METASTORE_TEST_KEEP_LOGS"

func (p *clProc) start(t *testing.T) {
	t.Helper()
	p.stderr = &lockedBuffer{}
	p.exited = make(chan struct{})
	p.cmd = exec.Command(binary, p.args...)
	p.cmd.Dir = p.workDir
	p.cmd.Env = cleanEnv(p.env...)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.stderr
	var logFile *os.File
	if dir := os.Getenv(keepLogsEnv); dir != "" {
		dir = filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s.%d.log", p.id, p.starts)))
		if err != nil {
			t.Fatal(err)
		}
		logFile = f
		p.cmd.Stderr = io.MultiWriter(p.stderr, f)
	}
	p.starts++
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.id, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.exited)
	}()
}

func (p *clProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return p.cmd != nil
	}
}

// kill sends SIGKILL and waits for the process to die.
func (p *clProc) kill(t *testing.T) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// terminate sends SIGTERM and returns the exit code.
func (p *clProc) terminate(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM; stderr:\n%s", p.id, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *clProc) url(path string) string { return "http://" + p.httpAddr + path }

type clCluster struct {
	t     *testing.T
	procs []*clProc
}

func startCluster(t *testing.T, n int) *clCluster {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith starts n members with the environment env and extra
// serve flags.
func startClusterWith(t *testing.T, n int, env []string, extra ...string) *clCluster {
	t.Helper()
	c := &clCluster{t: t}
	var peers []string
	for i := 1; i <= n; i++ {
		p := &clProc{id: fmt.Sprintf("n%d", i), httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i))}
		peers = append(peers, p.id+"="+p.raftAddr)
		c.procs = append(c.procs, p)
	}
	for _, p := range c.procs {
		p.args = append([]string{"serve", "--node-id", p.id, "--data-dir", p.dataDir, "--http-addr", p.httpAddr,
			"--raft-addr", p.raftAddr, "--initial-cluster", strings.Join(peers, ",")}, clRaftFlags...)
		p.args = append(p.args, extra...)
		p.env = env
		p.start(t)
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			p.kill(t)
		}
		if t.Failed() {
			for _, p := range c.procs {
				if p.stderr != nil {
					t.Logf("--- %s stderr (last 4 KiB):\n%s", p.id, tail(p.stderr.String(), 4096))
				}
			}
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

type clStatus struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Members      []struct {
		ID       string `json:"id"`
		HTTPAddr string `json:"http_addr"`
		Suffrage string `json:"suffrage"`
	} `json:"members"`
}

var clHTTP = &http.Client{Timeout: 15 * time.Second}

// clDo sends a JSON request and returns the status and body; a transport
// error is status 0.
func clDo(method, url string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	resp, err := clHTTP.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func clGet(url string, out any) error {
	status, body := clDo("GET", url, nil)
	if status != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, status, body)
	}
	return json.Unmarshal(body, out)
}

// leader waits until every running member agrees on one leader that has
// member records for all, and returns it.
func (c *clCluster) leader(timeout time.Duration) *clProc {
	c.t.Helper()
	var leader *clProc
	waitFor(c.t, timeout, func() error {
		leader = nil
		ids := map[string]bool{}
		for _, p := range c.procs {
			if !p.running() {
				continue
			}
			var st clStatus
			if err := clGet(p.url("/v1/status"), &st); err != nil {
				return err
			}
			if st.LeaderID == "" {
				return fmt.Errorf("%s knows no leader", p.id)
			}
			ids[st.LeaderID] = true
			if st.State == "leader" {
				leader = p
			}
		}
		if len(ids) != 1 || leader == nil {
			return fmt.Errorf("members disagree on the leader: %v", ids)
		}
		return nil
	})
	return leader
}

func (c *clCluster) proc(id string) *clProc {
	for _, p := range c.procs {
		if p.id == id {
			return p
		}
	}
	c.t.Fatalf("no member %s", id)
	return nil
}

// retryable reports whether a request answered so may be repeated: the
// store says so (503 with retryable), or the member could not be reached.
func retryable(status int, body []byte) bool {
	if status == 0 || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
		return true
	}
	var e struct {
		Error struct {
			Retryable bool `json:"retryable"`
		} `json:"error"`
	}
	return status == http.StatusServiceUnavailable && json.Unmarshal(body, &e) == nil && e.Error.Retryable
}

// send repeats a mutation against random running members until it
// succeeds; every mutation is idempotent by content, so repeating one whose
// outcome is unknown is safe.
func (c *clCluster) send(method, path string, body any) []byte {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	backoff := 10 * time.Millisecond
	for {
		var live []*clProc
		for _, p := range c.procs {
			if p.running() {
				live = append(live, p)
			}
		}
		p := live[rand.IntN(len(live))]
		status, resp := clDo(method, p.url(path), body)
		if status == http.StatusOK {
			return resp
		}
		if !retryable(status, resp) || time.Now().After(deadline) {
			c.t.Fatalf("%s %s via %s: %d %s", method, path, p.id, status, resp)
		}
		time.Sleep(backoff) // back off before retrying, not to synchronise
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

type clAck struct {
	epoch uint64
	task  string
	hash  string
}

// TestClusterLeaderKillAndMembership is the replication acceptance test:
// three processes; kill -9 of the leader while acks stream in loses no
// acknowledged ack; the killed member restarts from its data directory and
// catches up; a new member joins and is sent the state by snapshot; a
// member is removed; SIGTERM of the leader hands leadership over.
func TestClusterLeaderKillAndMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
	}
	c := startCluster(t, 3)
	first := c.leader(30 * time.Second)

	tasks := []string{"t0", "t1", "t2", "t3"}
	c.send("PUT", "/v1/jobs/stream", map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "5m"}})
	var specs []map[string]any
	for _, tk := range tasks {
		specs = append(specs, map[string]any{"id": tk, "capabilities": []string{"state"}})
	}
	c.send("POST", "/v1/jobs/stream/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})

	// Stream epochs of concurrent acks; kill the leader in the middle.
	var mu sync.Mutex
	var acked []clAck
	const epochs = 12
	for epoch := uint64(1); epoch <= epochs; epoch++ {
		if epoch == 5 {
			t.Logf("killing leader %s at epoch %d", first.id, epoch)
			first.kill(t)
		}
		c.send("POST", "/v1/jobs/stream/epochs", map[string]any{"generation": 1, "epoch": epoch})
		var wg sync.WaitGroup
		for _, tk := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				payload := []byte(fmt.Sprintf("epoch %d task %s", epoch, tk))
				body := c.send("PUT", fmt.Sprintf("/v1/jobs/stream/epochs/%d/acks/%s", epoch, tk),
					map[string]any{"generation": 1, "payloads": map[string][]byte{"state": payload}})
				var res struct {
					Ack struct {
						ContentHash string `json:"content_hash"`
					} `json:"ack"`
				}
				if err := json.Unmarshal(body, &res); err != nil || res.Ack.ContentHash == "" {
					t.Errorf("ack answer %s: %v", body, err)
					return
				}
				mu.Lock()
				acked = append(acked, clAck{epoch, tk, res.Ack.ContentHash})
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	second := c.leader(30 * time.Second)
	if second == first {
		t.Fatal("the killed member is still leader")
	}

	// Every acknowledged ack is present, read linearizably from the new leader.
	if len(acked) != epochs*len(tasks) {
		t.Fatalf("%d acks answered, want %d", len(acked), epochs*len(tasks))
	}
	details := map[uint64]map[string]string{}
	for epoch := uint64(1); epoch <= epochs; epoch++ {
		var e struct {
			State string `json:"state"`
			Acks  []struct {
				Task        string `json:"task"`
				ContentHash string `json:"content_hash"`
			} `json:"acks"`
		}
		if err := clGet(second.url(fmt.Sprintf("/v1/jobs/stream/epochs/%d?consistency=linearizable", epoch)), &e); err != nil {
			t.Fatal(err)
		}
		if e.State != "completed" && e.State != "subsumed" {
			t.Fatalf("epoch %d is %s", epoch, e.State)
		}
		details[epoch] = map[string]string{}
		for _, a := range e.Acks {
			details[epoch][a.Task] = a.ContentHash
		}
	}
	for _, a := range acked {
		if got := details[a.epoch][a.task]; got != a.hash {
			t.Fatalf("acknowledged ack epoch %d task %s: stored hash %q, acknowledged %q", a.epoch, a.task, got, a.hash)
		}
	}
	var plan struct {
		Source struct {
			Epoch uint64 `json:"epoch"`
		} `json:"source"`
		Kinds map[string]struct {
			Payload []byte `json:"payload"`
		} `json:"kinds"`
	}
	if err := clGet(second.url("/v1/jobs/stream/tasks/t2/restore?consistency=linearizable"), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Source.Epoch != epochs || string(plan.Kinds["state"].Payload) != fmt.Sprintf("epoch %d task t2", epochs) {
		t.Fatalf("restore after failover: %+v", plan)
	}

	// The killed member restarts from its data directory and converges.
	first.start(t)
	c.converged(60 * time.Second)

	// Stale reads are answered by each member from its own state (the
	// states converged above), default reads by the leader via forwarding.
	for _, p := range c.procs {
		for _, consistency := range []string{"stale", "default"} {
			status, body := clDo("GET", p.url("/v1/jobs/stream?consistency="+consistency), nil)
			var j struct {
				LatestCompleted uint64 `json:"latest_completed"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &j) != nil || j.LatestCompleted != epochs {
				t.Fatalf("%s read from %s: %d %s", consistency, p.id, status, body)
			}
		}
	}

	// A new member joins the running cluster; the leader has compacted its
	// log, so the state arrives by snapshot.
	leader := c.leader(30 * time.Second)
	// The leader must have compacted its log past the entries a new member
	// needs (trailing logs 16), so that member can only catch up by snapshot.
	waitFor(t, 30*time.Second, func() error {
		var st struct {
			LastSnapshotIndex uint64 `json:"last_snapshot_index"`
		}
		if err := clGet(leader.url("/v1/status"), &st); err != nil {
			return err
		}
		if st.LastSnapshotIndex <= 16 {
			return fmt.Errorf("leader's last snapshot is at index %d", st.LastSnapshotIndex)
		}
		return nil
	})
	n4 := &clProc{id: "n4", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(t.TempDir(), "n4")}
	n4.args = append([]string{"serve", "--node-id", "n4", "--data-dir", n4.dataDir, "--http-addr", n4.httpAddr,
		"--raft-addr", n4.raftAddr, "--join", leader.httpAddr}, clRaftFlags...)
	n4.start(t)
	c.procs = append(c.procs, n4)
	c.converged(60 * time.Second)
	if !strings.Contains(strings.ToLower(n4.stderr.String()), "installed remote snapshot") {
		t.Fatalf("n4 did not receive a snapshot; stderr:\n%s", tail(n4.stderr.String(), 4096))
	}
	var st clStatus
	if err := clGet(n4.url("/v1/status"), &st); err != nil || len(st.Members) != 4 {
		t.Fatalf("n4 status: %+v %v", st, err)
	}

	// Remove it again with the operator command (again if an election on
	// a loaded machine outlasts the client's retries: the command answers
	// no_leader and changed nothing).
	waitFor(t, 30*time.Second, func() error {
		code, out, errOut := runBinary(t, t.TempDir(), nil, "members", "remove", "n4", "--addr", "http://"+leader.httpAddr)
		switch {
		case code == 0:
			return nil
		case strings.Contains(errOut, "no_leader"):
			return fmt.Errorf("members remove: %s", errOut)
		}
		t.Fatalf("members remove: exit %d: %s %s", code, out, errOut)
		return nil
	})
	waitFor(t, 30*time.Second, func() error {
		var st clStatus
		if err := clGet(leader.url("/v1/status"), &st); err != nil {
			return err
		}
		if len(st.Members) != 3 {
			return fmt.Errorf("%d members", len(st.Members))
		}
		return nil
	})
	n4.kill(t)
	c.procs = c.procs[:3]

	// SIGTERM of the leader: clean exit, leadership handed over.
	leader = c.leader(30 * time.Second)
	if code := leader.terminate(t); code != 0 {
		t.Fatalf("leader exited with %d after SIGTERM; stderr:\n%s", code, tail(leader.stderr.String(), 4096))
	}
	next := c.leader(30 * time.Second)
	if next == leader {
		t.Fatal("no new leader after SIGTERM")
	}
	c.send("POST", "/v1/jobs/stream/epochs", map[string]any{"generation": 1, "epoch": epochs + 1})
}

// converged waits until every running member reports the same state hash
// at the same applied index.
func (c *clCluster) converged(timeout time.Duration) {
	c.t.Helper()
	waitFor(c.t, timeout, func() error {
		var want string
		var wantIdx uint64
		for _, p := range c.procs {
			if !p.running() {
				continue
			}
			var h struct {
				Index uint64 `json:"index"`
				Hash  string `json:"hash"`
			}
			if err := clGet(p.url("/v1/state/hash"), &h); err != nil {
				return err
			}
			if want == "" {
				want, wantIdx = h.Hash, h.Index
				continue
			}
			if h.Index != wantIdx || h.Hash != want {
				return fmt.Errorf("%s at index %d hash %.12s; first member at %d hash %.12s", p.id, h.Index, h.Hash, wantIdx, want)
			}
		}
		return nil
	})
}
