// Command bench measures the metastore against the stores users would
// otherwise keep checkpoint metadata in, etcd and ZooKeeper: each started
// in turn as a three-member cluster on loopback with durable writes, and
// driven through the same checkpoint cycle (see internal/workload). Each
// peer is driven in the designs its careful users would build: "etcd" and
// "zookeeper" the lean one (an ack is one transaction fenced by the job's
// generation, no record shared between a job's tasks, completion written
// by the coordinator watching the acks), "etcd-batched" the lean one with
// the acks made while others are in flight sent together in one
// transaction of per-ack guarded transactions (as the metastore's client
// batches them), "etcd-cas" and "zookeeper-cas" a compare-and-swap on the
// epoch record the tasks share. The metastore is judged against the best
// variant of each peer.
//
//	go -C bench run .                                  # the full run
//	go -C bench run . --smoke --out /tmp/bench-smoke   # seconds per system, tiny sizes (CI)
//	go -C bench run . --systems metastore,etcd --concurrency 16,64 --duration 30s
//
// It writes into --out (default bench-results/<timestamp>): results.json
// (every figure, the machine, the parameters), results.txt (the table it
// also prints: per workload one row per system, the metastore's figures
// over each peer's, the goals with PASS or MISS) and the charts
// throughput.svg, latency_p99.svg and manifest.svg. Progress goes to
// standard error.
//
// A peer whose server is missing is installed from its Debian package when
// the command runs as root; otherwise the command stops, naming the
// package. SIGINT or SIGTERM stops the systems and writes what was
// measured. The exit status is 0 when every workload ran on every system,
// 1 when one failed, 2 for a wrong command line or a system that cannot
// run here, 130 when interrupted.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/bench/internal/workload"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// config is the parsed command line.
type config struct {
	systems []string
	out     string
	dataDir string
	keep    bool
	smoke   bool
	params  workload.Params
	// metastoreFlags are added to every metastore member's serve command.
	metastoreFlags []string
	// report names a results.json to render again instead of running.
	report string
}

// parseFlags parses args. With --smoke the defaults are those of
// workload.SmokeParams; flags given explicitly win either way.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg, smoke, err := parseWith(args, workload.DefaultParams(), stderr)
	if err != nil || !smoke {
		return cfg, err
	}
	return cfgOrErr(parseWith(args, workload.SmokeParams(), io.Discard))
}

func cfgOrErr(cfg config, _ bool, err error) (config, error) { return cfg, err }

