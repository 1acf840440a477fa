package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocCommands runs every `go run ./jepsen/cmd/jepsen ...` command that
// README.md and docs/*.md print, with --dry-run: each must name a command,
// flags, faults and controls that exist. (The runs themselves are what
// jepsen/runner's TestShortTier and TestPositiveControls do, with the same
// definitions.)
func TestDocCommands(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "jepsen")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	files, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../../README.md")
	// Inline code (which may wrap) and indented code lines (up to a
	// comment).
	inline := regexp.MustCompile("`go run \\./jepsen/cmd/jepsen([^`]*)`")
	block := regexp.MustCompile("(?m)^ {4}go run \\./jepsen/cmd/jepsen([^#\\n]*)")
	seen := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(inline.FindAllStringSubmatch(string(raw), -1), block.FindAllStringSubmatch(string(raw), -1)...) {
			args := strings.Fields(m[1])
			if len(args) == 0 {
				continue
			}
			seen++
			out, err := exec.Command(bin, append(args, "--dry-run")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: `go run ./jepsen/cmd/jepsen %s`: %v\n%s", filepath.Base(f), strings.Join(args, " "), err, out)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found only %d commands in the docs: the pattern is wrong", seen)
	}
}
