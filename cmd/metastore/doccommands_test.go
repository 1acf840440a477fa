package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// The shell commands that README.md, docs/*.md and the other Markdown files
// (docFiles) print.
//
// TestDocsShellCommands extracts every code block of those files
// (markdownBlocks: indented blocks and ``` fences), splits the blocks that
// print shell commands into commands (a line, with the lines a trailing
// backslash continues) and gives each command exactly one of these fates:
//
//   - run: the blocks of docRunGroups are executed, command by command, in
//     bash in a fresh directory (with the built binary as ./metastore and on
//     PATH; `go run` commands in the repository), against nodes the test
//     starts: a printed `metastore serve` line starts one with exactly its
//     arguments. What the test has to put in place of an example host, path
//     or identifier is the group's substitution table (printed in the log);
//     what it does for a command a shell of its own cannot run (systemctl,
//     kill %4) is the group's actions; serve lines the prose describes
//     without printing them are the group's then.
//   - checked: `metastore serve` and `metastore rebuild` command lines are
//     parsed and validated by serve's own settings (loadConfig, validate);
//     `go test` commands have their flags checked against `go help
//     testflag` and `go help build`, their packages listed with `go list`,
//     their -run and -fuzz names found among the packages' tests, and their
//     environment variables found in the packages' source; `go run`
//     commands of a program of the module have their flags checked against
//     the flags the built program prints for -h.
//   - covered elsewhere: README.md's walk-through sections are run by
//     TestREADMEWalkThroughs; `go run ./jepsen/cmd/jepsen ...` lines are
//     dry-run by jepsen/cmd/jepsen's TestDocCommands.
//   - not runnable: docNotRunnable names each such command with the reason.
//
// Blocks that print no command (answers, logs, Go or JSON, HTTP requests as
// the API sees them) are recognised by docNotCommand. A command with no
// fate fails the test, so a new printed command cannot slip through.

// docRoot is the repository root, seen from cmd/metastore.
const docRoot = "../.."

// docNotRunnable lists the printed commands a test cannot run, with the
// reason. The key is the command without its comment, its words separated
// by single spaces.
var docNotRunnable = map[string]string{
	// docs/operations.md, "Corrupted files and rebuilding a member".
	"metastore rebuild <the member's usual serve flags> --join ms1.internal:7070,ms2.internal:7070": "a template: <the member's usual serve flags> stands for a member's own flags; the concrete example after it is checked",
	// docs/operations.md, "Upgrades" (the test does systemctl stop and
	// start itself: docRunGroups).
	"install -m 0755 metastore-NEW /usr/local/bin/metastore": "replaces the installed binary of a production host; the test restarts its member with the binary it built",
}

// docNotCommand says why a block prints no shell command, or "" when it
// may.
func docNotCommand(file string, b mdBlock) string {
	first := strings.SplitN(b.text, "\n", 2)[0]
	switch {
	case b.info == "go":
		return "Go source"
	case b.info == "json":
		return "JSON"
	case strings.HasPrefix(first, "{") || strings.HasPrefix(first, `"`):
		return "an example answer or JSON fragment"
	case strings.HasPrefix(first, "HTTP/1.1 "):
		return "an example HTTP answer"
	case strings.HasPrefix(first, "level="):
		return "example log lines"
	case regexp.MustCompile(`^(GET|POST|PUT|DELETE) /v1/`).MatchString(first):
		return "an HTTP request as the API sees it (method, path, body with elisions), not a shell command"
	case file == "examples/streamjob/README.md" && (strings.HasPrefix(first, "job demo: ") || first == "..."):
		return "example output of streamjob"
	case file == "examples/streamjob/README.md" && strings.HasPrefix(first, "streamjob [--addr "):
		return "the usage synopsis of streamjob"
	case file == "docs/architecture.md" && strings.HasPrefix(first, "cmd/metastore -> "):
		return "the package dependency graph"
	case file == "docs/operations.md" && strings.HasPrefix(first, "metastore: invalid --auth: "):
		return "the error a member prints at start"
	case file == "docs/consistency.md" && strings.HasPrefix(first, "leak: object "):
		return "a message of the consistency suite's gc-liveness checker"
	}
	return ""
}

