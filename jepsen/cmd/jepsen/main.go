// Command jepsen runs the metastore consistency suite: real metastore
// processes in network namespaces, real faults, checked histories.
//
//	go run ./jepsen/cmd/jepsen short                       # the CI tier: twelve scenarios
//	go run ./jepsen/cmd/jepsen long --count 30 --duration 60s
//	go run ./jepsen/cmd/jepsen run --fault kill-leader --duration 30s
//	go run ./jepsen/cmd/jepsen faults                      # list the faults
//	go run ./jepsen/cmd/jepsen control gc-skip-mark         # a positive control: must fire
//
// Each scenario prints its fault, the operations done (ok, fail, unknown)
// and every checker's verdict; the last line is "scenarios: N passed, M
// failed". The exit status is 0 when every scenario passed, 1 when one
// failed, 2 when the suite cannot run here (it needs root and ip netns) or
// the command line is wrong. A failed scenario keeps its history (JSON),
// final state, node logs, S3 request log and the linearizability
// visualization in a folder under --out, printed in its report.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/nemesis"
	"github.com/metastore/metastore/jepsen/runner"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: jepsen short|long|run|faults|control [flags]

  short                         the short tier (CI): twelve scenarios of 30s, faults overlapping
  long --count N --duration D   N scenarios of duration D, round the whole fault catalog
  run --fault NAME[,NAME...]    one scenario with the named faults (none: no fault)
  faults                        list the faults
  control NAME[,NAME...]|all    positive controls: each must make its checker fail (exit 0 when all fire)