// parseWith parses args over the defaults d, and reports whether --smoke
// was given.
func parseWith(args []string, d workload.Params, stderr io.Writer) (config, bool, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go -C bench run . [flags]\n\nMeasures the metastore against etcd and ZooKeeper; see the package documentation.\n\nflags:\n")
		fs.PrintDefaults()
	}
	cfg := config{params: d}
	p := &cfg.params
	systems := listFlag(systemNames)
	workloads := listFlag(d.Workloads)
	concurrency := intsFlag(d.Concurrency)
	sizes := intsFlag(d.ManifestSizes)
	fs.Var(&systems, "systems", "comma-separated systems to measure, in this order; also known: "+strings.Join(extraSystemNames, ",")+" (the metastore with every ack sent alone)")
	fs.Var(&workloads, "workloads", "comma-separated workloads to run: "+strings.Join(workload.All, ","))
	fs.StringVar(&cfg.out, "out", "", "folder for results.json, results.txt and the charts (default bench-results/<timestamp>)")
	fs.StringVar(&cfg.dataDir, "data", "", "folder for the systems' data directories (default: a new temporary folder)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the systems' data directories")
	fs.StringVar(&cfg.report, "report", "", "render results.txt, the charts and the goals again from the results.json of an earlier run, judged by this build, into --out (default: that file's folder); runs nothing")
	fs.Func("metastore-flag", "a flag for every metastore member's serve command, e.g. --metastore-flag=--apply-batch=1 (repeatable)", func(v string) error {
		if !strings.HasPrefix(v, "-") {
			return fmt.Errorf("%q is not a flag", v)
		}
		cfg.metastoreFlags = append(cfg.metastoreFlags, v)
		return nil
	})
	fs.BoolVar(&cfg.smoke, "smoke", false, "tiny sizes and short windows, seconds per system (for CI); other flags still apply")
	fs.DurationVar(&p.Duration, "duration", d.Duration, "measured window of each throughput point")
	fs.DurationVar(&p.Warmup, "warmup", d.Warmup, "unmeasured run before each throughput window")
	fs.Var(&concurrency, "concurrency", "comma-separated worker counts of the throughput sweep")
	fs.IntVar(&p.TasksPerJob, "tasks-per-job", d.TasksPerJob, "tasks per job of a throughput point: W workers run max(1, W/tasks-per-job) jobs")
	fs.IntVar(&p.SegmentsPerAck, "segments-per-ack", d.SegmentsPerAck, "segments each ack adds")
	fs.IntVar(&p.KeyBatch, "key-batch", d.KeyBatch, "blob keys a worker fetches per Keys call")
	fs.Var(&sizes, "manifest-sizes", "comma-separated manifest sizes (segments) of the manifest-cost workload; the largest is read by restore")
	fs.IntVar(&p.ManifestAcks, "manifest-acks", d.ManifestAcks, "acks measured at each manifest size")
	fs.IntVar(&p.RestoreReads, "restore-reads", d.RestoreReads, "measured manifest reads per consistency (leader, follower)")
	fs.IntVar(&p.FailoverKills, "failover-kills", d.FailoverKills, "leader kills of the failover workload")
	fs.DurationVar(&p.FailoverCallTimeout, "failover-call-timeout", d.FailoverCallTimeout, "bound of each ack attempt after a leader kill")
	fs.IntVar(&p.GCObjects, "gc-objects", d.GCObjects, "objects the metastore's GC workload deletes")
	fs.IntVar(&p.ResumeTasks, "resume-tasks", d.ResumeTasks, "tasks of the metastore's resume workload")
	fs.IntVar(&p.ResumeStateful, "resume-stateful", d.ResumeStateful, "stateful tasks of the resume workload")
	fs.IntVar(&p.FootprintBlobs, "footprint-blobs", d.FootprintBlobs, "live blobs of the metastore's footprint workload")
	fs.IntVar(&p.FootprintJobs, "footprint-jobs", d.FootprintJobs, "jobs the footprint's blobs are spread over")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg.systems, p.Workloads, p.Concurrency, p.ManifestSizes = systems, workloads, concurrency, sizes
	if len(cfg.systems) == 0 {
		return cfg, false, errors.New("--systems names no system")
	}
	for i, s := range cfg.systems {
		if !slices.Contains(systemNames, s) && !slices.Contains(extraSystemNames, s) {
			return cfg, false, fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(slices.Concat(systemNames, extraSystemNames), ","))
		}
		if slices.Contains(cfg.systems[:i], s) {
			return cfg, false, fmt.Errorf("system %q named twice", s)
		}
	}
	if err := p.Validate(); err != nil {
		return cfg, false, err
	}
	return cfg, cfg.smoke, nil
}