// docGroup is a run of printed blocks executed against one node.
type docGroup struct {
	file   string
	blocks []string // the first line of each block, as printed (indentation removed)
	// node says how the node is started: "auth" (by the group's own serve
	// line) or "tls" (by the test, with certificates of a fresh CA).
	node string
	// subst replaces, in order, what the docs print by what the test uses.
	// A value is computed just before each command from the outputs of the
	// commands before it.
	subst []docSubst
	// env is added to the environment of every command.
	env func(n *docNode) []string
	// programs are run besides docRunPrograms.
	programs map[string]bool
	// goRun runs the group's `go run` commands (in the repository, where
	// the reader runs them) instead of only checking them.
	goRun bool
	// actions are what the test does for a printed command a shell of
	// its own cannot run, by the command's key.
	actions map[string]docAction
	// before, when set, puts in place what the group's commands act on
	// (an example job), once the node is ready and before the first
	// command.
	before func(t *testing.T, n *docNode)
	// check, when set, checks what the group's commands did.
	check func(t *testing.T, n *docNode)
	// then are commands the prose after a printed command describes
	// without printing them, run after it (and substituted the same way).
	then map[string][]string
}

type docAction struct {
	why string
	do  func(t *testing.T, n *docNode)
}

type docSubst struct {
	old, why string
	new      func(n *docNode, outputs string) string
}

// docNode is a member started for a group.
type docNode struct {
	dir     string  // the group's working directory
	proc    *clProc // the node of an auth or tls group
	scheme  string
	caFile  string
	procs   map[string]*docProc // by node id, the nodes started
	pending []*docProc          // started, not yet seen ready
}

func (n *docNode) url() string { return n.scheme + "://" + n.proc.httpAddr }

var createdToken = regexp.MustCompile(`created token (\S+) `)

