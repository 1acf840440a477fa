package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/clock"
	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/lossyfs"
	"github.com/metastore/metastore/jepsen/tcpproxy"
)

// Fixed ports of every member, on the member's own address in its
// namespace.
const (
	HTTPPort  = 7070
	RaftPort  = 7071
	FaultPort = 7079
)

// Member is one slot of the cluster: a network namespace with an address,
// a data directory, a log file, a Raft proxy, and (while started) a
// metastore process. Its fields are fixed for the cluster's life; the
// process comes and goes.
type Member struct {
	// ID is the node id, n1, n2, ...
	ID string
	// IP is the member's address on the bridge.
	IP string
	// NS is the network namespace the process runs in.
	NS string
	// HTTPAddr is the API's host:port (reachable from the root namespace
	// and from the other members).
	HTTPAddr string
	// RaftAddr is where the process listens for Raft; RaftAdvertise is its
	// Raft proxy in the root namespace, the address the other members dial.
	RaftAddr      string
	RaftAdvertise string
	// FaultAddr is the faultpoint control API of the process.
	FaultAddr string
	// DataDir and LogPath are on the local disk, in the work directory.
	// The log collects standard output and error of every incarnation,
	// each started by a line "=== jepsen: ...".
	DataDir string
	LogPath string
	// Spare members are not part of the initial cluster; they enter it by
	// StartJoin.
	Spare bool

	c     *Cluster
	proxy *tcpproxy.Proxy
	disk  *lossyfs.FS // Options.LossyDisk

	mu     sync.Mutex
	proc   *process
	joined bool // started with --join: restarts use --join too
	starts int
	// powerLosses counts PowerLoss calls (a part of each new boot id).
	powerLosses int
	// lastExit is the exit status of the last process that ended (-1 for
	// a signal, as os.ProcessState reports it).
	lastExit *os.ProcessState
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	// killed is set when the harness kills or stops the process: its
	// exit is expected.
	killed bool
}

// Exit records a process exit the harness did not cause (a crash, an
// injected crash at a fault point, an os.Exit).
type Exit struct {
	Member string
	Time   time.Time
	Status string // as os.ProcessState prints it: "exit status 137", "signal: killed"
	Code   int    // -1 for a signal
}

// URL returns the member's API URL for path ("/v1/status").
func (m *Member) URL(path string) string { return "http://" + m.HTTPAddr + path }

// Proxy is the TCP proxy every Raft connection to this member passes.
func (m *Member) Proxy() *tcpproxy.Proxy { return m.proxy }

// Faults is a client of the member's faultpoint control API (answers only
// while the process runs).
func (m *Member) Faults() *faultpoint.Client {
	return &faultpoint.Client{Addr: m.FaultAddr, HTTP: m.c.http}
}

// Running reports whether the member's process is alive (paused or not).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked()
}

func (m *Member) runningLocked() bool {
	if m.proc == nil {
		return false
	}
	select {
	case <-m.proc.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the process is stopped by Pause.
func (m *Member) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked() && m.proc.paused
}

// Serving reports whether the process is alive and not paused: a member
// that should answer requests.
func (m *Member) Serving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked() && !m.proc.paused
}

// Pid is the process id, 0 when not running.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.runningLocked() {
		return 0
	}
	return m.proc.cmd.Process.Pid
}

// LastExit returns the exit status of the member's last process, or nil
// if none has ended. ExitCode is -1 for a signal; a faultpoint crash exits
// with faultpoint.CrashExitCode.
func (m *Member) LastExit() *os.ProcessState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastExit
}

// Starts counts the processes started for this member.
func (m *Member) Starts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starts
}

// Joined reports whether the member entered (or re-entered) the cluster by
// --join; its restarts then use --join too.
func (m *Member) Joined() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.joined
}

