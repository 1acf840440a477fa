package procs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

func TestFreePortsDistinct(t *testing.T) {
	ports, err := FreePorts(9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: %d repeated or invalid", ports, p)
		}
		seen[p] = true
	}
}

func TestStartKill(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	log := filepath.Join(t.TempDir(), "sleep.log")
	p, err := Start(Spec{Path: sleep, Args: []string{"600"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	if got := parentPID(p.PID()); got != os.Getpid() {
		t.Errorf("parent of %d = %d, want %d", p.PID(), got, os.Getpid())
	}
	isSleep := func(cmd []string) bool { return cmd[0] == sleep && slices.Equal(cmd[1:], []string{"600"}) }
	if !slices.Contains(serverPIDs(isSleep), p.PID()) {
		t.Errorf("serverPIDs does not list %d", p.PID())
	}
	rss, err := RSS(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 {
		t.Errorf("RSS = %d", rss)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Kill")
	}
	if p.ExitErr() == nil {
		t.Error("a killed process reports a clean exit")
	}
	if err := p.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
}

func TestNotInstalled(t *testing.T) {
	err := error(&NotInstalledError{What: "etcd binary", Package: "etcd-server"})
	if !IsNotInstalled(err) {
		t.Fatal("IsNotInstalled is false")
	}
	want := "etcd binary not found: install the Debian package etcd-server (apt-get install etcd-server)"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// TestStopNew starts a server-like process the way a package's maintainer
// script would (detached, so not a child of the test) and checks that
// stopNew kills it but spares one that was running before and a child.
func TestStopNew(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	marker := func(arg string) func([]string) bool {
		return func(cmd []string) bool { return len(cmd) == 2 && cmd[0] == sleep && cmd[1] == arg }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A child of this process is never a stray.
	child, err := Start(Spec{Path: sleep, Args: []string{"987.125"}})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Kill()
	if err := stopNew(ctx, nil, marker("987.125")); err != nil {
		t.Fatal(err)
	}
	if !child.Running() {
		t.Fatal("stopNew killed a child of this process")
	}

	// A detached process that was running before is spared; one that
	// appeared since is killed.
	if err := exec.Command(sh, "-c", sleep+" 987.25 >/dev/null 2>&1 &").Run(); err != nil {
		t.Fatal(err)
	}
	var pid int
	err = sut.WaitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		pids := serverPIDs(marker("987.25"))
		if len(pids) == 1 {
			pid = pids[0]
		}
		return len(pids) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer killPID(context.Background(), pid)
	if err := stopNew(ctx, map[int]bool{pid: true}, marker("987.25")); err != nil {
		t.Fatal(err)
	}
	if len(serverPIDs(marker("987.25"))) != 1 {
		t.Fatal("stopNew killed a process that was running before")
	}
	if err := stopNew(ctx, nil, marker("987.25")); err != nil {
		t.Fatal(err)
	}
	for _, p := range serverPIDs(marker("987.25")) {
		if !zombie(p) {
			t.Fatalf("stray %d is still running", p)
		}
	}
}

// TestResidentMemory checks the split of this process's resident memory:
// the kernel reports VmRSS as the sum of RssAnon, RssFile and RssShmem.
func TestResidentMemory(t *testing.T) {
	m, err := ResidentMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !m.Split {
		if b, err := os.ReadFile("/proc/self/status"); err == nil && strings.Contains(string(b), "\nRssAnon:") {
			t.Fatalf("ResidentMemory = %+v: no split although the kernel reports RssAnon", m)
		}
		t.Skipf("the kernel reports no RssAnon/RssFile: %+v", m)
	}
	if m.RSS <= 0 || m.Anon <= 0 || m.File <= 0 || m.Anon+m.File+m.Shmem != m.RSS {
		t.Errorf("ResidentMemory = %+v: want positive parts that add up to VmRSS", m)
	}
	if _, err := ResidentMemory(-1); err == nil {
		t.Error("ResidentMemory of no process succeeded")
	}
}