var docRunGroups = []docGroup{
	{
		file: "docs/operations.md",
		blocks: []string{
			"install -m 0600 /dev/null /etc/metastore/bootstrap-token       # readable by its owner only",
			"export METASTORE_TOKEN_FILE=/etc/metastore/bootstrap-token",
		},
		node: "auth",
		subst: []docSubst{
			{"/etc/metastore", "the configuration directory of a host, made in the test's directory",
				func(n *docNode, _ string) string { return filepath.Join(n.dir, "etc/metastore") }},
			{" ...", "the member's other flags: the test's data directory and loopback addresses",
				func(n *docNode, _ string) string {
					return fmt.Sprintf(" --node-id a1 --data-dir %s --http-addr %s --raft-addr %s",
						n.proc.dataDir, n.proc.httpAddr, n.proc.raftAddr)
				}},
			{"3f1c9a0b7e2d4c15", "an example accessor: the accessor `tokens create` printed first",
				func(_ *docNode, outputs string) string {
					if m := createdToken.FindStringSubmatch(outputs); m != nil {
						return m[1]
					}
					return "(the accessor `tokens create` prints)"
				}},
		},
		env:      func(n *docNode) []string { return []string{"METASTORE_ADDR=" + n.url()} },
		programs: map[string]bool{"install": true},
		check: func(t *testing.T, n *docNode) {
			// The secret's file is readable by its owner only, as the
			// comment says.
			fi, err := os.Stat(filepath.Join(n.dir, "etc/metastore/bootstrap-token"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
				t.Errorf("the bootstrap token file has mode %v and %d bytes, want 0600 and a secret", fi.Mode().Perm(), fi.Size())
			}
		},
	},
	{
		file:   "docs/operations.md",
		blocks: []string{"metastore snapshot save --addr https://m1:7070 pre-upgrade.snap   # a backup first"},
		node:   "tls",
		subst: []docSubst{
			{"https://m1:7070", "the example cluster's first member: the test's TLS member",
				func(n *docNode, _ string) string { return n.url() }},
			{"https://mN:7070", "each member in turn: the test's TLS member",
				func(n *docNode, _ string) string { return n.url() }},
		},
		env: func(n *docNode) []string {
			return []string{"METASTORE_CA_FILE=" + n.caFile, "CURL_CA_BUNDLE=" + n.caFile}
		},
		actions: map[string]docAction{
			"systemctl stop metastore": {"stop the member with SIGTERM (what the unit's stop does) and require a clean exit",
				func(t *testing.T, n *docNode) {
					if code := n.proc.terminate(t); code != 0 {
						t.Fatalf("the member exited with status %d on SIGTERM\n%s", code, n.logs())
					}
				}},
			"systemctl start metastore": {"start the member again with the same command line",
				func(t *testing.T, n *docNode) { startServe(t, n, n.proc, n.proc.args) }},
		},
	},
	{
		file:   "docs/operations.md",
		blocks: []string{"metastore epochs unpin orders 42        # release a savepoint you no longer need, or use --force below"},
		node:   "tls",
		env: func(n *docNode) []string {
			return []string{"METASTORE_ADDR=" + n.url(), "METASTORE_CA_FILE=" + n.caFile}
		},
		before: func(t *testing.T, n *docNode) {
			// Job orders with a savepoint, epoch 42, which the first
			// command unpins; the delete after it then needs no --force,
			// and the forced one repeats it (the same answer, exit 0).
			hc := httpsClient(t, n.caFile)
			for _, r := range []struct{ method, path, body string }{
				{"PUT", "/v1/jobs/orders", `{"config": {"retained": 1}}`},
				{"POST", "/v1/jobs/orders/attempts", `{"attempt_id": "a1", "tasks": [{"id": "src", "capabilities": ["input"]}]}`},
				{"POST", "/v1/jobs/orders/epochs", `{"generation": 1, "epoch": 42}`},
				{"PUT", "/v1/jobs/orders/epochs/42/acks/src", `{"generation": 1, "payloads": {"input": "b2Zmc2V0PTQy"}}`},
				{"PUT", "/v1/jobs/orders/epochs/42/pin", `{"name": "before-upgrade"}`},
			} {
				req, err := http.NewRequest(r.method, n.url()+r.path, strings.NewReader(r.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s: %d %s", r.method, r.path, resp.StatusCode, body)
				}
			}
		},
		check: func(t *testing.T, n *docNode) {
			// The job is gone (each printed command exited 0).
			resp, err := httpsClient(t, n.caFile).Get(n.url() + "/v1/jobs/orders")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("job orders after the printed deletes: %d, want 404", resp.StatusCode)
			}
		},
	},
	{
		file: "README.md",
		blocks: []string{
			"go build -o metastore ./cmd/metastore",
			"./metastore serve --node-id n4 --data-dir /tmp/ms4 --blob-store file:///tmp/ms-blobs \\",
			"./metastore members add n4 --raft-addr 127.0.0.1:7101 --http-addr 127.0.0.1:7100",
			"./metastore members remove n4",
			"./metastore certs ca --out /tmp/ms-certs                       # ca.crt, ca.key",
			"export METASTORE_CA_FILE=/tmp/ms-certs/ca.crt",
		},
		node: "readme",
		subst: []docSubst{
			{"/tmp/", "the README's directories: in the test's directory",
				func(n *docNode, _ string) string { return n.dir + "/tmp/" }},
		},
		programs: map[string]bool{"for": true, "rm": true},
		goRun:    true,
		actions: map[string]docAction{
			"kill %4": {"stop the fourth node (started in the background of the reader's shell) with SIGTERM",
				func(t *testing.T, n *docNode) {
					if code := n.procs["n4"].p.terminate(t); code != 0 {
						t.Fatalf("n4 exited with status %d on SIGTERM\n%s", code, n.logs())
					}
				}},
		},
		then: map[string][]string{
			// "(n2 and n3 as above, each with its own nN.crt and nN.key.)"
			"./metastore serve --node-id n1 --data-dir /tmp/ms1 --blob-store file:///tmp/ms-blobs --http-addr 127.0.0.1:7070 --raft-addr 127.0.0.1:7071 --initial-cluster n1=127.0.0.1:7071,n2=127.0.0.1:7081,n3=127.0.0.1:7091 --tls-cert-file /tmp/ms-certs/n1.crt --tls-key-file /tmp/ms-certs/n1.key --tls-ca-file /tmp/ms-certs/ca.crt": {
				"./metastore serve --node-id n2 --data-dir /tmp/ms2 --blob-store file:///tmp/ms-blobs --http-addr 127.0.0.1:7080 --raft-addr 127.0.0.1:7081 --initial-cluster n1=127.0.0.1:7071,n2=127.0.0.1:7081,n3=127.0.0.1:7091 --tls-cert-file /tmp/ms-certs/n2.crt --tls-key-file /tmp/ms-certs/n2.key --tls-ca-file /tmp/ms-certs/ca.crt",
				"./metastore serve --node-id n3 --data-dir /tmp/ms3 --blob-store file:///tmp/ms-blobs --http-addr 127.0.0.1:7090 --raft-addr 127.0.0.1:7091 --initial-cluster n1=127.0.0.1:7071,n2=127.0.0.1:7081,n3=127.0.0.1:7091 --tls-cert-file /tmp/ms-certs/n3.crt --tls-key-file /tmp/ms-certs/n3.key --tls-ca-file /tmp/ms-certs/ca.crt",
			},
		},
	},
	{
		file:   "README.md",
		blocks: []string{"go run ./examples/streamjob --addr http://127.0.0.1:7070 run --epochs 30"},
		node:   "readme-run-it",
		goRun:  true,
	},
	{
		file: "examples/streamjob/README.md",
		blocks: []string{
			"go run ./cmd/metastore serve &",
			"go run ./examples/streamjob --addr http://127.0.0.1:7070 resume --epochs 10 --topology changed",
		},
		node:  "none",
		goRun: true,
		actions: map[string]docAction{
			"go run ./cmd/metastore serve &": {"start the binary go run builds, as serve in the background of a fresh directory (README.md's \"Run it\" node)",
				func(t *testing.T, n *docNode) { startRunIt(t, n) }},
		},
	},
}

// docRunPrograms are the programs a group's commands may run; any other
// command of a group's blocks must be listed in docNotRunnable.
var docRunPrograms = map[string]bool{"metastore": true, "curl": true, "export": true}

// docCommand is one printed shell command.
type docCommand struct {
	file  string
	line  int
	block *mdBlock
	cmd   string // without comments, continuation lines joined
}

func (c docCommand) key() string { return strings.Join(strings.Fields(c.cmd), " ") }

func (c docCommand) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.key()) }

