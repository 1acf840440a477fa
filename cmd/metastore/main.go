// Command metastore runs a node of the metastore checkpoint metadata store
// and talks to running nodes.
//
//	metastore serve [flags]                 run a node (single-node store by default)
//	metastore status [--addr URL] [--json]  show the node and cluster status
//	metastore members list|add|remove ...   show or change the Raft membership
//	metastore version                       print the version
//
// serve reads its settings from defaults, then METASTORE_* environment
// variables, then flags. The client commands reach a node at --addr
// (METASTORE_ADDR, default http://127.0.0.1:7070).
//
// Exit status: 0 on success (and after a clean shutdown), 1 when the command
// failed, 2 for a malformed command line or configuration.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
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

// run executes one command line and returns the exit status. getenv reads
// the environment.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(rest, stdout, stderr, getenv)
	case "status":
		return runStatus(rest, stdout, stderr, getenv)
	case "members":
		return runMembers(rest, stdout, stderr, getenv)
	case "version":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "metastore: version takes no arguments\n")
			return exitUsage
		}
		fmt.Fprintf(stdout, "metastore %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "metastore: unknown command %q (run 'metastore help')\n", cmd)
		return exitUsage
	}
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: metastore <command> [flags]

Commands:
  serve                  run a node (with no flags: a single-node store in ./metastore-data,
                         HTTP API on 127.0.0.1:7070)
  status                 show the status of a node and its view of the cluster
  members list           list the members of the cluster
  members add ID         add a voting member (--raft-addr, --http-addr)
  members remove ID      remove a member
  version                print the version

Run 'metastore <command> -h' for the flags of a command.
`)
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

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