// run is the command: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	if cfg.report != "" {
		return rerender(cfg, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(stderr, "bench: ", log.Ltime)

	systems, err := newSystems(ctx, cfg.systems, systemOptions{Log: logger, MetastoreFlags: cfg.metastoreFlags})
	if err != nil {
		fmt.Fprintf(stderr, "bench: cannot run here:\n%v\n", err)
		return exitUsage
	}
	started := time.Now()
	if cfg.out == "" {
		cfg.out = filepath.Join("bench-results", started.Format("20060102-150405"))
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	dataRoot, cleanup, err := dataFolder(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	defer cleanup()

	params := cfg.params.Record()
	params.Systems, params.Smoke, params.DataDir, params.Keep = cfg.systems, cfg.smoke, dataRoot, cfg.keep
	params.MetastoreFlags = cfg.metastoreFlags
	res := &report.Results{Started: started, Revision: revision(ctx), Machine: report.DetectMachine(), Params: params}
	logger.Printf("results into %s, data under %s", cfg.out, dataRoot)
	for _, sys := range systems {
		if ctx.Err() != nil {
			break
		}
		res.Systems = append(res.Systems, runSystem(ctx, sys, filepath.Join(dataRoot, sys.Name()), cfg, logger))
	}
	res.Interrupted = ctx.Err() != nil
	res.Finished = time.Now()
	report.Finalize(res)

	status := exitOK
	if _, err := report.WriteAll(cfg.out, res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		status = exitFailed
	}
	if err := report.WriteTable(stdout, res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		status = exitFailed
	}
	fmt.Fprintf(stdout, "\nresults: %s\n", cfg.out)
	if cfg.keep {
		fmt.Fprintf(stdout, "data kept: %s\n", dataRoot)
	}
	for _, s := range res.Systems {
		if len(s.Errors) > 0 {
			status = exitFailed
		}
	}
	if res.Interrupted {
		status = exitInterrupted
	}
	return status
}

// rerender writes the report of an earlier run's results.json again, its
// ratios and goals computed by this build.
func rerender(cfg config, stdout, stderr io.Writer) int {
	res, err := report.ReadJSON(cfg.report)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	if cfg.out == "" {
		cfg.out = filepath.Dir(cfg.report)
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	report.Finalize(res)
	if _, err := report.WriteAll(cfg.out, res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitFailed
	}
	if err := report.WriteTable(stdout, res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "\nresults: %s\n", cfg.out)
	return exitOK
}

// dataFolder returns the folder for the systems' data and the function
// that removes what the run made there unless --keep.
func dataFolder(cfg config) (string, func(), error) {
	if cfg.dataDir == "" {
		dir, err := os.MkdirTemp("", "metastore-bench-")
		if err != nil {
			return "", nil, fmt.Errorf("data folder: %w", err)
		}
		return dir, func() {
			if !cfg.keep {
				os.RemoveAll(dir)
			}
		}, nil
	}
	if err := os.MkdirAll(cfg.dataDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("data folder: %w", err)
	}
	abs, err := filepath.Abs(cfg.dataDir)
	if err != nil {
		return "", nil, fmt.Errorf("data folder: %w", err)
	}
	// Only the systems' folders are removed: the folder may hold others.
	return abs, func() {}, nil
}

// runSystem starts sys with its data in dir, runs the workloads and stops
// it (also when interrupted), removing dir unless --keep.
func runSystem(ctx context.Context, sys sut.System, dir string, cfg config, logger *log.Logger) report.System {
	name := sys.Name()
	defer func() {
		if err := sys.Stop(); err != nil {
			logger.Printf("%s: stop: %v", name, err)
		}
		if !cfg.keep {
			if err := os.RemoveAll(dir); err != nil {
				logger.Printf("%s: remove data: %v", name, err)
			}
		}
	}()
	if err := os.RemoveAll(dir); err != nil {
		return report.System{Name: name, Errors: []report.WorkloadError{{Workload: "start", Error: err.Error()}}}
	}
	logger.Printf("%s: starting three members under %s", name, dir)
	t0 := time.Now()
	if err := sys.Start(ctx, dir); err != nil {
		logger.Printf("%s: start failed: %v", name, err)
		return report.System{Name: name, Started: t0, Finished: time.Now(), Errors: []report.WorkloadError{{Workload: "start", Error: err.Error()}}}
	}
	logger.Printf("%s: started in %s", name, time.Since(t0).Round(time.Millisecond))
	res := workload.Run(ctx, sys, cfg.params, logger)
	res.Started, res.Finished = t0, time.Now()
	logger.Printf("%s: done in %s", name, time.Since(t0).Round(time.Second))
	return res
}

// revision returns the git commit of the tree the command runs in, with
// "-dirty" when it has changes, or "" when git cannot tell.
func revision(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(bytes.TrimSpace(status)) > 0 {
		rev += "-dirty"
	}
	return rev
}

// listFlag is a comma-separated list of names.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// intsFlag is a comma-separated list of positive integers.
type intsFlag []int

func (l *intsFlag) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intsFlag) Set(v string) error {
	var out []int
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return errors.New("empty list")
	}
	*l = out
	return nil
}