flags:
`)
	flag.PrintDefaults()
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	count := fs.Int("count", 30, "long: number of scenarios")
	duration := fs.Duration("duration", 0, "workload duration of each scenario (default: 30s short and run, 60s long)")
	faults := fs.String("fault", "", "run: comma-separated fault names")
	out := fs.String("out", "jepsen-results", "folder for the artifacts of failed scenarios")
	verbose := fs.Bool("v", false, "print progress of the cluster and the nemesis")
	race := fs.Bool("race", false, "build the members with the race detector")
	jobs := fs.Int("jobs", 3, "jobs of the workload")
	sameRef := fs.Bool("reuse-same-ref", false, "re-add the very segment a task dropped when it references a blob again (reproduces a known state-machine panic)")
	reuseProb := fs.Float64("reuse-prob", 0, "chance per ack of a state task that it references again a blob the store records as a GC candidate (default 0.25)")
	reuseHold := fs.Duration("reuse-hold", 0, "how long a task keeps a blob it referenced again before it materializes or drops a segment")
	gcInterval := fs.Duration("gc-interval", 0, "the members' GC cycle interval (default 2s)")
	lossyDisk := fs.Bool("lossy-disk", false, "put the members' data directories on lossy disks (jepsen/lossyfs) in every scenario")
	reuseWindow := fs.Duration("reuse-window", 0, "spread of the ages at which a blob is referenced again past the grace period, beyond the GC interval (default 1s: the GC control's window)")
	gcBatch := fs.Int("gc-batch", 0, "the members' GC batch size (default 100)")
	keepAll := fs.Bool("keep", false, "keep the artifacts of passed scenarios too")
	keepData := fs.Bool("keep-data", false, "keep the members' data directories of scenarios whose artifacts are kept")
	dryRun := fs.Bool("dry-run", false, "print the scenarios the command would run, and run nothing")
	healthTimeout := fs.Duration("health-timeout", 0, "run: how long the nemesis waits for the cluster to be healthy after each heal (default 90s)")
	firstFault := fs.Duration("first-fault", 0, "run: when the first fault is injected, from the workload's start (default 1s)")
	var env multi
	fs.Var(&env, "env", "KEY=VALUE added to every member's environment (repeatable), e.g. METASTORE_UNSAFE_STALE_READS=1")
	flag.CommandLine = fs
	args := os.Args[2:]
	var controls []runner.Control
	if cmd == "control" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintln(os.Stderr, "jepsen: control needs a name (or all):", controlNames())
			os.Exit(2)
		}
		for _, name := range strings.Split(args[0], ",") {
			if name == "all" {
				controls = append(controls, runner.Controls()...)
				continue
			}
			c, err := runner.ControlNamed(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "jepsen:", err)
				os.Exit(2)
			}
			controls = append(controls, c)
		}
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}

	var scenarios []runner.Scenario
	switch cmd {
	case "faults":
		for _, f := range nemesis.Catalog() {
			fmt.Println(f.Name())
		}
		return
	case "short":
		scenarios = runner.ShortTier()
		if *duration > 0 {
			for i := range scenarios {
				scenarios[i].Duration = *duration
			}
		}
	case "long":
		d := *duration
		if d == 0 {
			d = 60 * time.Second
		}
		if *count < 1 {
			fmt.Fprintln(os.Stderr, "jepsen: --count must be at least 1")
			os.Exit(2)
		}
		scenarios = runner.LongTier(*count, d)
	case "run":
		d := *duration
		if d == 0 {
			d = 30 * time.Second
		}
		sc := runner.Scenario{Name: "no-fault", Duration: d, HealthTimeout: *healthTimeout, FirstFault: *firstFault}
		if *faults != "" {
			sc.Name = *faults
			for _, name := range strings.Split(*faults, ",") {
				f, err := runner.Fault(strings.TrimSpace(name))
				if err != nil {
					fmt.Fprintln(os.Stderr, "jepsen:", err)
					os.Exit(2)
				}
				sc.Faults = append(sc.Faults, f)
			}
		}
		scenarios = []runner.Scenario{sc}
	case "control":
		for _, c := range controls {
			scenarios = append(scenarios, c.Scenario)
		}
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}

	if *dryRun {
		for _, sc := range scenarios {
			var names []string
			for _, mk := range sc.Faults {
				names = append(names, mk().Name())
			}
			fmt.Printf("%s: %s, faults %v, env %v\n", sc.Name, sc.Duration, names, env)
		}
		return
	}
	if err := cluster.Supported(); err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: cannot run here: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := runner.New(ctx, runner.Options{OutDir: *out, Verbose: *verbose, Race: *race, Env: env, Jobs: *jobs, ReuseSameRef: *sameRef, ReuseProb: *reuseProb, ReuseHold: *reuseHold, ReuseWindow: *reuseWindow, GCInterval: *gcInterval, GCBatch: *gcBatch, LossyDisk: *lossyDisk, KeepAll: *keepAll, KeepData: *keepData})
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		os.Exit(2)
	}
	defer r.Close()
	start := time.Now()
	if cmd == "control" {
		os.Exit(runControls(ctx, r, controls, start))
	}
	results := r.RunTier(ctx, scenarios)
	fmt.Printf("total time %s\n", time.Since(start).Round(time.Second))
	for _, res := range results {
		if !res.Passed() {
			r.Close()
			os.Exit(1)
		}
	}
	if len(results) < len(scenarios) {
		r.Close()
		os.Exit(1)
	}
}

// runControls runs each control and reports whether it fired; it returns
// the exit status: 0 when every control fired, 1 when one did not.
func runControls(ctx context.Context, r *runner.Runner, controls []runner.Control, start time.Time) int {
	defer r.Close()
	missed := 0
	for _, c := range controls {
		res := r.Run(ctx, c.Scenario)
		r.Report(res)
		if fired, why := c.Fired(res); fired {
			fmt.Printf("control %s (%s): FIRED\n", c.Name, c.Breaks)
		} else {
			missed++
			fmt.Printf("control %s (%s): DID NOT FIRE: %s\n", c.Name, c.Breaks, why)
		}
	}
	fmt.Printf("controls: %d fired, %d did not; total time %s\n", len(controls)-missed, missed, time.Since(start).Round(time.Second))
	if missed > 0 {
		return 1
	}
	return 0
}

func controlNames() string {
	var names []string
	for _, c := range runner.Controls() {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
