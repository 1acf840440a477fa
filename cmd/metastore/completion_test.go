package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func complete(t *testing.T, words ...string) []string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append([]string{"__complete"}, words...), &out, &errOut, noEnv); code != exitOK || errOut.Len() > 0 {
		t.Fatalf("__complete %q: exit %d, stderr %q", words, code, errOut.String())
	}
	return strings.Fields(out.String())
}

func TestCompletionCandidates(t *testing.T) {
	for _, tc := range []struct {
		words   []string
		want    []string // all present
		exactly bool     // and nothing else
	}{
		{[]string{""}, []string{"serve", "members", "gc", "snapshot", "tokens", "completion", "version", "help"}, false},
		{[]string{"me"}, []string{"members"}, true},
		{[]string{"members", ""}, []string{"add", "list", "remove"}, true},
		{[]string{"gc", "r"}, []string{"run"}, true},
		{[]string{"gc", "run", "--"}, []string{"--dry-run", "--orphans", "--addr", "--json", "--timeout", "--token-file", "--ca-file"}, false},
		{[]string{"checkpoints", "list", "orders", "--st"}, []string{"--state"}, true},
		{[]string{"serve", "--node"}, []string{"--node-id"}, true},
		{[]string{"certs", "member", "--ca"}, []string{"--ca-dir"}, true},
		{[]string{"completion", ""}, []string{"bash", "zsh"}, true},
		// Positional arguments and values: the shell completes files.
		{[]string{"snapshot", "save", ""}, nil, true},
		{[]string{"nosuch", ""}, nil, true},
		{[]string{"members", "nosuch", "--"}, nil, true},
	} {
		got := complete(t, tc.words...)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: %q missing from %q", tc.words, w, got)
			}
		}
		if tc.exactly && len(got) != len(tc.want) {
			t.Errorf("%q: got %q, want exactly %q", tc.words, got, tc.want)
		}
	}
	if got := complete(t, ""); slices.Contains(got, "__complete") {
		t.Errorf("the hidden __complete is offered: %q", got)
	}
	// Every client command completes the client flags.
	for _, c := range commands {
		if !c.client {
			continue
		}
		flags := commandFlags(c, noEnv)
		for _, f := range []string{"--addr", "--json", "--timeout", "--token"} {
			if !slices.Contains(flags, f) {
				t.Errorf("%s: flags %q lack %s", c.name, flags, f)
			}
		}
	}
}

// shellCompletes runs a completion script in a shell with the test binary
// first on PATH.
func shellCompletes(t *testing.T, shell, script string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-c", script)
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", shell, err, out)
	}
	return strings.Fields(string(out))
}

// TestCompletionScripts runs the generated scripts in bash and zsh: the
// completion function, given a command line, offers what __complete says.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []struct {
		name string
		// drive sets up a command line (words, the index of the word
		// under the cursor) and prints the candidates.
		drive func(words []string) string
	}{
		{"bash", func(words []string) string {
			return `source <(metastore completion bash)
COMP_WORDS=(` + strings.Join(quoteAll(words), " ") + `); COMP_CWORD=` + strconv.Itoa(len(words)-1) + `
_metastore; printf '%s\n' "${COMPREPLY[@]}"`
		}},
		{"zsh", func(words []string) string {
			// zsh's completion system is not loaded in a plain zsh:
			// compdef, compadd and _files stand in, printing what the
			// script hands them.
			return `compdef() { :; }
compadd() { [ "$1" = "--" ] && shift; print -l -- "$@"; }
_files() { print -- FILES; }
source <(metastore completion zsh)
words=(` + strings.Join(quoteAll(words), " ") + `); CURRENT=` + strconv.Itoa(len(words)) + `
_metastore`
		}},
	} {
		t.Run(shell.name, func(t *testing.T) {
			sh, err := exec.LookPath(shell.name)
			if err != nil {
				t.Skipf("%s not installed: its completion script is not run", shell.name)
			}
			if got := shellCompletes(t, sh, shell.drive([]string{"metastore", "gc", "run", "--dr"})); !slices.Equal(got, []string{"--dry-run"}) {
				t.Errorf("metastore gc run --dr: %q, want --dry-run", got)
			}
			if got := shellCompletes(t, sh, shell.drive([]string{"metastore", "mem"})); !slices.Equal(got, []string{"members"}) {
				t.Errorf("metastore mem: %q, want members", got)
			}
			got := shellCompletes(t, sh, shell.drive([]string{"metastore", "members", ""}))
			slices.Sort(got)
			if !slices.Equal(got, []string{"add", "list", "remove"}) {
				t.Errorf("metastore members: %q, want add list remove", got)
			}
			if shell.name == "zsh" {
				if got := shellCompletes(t, sh, shell.drive([]string{"metastore", "snapshot", "save", ""})); !slices.Equal(got, []string{"FILES"}) {
					t.Errorf("metastore snapshot save: %q, want file completion", got)
				}
			}
		})
	}
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + w + "'"
	}
	return out
}
