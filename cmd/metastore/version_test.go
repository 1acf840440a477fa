package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// gitHead is the commit checked out in the work tree the tests run in;
// empty when git or the repository is not there.
func gitHead() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// recordedBuild is what the go command recorded in the test binary, read
// with `go version -m`: the main module's version and the vcs.* settings
// (none when it built outside a git checkout, in a git worktree, whose
// .git is a file, or with -buildvcs=false).
type recordedBuild struct {
	version, revision, time string
	modified                bool
}

func readRecordedBuild(t *testing.T) recordedBuild {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var rb recordedBuild
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			rb.version = f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				rb.revision = v
			case "vcs.time":
				rb.time = v
			case "vcs.modified":
				rb.modified = v == "true"
			}
		}
	}
	return rb
}

// release is what buildinfo makes of the recorded module version.
func (rb recordedBuild) release() string {
	if rb.version == "" || rb.version == "(devel)" {
		return "devel"
	}
	return rb.version
}

// TestBinaryVersionRevision checks that `metastore version` reports the
// release and the commit the binary was built from, with its time, as the
// go command recorded them; and, when it recorded a commit, that it is the
// checked-out one.
func TestBinaryVersionRevision(t *testing.T) {
	rb := readRecordedBuild(t)
	code, out, errOut := runBinary(t, t.TempDir(), nil, "version")
	if code != exitOK {
		t.Fatalf("version: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	first := regexp.MustCompile(`^metastore (\S+) \(go\S+, \w+/\w+\)$`).FindStringSubmatch(lines[0])
	if len(lines) != 2 || first == nil {
		t.Fatalf("version printed %q, want two lines: release and revision", out)
	}
	if first[1] != rb.release() {
		t.Errorf("release %q, want %q (recorded module version %q)", first[1], rb.release(), rb.version)
	}
	if rb.revision == "" {
		if lines[1] != "revision unknown (not recorded at build time)" {
			t.Errorf("no revision recorded, version printed %q", lines[1])
		}
		t.Logf("the go command recorded no revision (git worktree, no git, or -buildvcs=false): only the unknown case is checked")
		return
	}
	want := "revision " + rb.revision + " (" + rb.time
	if rb.modified {
		want += ", modified"
	}
	if want += ")"; lines[1] != want {
		t.Errorf("revision line %q, want %q", lines[1], want)
	}
	if _, err := time.Parse(time.RFC3339, rb.time); err != nil {
		t.Errorf("recorded vcs.time %q: %v", rb.time, err)
	}
	if head := gitHead(); head != "" && rb.revision != head {
		t.Errorf("recorded revision %s, want HEAD %s", rb.revision, head)
	}
}
