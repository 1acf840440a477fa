package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
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
