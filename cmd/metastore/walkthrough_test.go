package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/testmember"
)

// codeBlocks returns the code blocks (markdownBlocks) of the README
// section whose heading is heading ("## Run it"), each with its indentation
// removed.
func codeBlocks(t *testing.T, readme, heading string) []string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	section := readme[i+1+len(heading):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	var blocks []string
	for _, b := range markdownBlocks(section, 1) {
		blocks = append(blocks, b.text)
	}
	return blocks
}

// walkThroughSections are the README sections TestREADMEWalkThroughs runs,
// in order, in one shell.
var walkThroughSections = []string{
	"## Run it",
	"## Walk-through: one job with curl",
	"## Walk-through: incremental state in the object store",
}

// Two lines of "Run it" are not run by the shell: the build (TestMain built
// the same binary; it is copied in), and the server, which the test starts
// itself, with exactly these arguments, and stops at the end.
const (
	readmeBuild = "go build -o metastore ./cmd/metastore"
	readmeServe = "./metastore serve"
)

// scriptPreamble makes the shell stop at the first failing command and
// makes every curl of the README fail on an HTTP error status (printing
// the answer), so an answer such as 409 task_not_in_attempt fails the test.
const scriptPreamble = `set -euo pipefail
curl() { command curl --fail-with-body "$@"; echo; }
`

// TestREADMEWalkThroughs runs the commands of README.md's "Run it" and
// walk-through sections exactly as printed (every code block but the
// example answers, which begin with "{"), in one bash shell in a fresh
// directory, against a real node process started as "Run it" says, on the
// fixed addresses the README uses (127.0.0.1:7070 and :7071). It skips when
// bash or curl are missing or those ports are taken.
func TestREADMEWalkThroughs(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the walk-throughs need %s, which is not installed (.ci/run installs curl)", tool)
		}
	}
	for _, addr := range []string{"127.0.0.1:7070", "127.0.0.1:7071"} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the walk-throughs use %s, which is taken: %v", addr, err)
		}
		l.Close()
	}
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)

	var script []string
	sawBuild, sawServe := false, false
	for _, heading := range walkThroughSections {
		blocks := codeBlocks(t, readme, heading)
		if len(blocks) == 0 {
			t.Fatalf("%q has no commands", heading)
		}
		for _, b := range blocks {
			if strings.HasPrefix(b, "{") {
				continue // an example answer, not a command
			}
			var keep []string
			for _, l := range strings.Split(b, "\n") {
				switch strings.TrimSpace(l) {
				case readmeBuild:
					sawBuild = true
				case readmeServe:
					sawServe = true
				default:
					keep = append(keep, l)
				}
			}
			script = append(script, strings.Join(keep, "\n"))
		}
	}
	if !sawBuild || !sawServe {
		t.Fatalf("\"Run it\" no longer shows %q and %q; update the test with it", readmeBuild, readmeServe)
	}

	dir := t.TempDir()
	copyFile(t, binary, filepath.Join(dir, "metastore"))
	serve := exec.Command("./metastore", strings.Fields(readmeServe)[1:]...)
	serve.Dir = dir
	serve.Env = cleanEnv()
	var logs syncBuffer
	serve.Stdout, serve.Stderr = &lineWriter{&logs}, &lineWriter{&logs}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited with %v\n%s", err, &logs)
			}
		case <-time.After(30 * time.Second):
			serve.Process.Kill()
			t.Errorf("serve did not stop within 30s of SIGTERM\n%s", &logs)
		}
	})
	testmember.WaitFor(t, 30*time.Second, "the README's node to be ready on 127.0.0.1:7070", func() bool {
		resp, err := http.Get("http://127.0.0.1:7070/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	body := scriptPreamble + strings.Join(script, "\n") + "\nwait\n"
	sh := exec.Command("bash", "-c", body)
	sh.Dir = dir
	sh.Env = cleanEnv()
	var out bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &out
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's commands failed: %v\n--- script ---\n%s\n--- output ---\n%s\n--- node log ---\n%s", err, body, &out, &logs)
	}
	t.Logf("the walk-throughs' output:\n%s", &out)
	// What the README says the answers show.
	for _, want := range []string{
		`"expected": 3`,                 // the first attempt
		`"stragglers": [`,               // step 5
		`"completed_by_this_ack": true`, // epoch 1 and epoch 2
		`"status": "nothing_to_recover"`,
		`"status": "no_prior_state"`,
		`"generation": 2`,
		`"object_store_reads": 1`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the walk-throughs' output lacks %s\n%s", want, &out)
		}
	}
	if n := strings.Count(out.String(), `"completed_by_this_ack": true`); n != 2 {
		t.Errorf("%d acks completed an epoch, want 2 (epochs 1 and 2)\n%s", n, &out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// lineWriter appends what it is given to a syncBuffer.
type lineWriter struct{ b *syncBuffer }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.b.WriteLine(bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// TestDocsFuzzCommands checks the fuzzing commands of docs/fuzzing.md
// without running them (each fuzzes for minutes): every "cd DIR && go test
// -run '^$' -fuzz '^NAME$' ..." names a directory of the module and a fuzz
// target NAME defined in its tests.
func TestDocsFuzzCommands(t *testing.T) {
	raw, err := os.ReadFile("../../docs/fuzzing.md")
	if err != nil {
		t.Fatal(err)
	}
	cmd := regexp.MustCompile(`(?m)^cd (\S+) && go test -run '\^\$' -fuzz '\^(\w+)\$' .*$`)
	found := cmd.FindAllStringSubmatch(string(raw), -1)
	if len(found) == 0 {
		t.Fatal("docs/fuzzing.md shows no fuzz command")
	}
	for _, m := range found {
		dir, name := m[1], m[2]
		files, err := filepath.Glob(filepath.Join("../..", dir, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("%q: no test files in %s", m[0], dir)
			continue
		}
		defined := false
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			defined = defined || strings.Contains(string(src), "\nfunc "+name+"(f *testing.F)")
		}
		if !defined {
			t.Errorf("%q: %s defines no fuzz target %s", m[0], dir, name)
		}
	}
}