// splitCommands splits a block into commands: a line, with the lines a
// trailing backslash, an open quote or an open do ... done continue.
// Blank lines and comment lines are not commands.
func splitCommands(file string, b *mdBlock) []docCommand {
	var out []docCommand
	lines := strings.Split(b.text, "\n")
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		c := docCommand{file: file, line: b.line + i, block: b}
		var cmd []string
		for ; i < len(lines); i++ {
			cmd = append(cmd, lines[i])
			code, open := stripComment(strings.Join(cmd, "\n"))
			depth := 0
			for _, w := range strings.Fields(code) {
				switch strings.TrimSuffix(w, ";") {
				case "do":
					depth++
				case "done":
					depth--
				}
			}
			if !open && depth <= 0 && !strings.HasSuffix(code, "\\") {
				break
			}
		}
		code, _ := stripComment(strings.Join(cmd, "\n"))
		c.cmd = strings.TrimSpace(strings.ReplaceAll(code, "\\\n", " "))
		out = append(out, c)
	}
	return out
}

// stripComment removes the shell comments of s (a # that begins a word,
// outside quotes) and says whether a quote is still open at its end.
func stripComment(s string) (string, bool) {
	var b strings.Builder
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else if ch == '\\' && quote == '"' && i+1 < len(s) {
				b.WriteByte(ch)
				i++
				ch = s[i]
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '\\' && i+1 < len(s):
			b.WriteByte(ch)
			i++
			ch = s[i]
		case ch == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t' || s[i-1] == '\n'):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				b.WriteByte('\n')
			}
			continue
		}
		b.WriteByte(ch)
	}
	return strings.TrimRight(b.String(), " \t"), quote != 0
}

