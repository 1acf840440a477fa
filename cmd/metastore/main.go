// Command metastore runs a node of the metastore checkpoint metadata store
// and talks to running nodes.
//
//	metastore serve [flags]                 run a node (single-node store by default)
//	metastore rebuild [serve flags] --join  rebuild a damaged member from the others
//	metastore status [--addr URL] [--json]  show the node and cluster status
//	metastore members list|add|remove ...   show or change the Raft membership
//	metastore leader transfer               hand leadership to another voter
//	metastore jobs list|show|delete ...     jobs, their attempts and tasks
//	metastore checkpoints list|show ...     epochs of a job, one epoch's acks
//	metastore restore-plan JOB TASK         what a task restores, per kind
//	metastore gc status|run                 the garbage collector
//	metastore verify JOB | fsck             check blobs and reference counts
//	metastore snapshot save|restore FILE    back up and restore the whole state
//	metastore certs ca|member ...           make TLS certificates for a cluster
//	metastore epochs abort|pin|unpin ...    act on one epoch
//	metastore version                       print the version
//	metastore completion bash|zsh           print the shell completion script
//
// serve reads its settings from defaults, then METASTORE_* environment
// variables, then flags. The client commands reach a node at --addr
// (METASTORE_ADDR, default http://127.0.0.1:7070); every member answers
// them (writes and default reads are forwarded to the leader).
//
// Exit status: 0 on success (and after a clean shutdown), 1 when the command
// failed (verify, fsck and gc run also when they found a problem), 2 for a
// malformed command line or configuration.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/metastore/metastore/internal/buildinfo"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// version is set at link time with -ldflags "-X main.version=v1.2.3"; when
// it is not, the module version recorded by the go command is used.
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// command is one command of the binary: one word ("fsck") or a group and
// a subcommand ("jobs list").
type command struct {
	name string
	// args are the positional arguments, as shown in the usage; flags the
	// command's own flags, as shown in its synopsis.
	args, flags string
	summary     string
	// client commands talk to a node and take --addr, --json, --timeout.
	client bool
	run    func(inv *invocation, args []string) int
}

// synopsis is the command line of the command, without "metastore ".
func (c *command) synopsis() string {
	s := c.name
	for _, part := range []string{c.args, c.flags} {
		if part != "" {
			s += " " + part
		}
	}
	if c.client {
		s += " [--addr URL] [--json]"
	}
	return s
}

