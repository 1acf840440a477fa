package procs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NotInstalledError reports a server that is missing because its Debian
// package is not installed.
type NotInstalledError struct {
	// What names what was looked for (a binary, a jar).
	What string
	// Package is the Debian package that ships it.
	Package string
}

func (e *NotInstalledError) Error() string {
	return fmt.Sprintf("%s not found: install the Debian package %s (apt-get install %s)", e.What, e.Package, e.Package)
}

// IsNotInstalled reports whether err is or wraps a *NotInstalledError.
func IsNotInstalled(err error) bool {
	var e *NotInstalledError
	return errors.As(err, &e)
}

// Package is a Debian package that ships a server.
type Package struct {
	// Name is the Debian package name.
	Name string
	// Service is the systemd unit the package's maintainer scripts may
	// start, or empty. Install stops and disables it if its unit file is
	// installed and systemd runs.
	Service string
	// IsServer recognises, by its command line, a server process of the
	// package, one its maintainer scripts may have started.
	IsServer func(cmdline []string) bool
}

// Install installs p with apt-get (after apt-get update), which requires
// root. The benchmark starts the servers itself, so Install stops what the
// installation started: the package's systemd service, where systemd runs,
// and any server process recognised by p.IsServer that appeared during the
// installation and is not a child of this process.
func Install(ctx context.Context, p Package) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("procs: install %s: not root; run apt-get install %s as root", p.Name, p.Name)
	}
	before := map[int]bool{}
	if p.IsServer != nil {
		for _, pid := range serverPIDs(p.IsServer) {
			before[pid] = true
		}
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"update", "-q"},
		{"install", "-y", "-q", p.Name},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("procs: apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(out, 2000))
		}
	}
	if p.Service != "" && unitInstalled(p.Service) {
		if _, err := os.Stat("/run/systemd/system"); err == nil {
			cmd := exec.CommandContext(ctx, "systemctl", "disable", "--now", p.Service)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("procs: stop the service %s that installing %s started: %w\n%s", p.Service, p.Name, err, tail(out, 2000))
			}
		}
	}
	if p.IsServer == nil {
		return nil
	}
	if err := stopNew(ctx, before, p.IsServer); err != nil {
		return fmt.Errorf("procs: stop a server that installing %s started: %w", p.Name, err)
	}
	return nil
}

// stopNew kills the processes recognised by isServer that are not in
// before and not children of this process.
func stopNew(ctx context.Context, before map[int]bool, isServer func([]string) bool) error {
	for _, pid := range serverPIDs(isServer) {
		if before[pid] || parentPID(pid) == os.Getpid() {
			continue
		}
		if err := killPID(ctx, pid); err != nil {
			return fmt.Errorf("process %d: %w", pid, err)
		}
	}
	return nil
}

// unitInstalled reports whether a systemd unit file of that name exists.
func unitInstalled(unit string) bool {
	for _, d := range []string{"/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, unit)); err == nil {
			return true
		}
	}
	return false
}

// serverPIDs lists the processes whose command line isServer recognises.
func serverPIDs(isServer func([]string) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if isServer(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentPID is the parent of pid, or -1 if unknown.
func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: the fields after
	// its closing parenthesis are the state and the parent.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// killPID sends SIGKILL to a process this one did not start and waits until
// it is gone from /proc (or a zombie).
func killPID(ctx context.Context, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil || zombie(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// zombie reports whether pid has exited but was not reaped yet.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
