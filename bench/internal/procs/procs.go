// Package procs launches and ends the server processes of a benchmark's
// systems under test on loopback: free ports, one process per member with
// its output in a log file, SIGKILL with a wait for the exit, the resident
// memory of a process, and the installation of the Debian package that
// ships a server.
//
// Every process is started in its own process group and with a parent-death
// signal (SIGKILL), so a benchmark that dies does not leave servers behind.
// Linux sends that signal when the OS thread that started the process
// exits, which Go does only for a goroutine that exits while locked to its
// thread (runtime.LockOSThread): do not call Start from such a goroutine.
package procs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 when
// it returned. It holds every listener until all n are chosen, so the ports
// differ from each other; another process may still take one before the
// caller binds it.
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("procs: choose a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Spec describes a process to start.
type Spec struct {
	// Path is the executable.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env is the environment; nil means the environment of this process.
	Env []string
	// Dir is the working directory; empty means this process's.
	Dir string
	// Log is a file that receives the process's stdout and stderr,
	// appended to; empty means both are discarded.
	Log string
}

// Process is a started process. Its methods are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File

	mu  sync.Mutex
	err error // the exit status, once done is closed
}

// Start starts the process described by spec.
func Start(spec Spec) (*Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var log *os.File
	if spec.Log != "" {
		f, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("procs: open log of %s: %w", spec.Path, err)
		}
		log = f
		cmd.Stdout = f
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		if log != nil {
			log.Close()
		}
		return nil, fmt.Errorf("procs: start %s: %w", spec.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		err := cmd.Wait()
		if p.log != nil {
			p.log.Close()
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitErr is the exit status (nil for a clean exit, an *exec.ExitError
// otherwise) once the process has exited, and nil before.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL to the process and waits until it has exited. Killing
// a process that has already exited does nothing.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("procs: kill %d: %w", p.PID(), err)
	}
	<-p.done
	return nil
}

// RSS returns the resident memory of process pid in bytes (VmRSS of
// /proc/PID/status).
func RSS(pid int) (int64, error) {
	m, err := ResidentMemory(pid)
	return m.RSS, err
}

// Memory is a process's resident memory in bytes, from /proc/PID/status.
// RSS (VmRSS) is the sum of the others: Anon (RssAnon) the anonymous pages
// the process owns (heap, stacks), File (RssFile) the resident pages of
// files it maps (its executable, a memory-mapped database file: page
// cache, which the kernel may reclaim and read again), Shmem (RssShmem)
// shared memory. Split is false when the kernel reported only VmRSS
// (Linux before 4.5); the others are then zero.
type Memory struct {
	RSS, Anon, File, Shmem int64
	Split                  bool
}

// ResidentMemory reads process pid's resident memory from
// /proc/PID/status.
func ResidentMemory(pid int) (Memory, error) {
	var m Memory
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return m, fmt.Errorf("procs: resident memory of %d: %w", pid, err)
	}
	fields := map[string]*int64{"VmRSS": &m.RSS, "RssAnon": &m.Anon, "RssFile": &m.File, "RssShmem": &m.Shmem}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		dst := fields[key]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("procs: resident memory of %d: unexpected line %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("procs: resident memory of %d: %w", pid, err)
		}
		*dst = kb * 1024
		seen[key] = true
	}
	if !seen["VmRSS"] {
		return m, fmt.Errorf("procs: resident memory of %d: no VmRSS in /proc/%d/status", pid, pid)
	}
	m.Split = seen["RssAnon"] && seen["RssFile"]
	if !m.Split {
		m.Anon, m.File, m.Shmem = 0, 0, 0
	}
	return m, nil
}

// LogTail returns the last n bytes of the file at path (a member's log, to
// explain why it failed), or a note that it could not be read.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log %s unreadable: %v)", path, err)
	}
	return tail(b, n)
}