// invocation is one run of a command.
type invocation struct {
	cmd    *command
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// flags returns the command's flag set with the client flags.
func (inv *invocation) flags() (*flag.FlagSet, *clientOptions) {
	return newClientFlags(inv.cmd.name, inv.getenv)
}

// parse parses the command line; ok is false when the command must stop
// with the returned status (usage error, or -h).
func (inv *invocation) parse(fs *flag.FlagSet, args []string, wantArgs int) ([]string, int, bool) {
	return parseClientArgs(fs, args, inv.cmd.synopsis(), wantArgs, inv.stdout, inv.stderr)
}

// usageError prints a one-line usage error and returns exitUsage.
func (inv *invocation) badUsage(format string, args ...any) int {
	fmt.Fprintf(inv.stderr, "metastore: %s: %s (usage: metastore %s)\n", inv.cmd.name, fmt.Sprintf(format, args...), inv.cmd.synopsis())
	return exitUsage
}

// fail prints err as one line and returns exitFailure.
func (inv *invocation) fail(err error) int { return reportClientError(inv.stderr, err) }

// commands lists every command, in the order of the usage.
var commands = []*command{
	{name: "serve", flags: "[flags]", summary: "run a node (with no flags: a single-node store in ./metastore-data, HTTP API on 127.0.0.1:7070)",
		run: func(inv *invocation, args []string) int { return runServe(args, inv.stdout, inv.stderr, inv.getenv) }},
	{name: "rebuild", flags: "[serve flags] --join HOST:PORT,...", summary: "move a damaged member's data aside, remove it from the cluster, rejoin and receive the state by snapshot, then serve",
		run: func(inv *invocation, args []string) int { return runRebuild(args, inv.stdout, inv.stderr, inv.getenv) }},
	{name: "status", client: true, summary: "show the status of a node and its view of the cluster", run: runStatus},
	{name: "members list", client: true, summary: "list the members of the cluster", run: runMembersList},
	{name: "members add", args: "ID", flags: "--raft-addr HOST:PORT --http-addr HOST:PORT", client: true, summary: "add a voting member (--raft-addr, --http-addr)", run: runMembersAdd},
	{name: "members remove", args: "ID", client: true, summary: "remove a member", run: runMembersRemove},
	{name: "leader transfer", client: true, summary: "hand leadership to another voter", run: runLeaderTransfer},
	{name: "jobs list", client: true, summary: "list jobs: generation, epochs, pending and retained checkpoints", run: runJobsList},
	{name: "jobs show", args: "JOB", client: true, summary: "show a job with its current attempt, tasks and capabilities", run: runJobsShow},
	{name: "jobs delete", args: "JOB", flags: "[--force]", client: true, summary: "delete a job and release its blobs (--force: even with pinned savepoints)", run: runJobsDelete},
	{name: "checkpoints list", args: "JOB", flags: "[--state pending|completed|aborted|subsumed]", client: true, summary: "list the epochs of a job (--state filters)", run: runCheckpointsList},
	{name: "checkpoints show", args: "JOB EPOCH", client: true, summary: "show an epoch: per-task ack delay and sizes, stragglers, duration", run: runCheckpointsShow},
	{name: "restore-plan", args: "JOB TASK", flags: "[--epoch N | --pin NAME] [--source-job JOB] [--source-task TASK]", client: true, summary: "what TASK restores, per kind, and the object-store reads it costs", run: runRestorePlan},
	{name: "epochs abort", args: "JOB EPOCH", flags: "[--reason TEXT] [--generation N]", client: true, summary: "abort a pending epoch (of the current attempt unless --generation)", run: runEpochsAbort},
	{name: "epochs pin", args: "JOB EPOCH", flags: "[--name NAME]", client: true, summary: "pin a completed epoch as a savepoint", run: runEpochsPin},
	{name: "epochs unpin", args: "JOB EPOCH", client: true, summary: "release a savepoint", run: runEpochsUnpin},
	{name: "gc status", client: true, summary: "show the garbage collector: candidates, deleting, last run, totals", run: runGCStatus},
	{name: "gc run", flags: "[--dry-run] [--orphans]", client: true, summary: "run a collection cycle now (--dry-run: only report; --orphans: sweep orphans too)", run: runGCRun},
	{name: "verify", args: "JOB", client: true, summary: "check that every blob of JOB's retained and pinned checkpoints exists, unchanged since its ack (exit 1 if not)", run: runVerify},
	{name: "fsck", client: true, summary: "recount every blob reference count (exit 1 on any mismatch)", run: runFsck},
	{name: "snapshot save", args: "FILE", client: true, summary: "save a backup of the whole replicated state to FILE", run: runSnapshotSave},
	{name: "snapshot restore", args: "FILE", flags: "[--yes]", client: true, summary: "replace the cluster's whole state with the backup in FILE", run: runSnapshotRestore},
	{name: "tokens create", flags: "--role operator|worker [--job JOB | --job-prefix PREFIX] [--description TEXT]", client: true, summary: "create an API token and print its secret (shown only once)", run: runTokensCreate},
	{name: "tokens list", client: true, summary: "list API tokens (accessor, role, scope; never the secrets)", run: runTokensList},
	{name: "tokens revoke", args: "ACCESSOR", flags: "[--force]", client: true, summary: "revoke an API token (--force: even the last operator token)", run: runTokensRevoke},
	{name: "tokens generate", summary: "print a new token secret, e.g. for --auth-bootstrap-token-file (talks to no node)", run: runTokensGenerate},
	{name: "certs ca", flags: "--out DIR [--validity 3650d] [--force]", summary: "make a cluster CA: DIR/ca.crt and DIR/ca.key", run: runCertsCA},
	{name: "certs member", flags: "--ca-dir DIR --name NAME [--ip IP,...] [--dns NAME,...] [--out DIR] [--validity 365d] [--force]", summary: "make a member certificate signed by the CA in --ca-dir: NAME.crt and NAME.key", run: runCertsMember},
	{name: "version", summary: "print the version", run: runVersion},
	{name: "completion", args: "bash|zsh", summary: "print the shell completion script (bash: source <(metastore completion bash))", run: runCompletion},
	{name: "help", summary: "show this help"}, // run handles it: printUsage reads this table
}

// run executes one command line and returns the exit status. getenv reads
// the environment.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	globals, args, err := leadingFlags(args, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "metastore: %v (run 'metastore help')\n", err)
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "metastore: %s: want a command after the flags (run 'metastore help')\n", strings.Join(globals, " "))
		return exitUsage
	}
	word, rest := args[0], args[1:]
	// dispatch runs a command with the flags given before it: client flags
	// are the same wherever they stand.
	dispatch := func(c *command, args []string) int {
		if len(globals) > 0 {
			if !c.client {
				fmt.Fprintf(stderr, "metastore: %s: %s is a client flag, and %s talks to no node\n", c.name, globals[0], c.name)
				return exitUsage
			}
			args = append(append([]string(nil), globals...), args...)
		}
		return c.run(&invocation{cmd: c, stdout: stdout, stderr: stderr, getenv: getenv}, args)
	}
	switch word {
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	case "__complete": // the completion scripts' callback (completion.go)
		return runComplete(stdout, rest, getenv)
	}
	var group []*command
	for _, c := range commands {
		if c.name == word {
			return dispatch(c, rest)
		}
		if first, _, _ := strings.Cut(c.name, " "); first == word {
			group = append(group, c)
		}
	}
	if len(group) == 0 {
		fmt.Fprintf(stderr, "metastore: unknown command %q (run 'metastore help')\n", word)
		return exitUsage
	}
	var subs []string
	for _, c := range group {
		subs = append(subs, strings.TrimPrefix(c.name, word+" "))
	}
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "metastore: %s: want a subcommand: %s (run 'metastore %s -h')\n", word, joinOr(subs), word)
		return exitUsage
	}
	switch rest[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "Usage:")
		for _, c := range group {
			fmt.Fprintf(stdout, "  metastore %s\n", c.synopsis())
		}
		return exitOK
	}
	for i, c := range group {
		if subs[i] == rest[0] {
			return dispatch(c, rest[1:])
		}
	}
	fmt.Fprintf(stderr, "metastore: %s: unknown subcommand %q (want %s)\n", word, rest[0], joinOr(subs))
	return exitUsage
}