// Start starts the member from its data directory (bootstrapping with the
// initial cluster if the directory is empty and the member is not a spare
// or a re-joined member) and waits until its API answers /healthz.
func (m *Member) Start(ctx context.Context) error {
	m.mu.Lock()
	join := m.joined || m.Spare
	m.mu.Unlock()
	return m.start(ctx, join)
}

// StartJoin starts the member with --join (the HTTP addresses of the
// other members): it never bootstraps and asks the cluster to add it as a
// voter. Its data directory should be empty (see Wipe). Later restarts use
// --join too.
func (m *Member) StartJoin(ctx context.Context) error {
	m.mu.Lock()
	m.joined = true
	m.mu.Unlock()
	return m.start(ctx, true)
}

func (m *Member) args(join bool) []string {
	o := m.c.opts
	a := []string{"serve",
		"--node-id", m.ID,
		"--data-dir", m.DataDir,
		"--http-addr", m.HTTPAddr,
		"--raft-addr", m.RaftAddr,
		"--raft-advertise", m.RaftAdvertise,
		"--heartbeat-timeout", o.HeartbeatTimeout.String(),
		"--election-timeout", o.ElectionTimeout.String(),
		"--leader-lease-timeout", o.LeaderLeaseTimeout.String(),
		"--commit-timeout", o.CommitTimeout.String(),
		"--snapshot-interval", o.SnapshotInterval.String(),
		"--snapshot-threshold", fmt.Sprint(o.SnapshotThreshold),
		"--trailing-logs", fmt.Sprint(o.TrailingLogs),
		"--apply-timeout", o.ApplyTimeout.String(),
		"--shutdown-timeout", "5s",
		"--blob-store", "s3://" + o.Bucket + "/" + o.S3Prefix,
		"--s3-endpoint", m.c.S3.Endpoint(),
		"--s3-path-style",
		"--s3-region", "us-east-1",
		"--upload-lease", o.UploadLease.String(),
		"--gc-interval", o.GCInterval.String(),
		"--gc-grace", o.GCGrace.String(),
		"--gc-batch", fmt.Sprint(o.GCBatch),
		"--gc-orphan-grace", o.GCOrphanGrace.String(),
		"--gc-orphan-every", o.GCOrphanEvery.String(),
		"--log-level", o.LogLevel,
	}
	if join {
		var others []string
		for _, x := range m.c.members {
			if x != m && !x.Spare {
				others = append(others, x.HTTPAddr)
			}
		}
		a = append(a, "--join", strings.Join(others, ","))
	} else {
		a = append(a, "--initial-cluster", m.c.initialCluster())
	}
	return append(a, o.ExtraArgs...)
}

func (m *Member) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "METASTORE_"), strings.HasPrefix(kv, "AWS_"), strings.HasPrefix(kv, "FAULTPOINT"):
		default:
			env = append(env, kv)
		}
	}
	env = append(env, s3Env()...)
	env = append(env, faultpoint.EnvAddr+"="+m.FaultAddr)
	env = append(env, clock.EnvSkewFile+"="+m.clockFile())
	env = append(env, fsm.EnvFaultBootIDFile+"="+m.bootIDFile())
	return append(env, m.c.opts.Env...)
}

// clockFile holds the skew of the member's clock (outside the data
// directory, so a wipe keeps it).
func (m *Member) clockFile() string {
	return filepath.Join(filepath.Dir(m.DataDir), m.ID+".clock-skew")
}