// shellWords splits a simple command line into words, removing quotes. It
// knows no expansions: the commands it is used on have none.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else {
				cur.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == ' ' || ch == '\t' || ch == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// docFiles returns README.md, docs/*.md, the Markdown files of the
// packages (blobstore/README.md, node/DESIGN.md, ...) and of the examples,
// relative to the repository.
func docFiles(t *testing.T) []string {
	out := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "*/*.md", "examples/*/*.md"} {
		files, err := filepath.Glob(filepath.Join(docRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			f = filepath.ToSlash(strings.TrimPrefix(f, docRoot+"/"))
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// jepsenDocLine is the pattern of jepsen/cmd/jepsen's TestDocCommands for
// commands in code blocks.
var jepsenDocLine = regexp.MustCompile(`^ {4}go run \./jepsen/cmd/jepsen`)

// docPlan is every printed command and its fate.
type docPlan struct {
	commands  int
	walk      []docCommand // README walk-throughs: TestREADMEWalkThroughs
	jepsen    []docCommand // TestDocCommands
	notRun    []docCommand // docNotRunnable
	serveArgs []docCommand // checked by loadConfig, validate
	goCmds    []docCommand // checked go commands
	groups    map[int][]docCommand
	notCmd    map[string]int // reason -> blocks
}

func planDocCommands(t *testing.T) *docPlan {
	t.Helper()
	p := &docPlan{groups: map[int][]docCommand{}, notCmd: map[string]int{}}
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	walkBlocks := map[string]bool{}
	for _, h := range walkThroughSections {
		for _, b := range codeBlocks(t, string(raw), h) {
			walkBlocks[b] = true
		}
	}
	groupOf := map[string]int{} // file + "\x00" + first line -> group
	for gi, g := range docRunGroups {
		for _, first := range g.blocks {
			groupOf[g.file+"\x00"+first] = gi
		}
	}
	usedGroupBlocks := map[string]bool{}
	usedNotRun := map[string]bool{}
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(filepath.Join(docRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks := markdownBlocks(string(src), 1)
		for bi := range blocks {
			b := &blocks[bi]
			if why := docNotCommand(f, *b); why != "" {
				p.notCmd[why]++
				continue
			}
			first := strings.SplitN(b.text, "\n", 2)[0]
			gi, inGroup := groupOf[f+"\x00"+first]
			if inGroup {
				usedGroupBlocks[f+"\x00"+first] = true
			}
			for _, c := range splitCommands(f, b) {
				p.commands++
				words := strings.Fields(c.cmd)
				prog := strings.TrimPrefix(words[0], "./")
				switch {
				case f == "README.md" && walkBlocks[b.text]:
					p.walk = append(p.walk, c)
				case strings.HasPrefix(c.key(), "go run ./jepsen/cmd/jepsen"):
					if !jepsenDocLine.MatchString(b.raw[c.line-b.line]) {
						t.Errorf("%s: a jepsen command TestDocCommands does not see (it reads code lines indented by exactly four spaces)", c)
					}
					p.jepsen = append(p.jepsen, c)
				case docNotRunnable[c.key()] != "":
					usedNotRun[c.key()] = true
					p.notRun = append(p.notRun, c)
				case inGroup && (docRunPrograms[prog] || docRunGroups[gi].programs[prog] || docRunGroups[gi].actions[c.key()].do != nil ||
					docRunGroups[gi].goRun && strings.HasPrefix(c.key(), "go run ")):
					p.groups[gi] = append(p.groups[gi], c)
					if prog == "metastore" && len(words) > 1 && (words[1] == "serve" || words[1] == "rebuild") {
						p.serveArgs = append(p.serveArgs, c)
					}
				case prog == "metastore" && len(words) > 1 && (words[1] == "serve" || words[1] == "rebuild"):
					p.serveArgs = append(p.serveArgs, c)
				case isGoCommand(words):
					p.goCmds = append(p.goCmds, c)
				default:
					t.Errorf("%s: a printed command that is neither run, checked nor listed in docNotRunnable", c)
				}
			}
		}
	}
	for gi, g := range docRunGroups {
		for _, first := range g.blocks {
			if !usedGroupBlocks[g.file+"\x00"+first] {
				t.Errorf("docRunGroups[%d]: %s prints no block beginning %q any more", gi, g.file, first)
			}
		}
	}
	for k := range docNotRunnable {
		if !usedNotRun[k] {
			t.Errorf("docNotRunnable lists %q, which no document prints any more", k)
		}
	}
	return p
}

// isGoCommand says whether words are a go command, possibly after cd DIR &&
// and environment assignments.
func isGoCommand(words []string) bool {
	if len(words) > 3 && words[0] == "cd" && words[2] == "&&" {
		words = words[3:]
	}
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:]
	}
	return len(words) > 0 && words[0] == "go"
}

func TestDocsShellCommands(t *testing.T) {
	p := planDocCommands(t)
	if t.Failed() {
		t.FailNow()
	}
	ran, ranServe := 0, 0
	for _, cs := range p.groups {
		ran += len(cs)
		for _, c := range cs {
			if w := strings.Fields(c.cmd); strings.TrimPrefix(w[0], "./") == "metastore" && w[1] == "serve" {
				ranServe++
			}
		}
	}
	t.Logf("%d printed commands: %d run here (%d of them serve lines, also checked), %d more serve/rebuild lines and %d go commands checked, %d run by TestREADMEWalkThroughs, %d dry-run by jepsen's TestDocCommands, %d not runnable",
		p.commands, ran, ranServe, len(p.serveArgs)-ranServe, len(p.goCmds), len(p.walk), len(p.jepsen), len(p.notRun))
	var reasons []string
	for why, n := range p.notCmd {
		reasons = append(reasons, fmt.Sprintf("%d: %s", n, why))
	}
	sort.Strings(reasons)
	t.Logf("blocks that print no command: %s", strings.Join(reasons, "; "))
	for _, c := range p.notRun {
		t.Logf("not run: %s (%s)", c, docNotRunnable[c.key()])
	}
	if p.commands < 40 {
		t.Fatalf("found only %d printed commands: the extraction is broken", p.commands)
	}

	t.Run("serve", func(t *testing.T) {
		for _, c := range p.serveArgs {
			checkServeLine(t, c)
		}
	})
	t.Run("go", func(t *testing.T) {
		gc := &goChecker{t: t, dir: t.TempDir(), programs: map[string]*goProgram{}}
		for _, c := range p.goCmds {
			gc.check(c)
		}
	})
	for gi := range docRunGroups {
		g := &docRunGroups[gi]
		t.Run(fmt.Sprintf("%s:%d", g.file, p.groups[gi][0].line), func(t *testing.T) {
			runDocGroup(t, g, p.groups[gi])
		})
	}
}

// checkServeLine parses a printed serve or rebuild command line with serve's
// settings and validates the result, as the binary does before it starts.
// A trailing "..." (the member's other flags) is dropped.
func checkServeLine(t *testing.T, c docCommand) {
	t.Helper()
	words := shellWords(c.cmd)[2:]
	if n := len(words); n > 0 && words[n-1] == "..." {
		words = words[:n-1]
	}
	cfg, origin, err := loadConfig(words, noEnv, io.Discard)
	if err == nil {
		err = validate(&cfg, origin)
	}
	if err != nil {
		t.Errorf("%s: %v", c, err)
	}
}

// runDocGroup starts the group's node and runs its commands in order.
func runDocGroup(t *testing.T, g *docGroup, cmds []docCommand) {
	n := &docNode{dir: t.TempDir(), scheme: "http", procs: map[string]*docProc{}}
	n.proc = &clProc{id: "d1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(n.dir, "data")}
	copyFile(t, binary, filepath.Join(n.dir, "metastore"))
	if err := os.MkdirAll(filepath.Join(n.dir, "etc", "metastore"), 0o700); err != nil {
		t.Fatal(err)
	}
	baseArgs := []string{"serve", "--node-id", "d1", "--data-dir", n.proc.dataDir,
		"--http-addr", n.proc.httpAddr, "--raft-addr", n.proc.raftAddr}
	switch g.node {
	case "auth": // the group's serve line starts it
	case "readme":
		for _, addr := range readmePorts {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("README.md's three nodes use %s, which is taken: %v", addr, err)
			}
			l.Close()
		}
		if err := os.MkdirAll(filepath.Join(n.dir, "tmp"), 0o700); err != nil {
			t.Fatal(err)
		}
	case "readme-run-it":
		// "Against the store started above": README.md's "Run it" node.
		startRunIt(t, n)
	case "none": // an action starts it
	case "tls":
		certs := filepath.Join(n.dir, "certs")
		for _, args := range [][]string{
			{"certs", "ca", "--out", certs},
			{"certs", "member", "--ca-dir", certs, "--name", "d1", "--ip", "127.0.0.1", "--dns", "localhost"},
		} {
			if code, out, errOut := runBinary(t, n.dir, nil, args...); code != 0 {
				t.Fatalf("metastore %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
			}
		}
		n.scheme, n.caFile = "https", filepath.Join(certs, "ca.crt")
		startServe(t, n, n.proc, append(baseArgs, "--tls-cert-file", filepath.Join(certs, "d1.crt"),
			"--tls-key-file", filepath.Join(certs, "d1.key"), "--tls-ca-file", n.caFile))
	default:
		t.Fatalf("docGroup.node %q: the test knows auth, none, readme, readme-run-it and tls", g.node)
	}
	for _, s := range g.subst {
		t.Logf("substitution: %q -> %q (%s)", s.old, s.new(n, ""), s.why)
	}
	if g.before != nil {
		waitReady(t, n)
		g.before(t, n)
	}
	var exports []string
	var outputs strings.Builder
	var run func(c docCommand, printed string, top bool)
	run = func(c docCommand, printed string, top bool) {
		cmd := printed
		for _, s := range g.subst {
			cmd = strings.ReplaceAll(cmd, s.old, s.new(n, outputs.String()))
		}
		words := strings.Fields(cmd)
		switch {
		case g.actions[c.key()].do != nil:
			waitReady(t, n)
			g.actions[c.key()].do(t, n)
			t.Logf("did what %q says: %s", c.key(), g.actions[c.key()].why)
		case strings.TrimPrefix(words[0], "./") == "metastore" && words[1] == "serve":
			if strings.ContainsAny(cmd, `'"$\`) {
				t.Fatalf("%s: the test starts serve lines without a shell and cannot take quotes or expansions", c)
			}
			proc := n.proc
			if g.node != "auth" {
				proc = &clProc{id: flagValue(words, "--node-id"), httpAddr: flagValue(words, "--http-addr")}
			}
			startServe(t, n, proc, words[1:])
			t.Logf("started: %s", cmd)
		default:
			waitReady(t, n)
			if strings.HasPrefix(cmd, "export ") {
				exports = append(exports, cmd)
			}
			out, err := runDocShell(t, n, g, strings.Join(exports, "\n")+"\n"+cmd)
			outputs.WriteString(out)
			if err != nil {
				t.Fatalf("%s\n  ran: %s\n  failed: %v\n%s\n%s", c, cmd, err, out, n.logs())
			}
			t.Logf("ran %s\n%s", cmd, out)
		}
		if !top {
			return
		}
		for _, more := range g.then[c.key()] {
			t.Logf("what the prose after %q says: %s", c.key(), more)
			run(c, more, false)
		}
	}
	for _, c := range cmds {
		run(c, c.cmd, true)
	}
	waitReady(t, n)
	if g.check != nil {
		g.check(t, n)
	}
}

// startRunIt starts README.md's "Run it" node (./metastore serve, on the
// default addresses, in the group's directory) as TestREADMEWalkThroughs
// starts it. It skips when those addresses are taken.
func startRunIt(t *testing.T, n *docNode) {
	t.Helper()
	for _, addr := range readmePorts[:2] {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("README.md's node uses %s, which is taken: %v", addr, err)
		}
		l.Close()
	}
	p := &clProc{id: "run-it", httpAddr: readmePorts[0], workDir: n.dir}
	startServe(t, n, p, strings.Fields(readmeServe)[1:])
}

// readmePorts are the addresses of README.md's three (and four) nodes.
var readmePorts = []string{"127.0.0.1:7070", "127.0.0.1:7071", "127.0.0.1:7080", "127.0.0.1:7081",
	"127.0.0.1:7090", "127.0.0.1:7091", "127.0.0.1:7100", "127.0.0.1:7101"}

// docProc is a node a serve line started.
type docProc struct {
	p      *clProc
	url    string
	caFile string
}

func flagValue(words []string, name string) string {
	for i, w := range words {
		if w == name && i+1 < len(words) {
			return words[i+1]
		}
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v
		}
	}
	return ""
}

// startServe starts a node with args; a node of the same id that runs is
// stopped first (a reader stops it in its terminal before starting it
// again). waitReady waits for it.
func startServe(t *testing.T, n *docNode, p *clProc, args []string) {
	t.Helper()
	if old := n.procs[p.id]; old != nil && old.p.running() {
		if code := old.p.terminate(t); code != 0 {
			t.Fatalf("%s exited with status %d on SIGTERM\n%s", p.id, code, tail(old.p.stderr.String(), 4096))
		}
		t.Logf("stopped the running %s with SIGTERM before starting it again", p.id)
	}
	p.args = args
	p.start(t)
	t.Cleanup(func() {
		if code := p.terminate(t); code != 0 {
			t.Errorf("%s exited with status %d\n%s", p.id, code, tail(p.stderr.String(), 4096))
		}
	})
	dp := &docProc{p: p, url: "http://" + p.httpAddr, caFile: flagValue(args, "--tls-ca-file")}
	if dp.caFile != "" {
		dp.url = "https://" + p.httpAddr
	}
	n.procs[p.id] = dp
	n.pending = append(n.pending, dp)
}

// waitReady waits until every node started since the last call answers
// /readyz with 200.
func waitReady(t *testing.T, n *docNode) {
	t.Helper()
	for _, dp := range n.pending {
		hc := http.DefaultClient
		if dp.caFile != "" {
			hc = httpsClient(t, dp.caFile)
		}
		waitFor(t, 60*time.Second, func() error {
			if !dp.p.running() {
				t.Fatalf("%s exited: %v\n%s", dp.p.id, dp.p.err, n.logs())
			}
			resp, err := hc.Get(dp.url + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: /readyz answered %d", dp.p.id, resp.StatusCode)
			}
			return nil
		})
	}
	n.pending = nil
}

// logs returns the end of each node's log.
func (n *docNode) logs() string {
	var b strings.Builder
	ids := make([]string, 0, len(n.procs))
	for id := range n.procs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "--- %s log (last 4 KiB) ---\n%s\n", id, tail(n.procs[id].p.stderr.String(), 4096))
	}
	return b.String()
}

// docPreamble stops a script at its first failing command and, as
// TestREADMEWalkThroughs does, makes a curl that does not ask for -f itself
// fail on an HTTP error status (printing the answer).
const docPreamble = `set -euo pipefail
curl() {
	case " $* " in
	*" -f"* | *" --fail"*) command curl "$@" ;;
	*) command curl --fail-with-body "$@" ;;
	esac
	echo
}
`

// runDocShell runs script in bash in the group's directory, with the built
// binary on PATH, every curl failing on an HTTP error status (as in
// TestREADMEWalkThroughs) and the group's environment.
func runDocShell(t *testing.T, n *docNode, g *docGroup, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", docPreamble+script)
	sh.Dir = n.dir
	if strings.HasPrefix(script[strings.LastIndex(script, "\n")+1:], "go ") {
		// A go command, run where the reader runs it.
		root, err := filepath.Abs(docRoot)
		if err != nil {
			t.Fatal(err)
		}
		sh.Dir = root
	}
	env := cleanEnv("PATH=" + n.dir + string(os.PathListSeparator) + os.Getenv("PATH"))
	if g.env != nil {
		env = append(env, g.env(n)...)
	}
	sh.Env = env
	var out bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &out
	err := sh.Run()
	return out.String(), err
}