// leadingFlags splits the client flags that stand before the command
// ("metastore --addr X checkpoints list J") from the command line. It
// knows the client flags (newClientFlags) to tell a flag that takes a
// value from a boolean one; a flag that is not a client flag is an error.
func leadingFlags(args []string, getenv func(string) string) (flags, rest []string, err error) {
	fs, _ := newClientFlags("metastore", getenv)
	for len(args) > 0 {
		a := args[0]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "h", "help":
			return flags, args, nil
		}
		f := fs.Lookup(name)
		if f == nil {
			return nil, nil, fmt.Errorf("unknown flag %q before the command (the flags a command takes go after it; before it, only client flags such as --addr, --json, --timeout)", a)
		}
		n := 2
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || ok && b.IsBoolFlag() {
			n = 1
		}
		if len(args) < n {
			return nil, nil, fmt.Errorf("flag %s needs a value", a)
		}
		flags, args = append(flags, args[:n]...), args[n:]
	}
	return flags, args, nil
}

// joinOr joins words as "a, b or c".
func joinOr(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: metastore <command> [flags]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		name := c.name
		if c.args != "" {
			name += " " + c.args
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, c.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, `
Client commands ask the node at --addr (%s, default %s); any member
answers. They print tables; --json prints the API's answer instead. --timeout
bounds the wait (default %s; %s for snapshot save and restore). A cluster
served over https is reached with --ca-file (%s), the CA bundle its
certificates chain to.

Run 'metastore <command> -h' for the flags of a command.
`, envName("addr"), defaultAddr, defaultTimeout, streamTimeout, envName("ca-file"))
}

func runServe(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, origin, err := loadConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "metastore: serve: %v (run 'metastore serve -h')\n", err)
		return exitUsage
	}
	if err == nil {
		err = validate(&cfg, origin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "metastore: %v\n", err)
		return exitUsage
	}
	return serve(cfg, stderr)
}

func runVersion(inv *invocation, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(inv.stderr, "metastore: version takes no arguments\n")
		return exitUsage
	}
	info := buildinfo.Read(version)
	fmt.Fprintf(inv.stdout, "metastore %s (%s, %s/%s)\n", info.Version, info.GoVersion, runtime.GOOS, runtime.GOARCH)
	if info.Revision != "" {
		modified := ""
		if info.Modified {
			modified = ", modified"
		}
		fmt.Fprintf(inv.stdout, "revision %s (%s%s)\n", info.Revision, info.Time, modified)
	} else {
		fmt.Fprintf(inv.stdout, "revision unknown (not recorded at build time)\n")
	}
	return exitOK
}

// buildVersion is the release: set at link time, else the module version,
// else "devel".
func buildVersion() string { return buildinfo.Read(version).Version }