// SetClockSkew sets how far the member's clock is off the machine's
// (faultinject builds read it within 20ms: internal/clock); 0 removes the
// skew.
func (m *Member) SetClockSkew(d time.Duration) error {
	if d == 0 {
		if err := os.Remove(m.clockFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := m.clockFile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, m.clockFile())
}

func (m *Member) start(ctx context.Context, join bool) error {
	m.mu.Lock()
	if m.runningLocked() {
		m.mu.Unlock()
		return fmt.Errorf("cluster: %s is already running", m.ID)
	}
	m.starts++
	n := m.starts
	m.mu.Unlock()

	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	args := m.args(join)
	fmt.Fprintf(logf, "=== jepsen: start %d of %s at %s: %s %s\n", n, m.ID, time.Now().Format(time.RFC3339Nano), m.c.binary, strings.Join(args, " "))

	cmd := exec.Command("ip", append([]string{"netns", "exec", m.NS, m.c.binary}, args...)...)
	cmd.Env = m.env()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The member dies with the test process; the thread that forks
		// is locked and never exits (see spawn).
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("cluster: start %s: %w", m.ID, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		m.mu.Lock()
		m.lastExit = cmd.ProcessState
		killed := p.killed
		m.mu.Unlock()
		if !killed {
			m.c.recordExit(Exit{Member: m.ID, Time: time.Now(), Status: cmd.ProcessState.String(), Code: cmd.ProcessState.ExitCode()})
		}
		close(p.exited)
	}()
	m.c.logf("cluster: started %s (pid %d, %s)", m.ID, cmd.Process.Pid, map[bool]string{true: "join", false: "initial cluster"}[join])

	// Wait for the API.
	deadline := time.Now().Add(m.c.opts.StartTimeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("cluster: %s exited during start (%v); log tail:\n%s", m.ID, cmd.ProcessState, m.LogTail(4096))
		default:
		}
		if m.healthz(ctx) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %s did not answer /healthz within %s; log tail:\n%s", m.ID, m.c.opts.StartTimeout, m.LogTail(4096))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *Member) healthz(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.URL("/healthz"), nil)
	resp, err := m.c.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %d", resp.StatusCode)
	}
	return nil
}

func (m *Member) signal(sig syscall.Signal) (*process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.runningLocked() {
		return nil, fmt.Errorf("cluster: %s is not running", m.ID)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		m.proc.killed = true
	}
	if err := m.proc.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("cluster: signal %s: %w", m.ID, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		m.proc.paused = true
	case syscall.SIGCONT:
		m.proc.paused = false
	}
	return m.proc, nil
}

// Kill sends SIGKILL and waits for the process to be gone. A member that
// is not running is left alone.
func (m *Member) Kill() error {
	p, err := m.signal(syscall.SIGKILL)
	if err != nil {
		if !m.Running() {
			return nil
		}
		return err
	}
	<-p.exited
	m.c.logf("cluster: killed %s", m.ID)
	return nil
}

// Stop sends SIGTERM (continuing a paused process) and waits for the exit,
// killing the process if ctx ends first.
func (m *Member) Stop(ctx context.Context) error {
	if m.Paused() {
		_ = m.Resume()
	}
	p, err := m.signal(syscall.SIGTERM)
	if err != nil {
		if !m.Running() {
			return nil
		}
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		_ = m.Kill()
		return fmt.Errorf("cluster: %s did not stop after SIGTERM: %w", m.ID, ctx.Err())
	}
}

// Pause stops the process with SIGSTOP.
func (m *Member) Pause() error {
	_, err := m.signal(syscall.SIGSTOP)
	if err == nil {
		m.c.logf("cluster: paused %s", m.ID)
	}
	return err
}

// Resume continues a paused process with SIGCONT.
func (m *Member) Resume() error {
	_, err := m.signal(syscall.SIGCONT)
	if err == nil {
		m.c.logf("cluster: resumed %s", m.ID)
	}
	return err
}

// Wait waits until the process exits (a crash at a fault point, say) and
// returns its status.
func (m *Member) Wait(ctx context.Context) (*os.ProcessState, error) {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("cluster: %s was never started", m.ID)
	}
	select {
	case <-p.exited:
		return m.LastExit(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Wipe deletes the member's data directory; the member must not be
// running. A wiped member comes back only by StartJoin after it was
// removed from the cluster.
func (m *Member) Wipe() error {
	if m.Running() {
		return fmt.Errorf("cluster: wipe %s: still running", m.ID)
	}
	m.c.logf("cluster: wiped %s", m.ID)
	if m.disk == nil {
		return os.RemoveAll(m.DataDir)
	}
	// The data directory is a mount point: empty it.
	entries, err := os.ReadDir(m.DataDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(m.DataDir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// mountDisk mounts the member's lossy data directory.
func (m *Member) mountDisk() error {
	backing := m.DataDir + ".disk"
	for _, d := range []string{backing, m.DataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	disk, err := lossyfs.Mount(backing, m.DataDir)
	if err != nil {
		return err
	}
	m.disk = disk
	return nil
}

// Disk is the lossy file system of the member's data directory (for its
// disk faults: lossyfs.FS.SetFault), nil without Options.LossyDisk.
func (m *Member) Disk() *lossyfs.FS { return m.disk }

// bootIDFile holds the boot id the member's faultinject build takes for
// the machine's (fsm.EnvFaultBootIDFile).
func (m *Member) bootIDFile() string {
	return filepath.Join(filepath.Dir(m.DataDir), m.ID+".boot-id")
}

// PowerLoss stages a crash of the member's machine: SIGKILL, then every
// write to its data directory not yet fsynced is dropped (all of them, or
// a random half of the pages with lossyfs.Tear) and the machine gets a new
// boot id. It needs Options.LossyDisk. It returns the pages dropped. The
// member stays down until Start.
func (m *Member) PowerLoss(mode lossyfs.Mode) (int, error) {
	if m.disk == nil {
		return 0, fmt.Errorf("cluster: power loss of %s needs Options.LossyDisk", m.ID)
	}
	if err := m.Kill(); err != nil {
		return 0, err
	}
	dropped, err := m.disk.Crash(mode)
	if err != nil {
		return dropped, err
	}
	m.powerLosses++
	boot := fmt.Sprintf("jepsen-%s-%d-%d", m.ID, m.powerLosses, time.Now().UnixNano())
	if err := os.WriteFile(m.bootIDFile(), []byte(boot+"\n"), 0o644); err != nil {
		return dropped, err
	}
	m.c.logf("cluster: power loss of %s: %d unsynced pages dropped, boot id %s", m.ID, dropped, boot)
	return dropped, nil
}

// LogSize is the current size of the member's log file: an offset for
// LogSince.
func (m *Member) LogSize() int64 {
	st, err := os.Stat(m.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// LogSince returns the log from offset on.
func (m *Member) LogSince(offset int64) string {
	f, err := os.Open(m.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// LogTail returns the last n bytes of the log.
func (m *Member) LogTail(n int64) string {
	size := m.LogSize()
	return m.LogSince(max(0, size-n))
}

// spawner starts processes from one goroutine locked to its OS thread for
// the life of the test process: Pdeathsig fires when the thread that forked
// the child exits, and this thread never does.
var spawner = struct {
	once sync.Once
	reqs chan spawnReq
}{reqs: make(chan spawnReq)}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives on
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.done
}

// LogLines returns the lines of the member's log (every incarnation) that
// contain any of substrs.
func (m *Member) LogLines(substrs ...string) []string {
	var out []string
	for line := range strings.SplitSeq(m.LogSince(0), "\n") {
		for _, s := range substrs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// ProblemMarkers are log substrings that mean a member misbehaved: a
// panic, a Go runtime fatal error, a race detector report.
var ProblemMarkers = []string{"panic:", "fatal error:", "WARNING: DATA RACE"}

// LogProblems returns, per member, the log lines holding a ProblemMarker.
// Injected crashes (faultpoint) are not among them.
func (c *Cluster) LogProblems() map[string][]string {
	out := map[string][]string{}
	for _, m := range c.members {
		if lines := m.LogLines(ProblemMarkers...); len(lines) > 0 {
			out[m.ID] = lines
		}
	}
	return out
}
