// Command streamjob is a small simulated streaming job that checkpoints
// through metastore with the Go client: two sources that checkpoint their
// offsets inline, a stateless map, two aggregations whose state is an
// incremental changelog of blobs with a materialization every ten epochs,
// and a transactional sink.
//
//	go run ./examples/streamjob --addr http://127.0.0.1:7070 run --epochs 30
//	go run ./examples/streamjob --addr http://127.0.0.1:7070 resume --epochs 10 --topology changed
//
// run creates the job (retaining 2 checkpoints) if needed, starts an
// attempt, checkpoints the epochs, then dies without cleanup in the middle
// of the next one, as a crashed worker would. resume starts a new attempt,
// restores every task from the latest completed checkpoint, checks what it
// restored against what the job checkpointed, and carries on. See README.md
// in this directory.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

const usage = `usage: streamjob [--addr URL[,URL...]] [--ca-file FILE] [--job ID] [--verbose] COMMAND [flags]

commands:
  run      create the job if needed, start an attempt, checkpoint --epochs
           epochs, then crash in the middle of the next one
  resume   start a new attempt (--topology same|changed), restore every task
           from the latest completed checkpoint, verify it, checkpoint
           --epochs more epochs
`

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

// exitCrash is run's exit: the simulated crash is the expected end of the
// run, so the status is 0.
var exitCrash = func(code int) { os.Exit(code) }

func mainErr(args []string, stdout, stderr io.Writer) int {
	g := flag.NewFlagSet("streamjob", flag.ContinueOnError)
	g.SetOutput(stderr)
	g.Usage = func() { fmt.Fprint(stderr, usage); g.PrintDefaults() }
	addrDefault := "http://127.0.0.1:7070"
	if v := os.Getenv("METASTORE_ADDR"); v != "" {
		addrDefault = v
	}
	addr := g.String("addr", addrDefault, "comma-separated HTTP addresses of metastore members [METASTORE_ADDR]")
	job := g.String("job", "demo", "job id")
	verbose := g.Bool("verbose", false, "log the client's retries and endpoint changes to stderr")
	token := g.String("token", os.Getenv("METASTORE_TOKEN"), "API token (a worker token for the job) when the cluster runs with --auth [METASTORE_TOKEN]")
	tokenFile := g.String("token-file", os.Getenv("METASTORE_TOKEN_FILE"), "file holding the API token [METASTORE_TOKEN_FILE]")
	caFile := g.String("ca-file", os.Getenv("METASTORE_CA_FILE"), "PEM CA bundle of a cluster served over https (bare host:port addresses then mean https) [METASTORE_CA_FILE]")
	if err := g.Parse(args); err != nil {
		return 2
	}
	if g.NArg() == 0 {
		g.Usage()
		return 2
	}
	cmd, rest := g.Arg(0), g.Args()[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	epochs := fs.Uint64("epochs", 30, "epochs to checkpoint")
	interval := fs.Duration("interval", 0, "time between epochs (to watch it, or to press Ctrl-C)")
	attemptID := fs.String("attempt-id", "", "attempt id (default: "+cmd+"-<time>)")
	topology := "same"
	if cmd == "resume" {
		fs.Lookup("epochs").DefValue = "10"
		*epochs = 10
		fs.StringVar(&topology, "topology", "same", "task set of the new attempt: same, or changed (agg-1 removed, agg-2 added)")
	} else if cmd != "run" {
		fmt.Fprintf(stderr, "streamjob: unknown command %q\n", cmd)
		g.Usage()
		return 2
	}
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if _, ok := topologies[topology]; !ok {
		fmt.Fprintf(stderr, "streamjob: --topology must be same or changed, not %q\n", topology)
		return 2
	}
	if *attemptID == "" {
		*attemptID = fmt.Sprintf("%s-%d", cmd, time.Now().UnixNano())
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// Twice the default attempts (about 15s of backoff in all): a worker
	// would rather wait out a leader election, which takes a few seconds
	// with the default Raft timeouts, than fail its job.
	if *token == "" && *tokenFile != "" {
		raw, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "streamjob: --token-file: %v\n", err)
			return 2
		}
		*token = strings.TrimSpace(string(raw))
	}
	var tlsConfig *tls.Config
	if *caFile != "" {
		if *addr == "http://127.0.0.1:7070" {
			*addr = "127.0.0.1:7070" // the default address, https with a CA
		}
		var err error
		if tlsConfig, err = client.LoadTLSConfig(*caFile, "", ""); err != nil {
			fmt.Fprintf(stderr, "streamjob: %v\n", err)
			return 2
		}
	}
	c, err := client.New(client.Config{Endpoints: strings.Split(*addr, ","), MaxAttempts: 2 * client.DefaultMaxAttempts, Logger: logger, Token: *token, TLS: tlsConfig})
	if err != nil {
		fmt.Fprintf(stderr, "streamjob: %v\n", err)
		return 2
	}
	j := &jobRunner{c: c, job: *job, out: stdout, interval: *interval}
	ctx := context.Background()
	switch cmd {
	case "run":
		err = j.run(ctx, *attemptID, *epochs)
	case "resume":
		err = j.resume(ctx, *attemptID, topology, *epochs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "streamjob: %v\n", err)
		var ae *client.APIError
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "streamjob: the store answered %d %s (field %q)\n", ae.Status, ae.Code, ae.Field)
		}
		return 1
	}
	return 0
}

// jobRunner drives the simulated job.
type jobRunner struct {
	c        *client.Client
	job      string
	out      io.Writer
	interval time.Duration

	gen   uint64
	tasks []wire.Task
	aggs  map[string]*aggTask
}

// aggTask is an aggregation's state: its manifest, the epoch whose
// aggregate the manifest holds and the last sequence number written.
type aggTask struct {
	ts    *client.TaskState
	epoch uint64
	seq   uint64
}

func (j *jobRunner) printf(format string, args ...any) { fmt.Fprintf(j.out, format, args...) }

// start creates the job if needed and starts an attempt with the tasks of
// topology.
func (j *jobRunner) start(ctx context.Context, attemptID, topology string, create bool) error {
	jb, err := j.c.Job(ctx, j.job)
	switch {
	case errors.Is(err, client.ErrNotFound) && create:
		if jb, err = j.c.PutJob(ctx, j.job, wire.JobConfig{Retained: 2, AckTimeout: wire.Duration(time.Minute)}); err != nil {
			return fmt.Errorf("create job: %w", err)
		}
		j.printf("job %s: created, retaining %d checkpoints\n", j.job, jb.Config.Retained)
	case err != nil:
		return fmt.Errorf("read job %s: %w", j.job, err)
	default:
		j.printf("job %s: generation %d, last epoch %d, latest completed %d\n", j.job, jb.Generation, jb.LastEpoch, jb.LatestCompleted)
	}
	j.tasks = tasksOf(topology)
	a, err := j.c.StartAttempt(ctx, j.job, attemptID, j.tasks)
	if err != nil {
		return fmt.Errorf("start attempt: %w", err)
	}
	j.gen = a.Generation
	j.printf("attempt %s: generation %d, %d tasks, %d expected to ack (map-0 checkpoints nothing)\n", attemptID, a.Generation, a.Tasks, a.Expected)
	return nil
}

// nextEpoch is the first epoch the attempt may begin.
func (j *jobRunner) nextEpoch(ctx context.Context) (uint64, error) {
	jb, err := j.c.Job(ctx, j.job)
	if err != nil {
		return 0, err
	}
	return jb.LastEpoch + 1, nil
}

func (j *jobRunner) run(ctx context.Context, attemptID string, epochs uint64) error {
	if err := j.start(ctx, attemptID, "same", true); err != nil {
		return err
	}
	j.aggs = map[string]*aggTask{}
	for _, tk := range j.tasks {
		if tk.Caps.Has(wire.KindState) {
			ts, err := client.NewTaskState(nil, tk.Caps)
			if err != nil {
				return err
			}
			j.aggs[tk.ID] = &aggTask{ts: ts}
		}
	}
	first, err := j.nextEpoch(ctx)
	if err != nil {
		return err
	}
	if err := j.checkpoint(ctx, first, epochs); err != nil {
		return err
	}
	// The crash: the next epoch begins, the sources acknowledge it, an
	// aggregation uploads its changelog, and the process dies before the
	// aggregation acknowledges: no abort, no cleanup. The epoch stays
	// pending until the next attempt aborts it; the upload is never
	// committed and the garbage collector deletes it once its lease ends.
	e := first + epochs
	if _, err := j.c.BeginEpoch(ctx, j.job, j.gen, e); err != nil {
		return err
	}
	for _, tk := range j.tasks {
		if tk.Caps.Has(wire.KindInput) {
			if err := j.ack(ctx, tk, e); err != nil {
				return err
			}
		}
	}
	agg := j.aggs["agg-0"]
	prev, next := aggregateAt("agg-0", agg.epoch), aggregateAt("agg-0", e)
	data := changelog(prev, next, agg.seq+1)
	if _, err := j.c.Upload(ctx, j.job, j.gen, "agg-0", strings.NewReader(string(data)), int64(len(data))); err != nil {
		return err
	}
	j.printf("crash: epoch %d begun, source-0 and source-1 acked it, agg-0 uploaded a changelog it never committed; exiting without cleanup\n", e)
	j.printStats(j.c.Stats())
	exitCrash(0)
	return nil
}

// checkpoint runs epochs first..first+n-1: begin, every expected task's
// ack, await completion.
func (j *jobRunner) checkpoint(ctx context.Context, first, n uint64) error {
	var tick <-chan time.Time
	if j.interval > 0 {
		t := time.NewTicker(j.interval)
		defer t.Stop()
		tick = t.C
	}
	for e := first; e < first+n; e++ {
		start := time.Now()
		if _, err := j.c.BeginEpoch(ctx, j.job, j.gen, e); err != nil {
			return fmt.Errorf("begin epoch %d: %w", e, err)
		}
		errs := make(chan error, len(j.tasks))
		acks := 0
		for _, tk := range j.tasks {
			if !tk.Caps.Expected() {
				continue
			}
			acks++
			go func() { errs <- j.ack(ctx, tk, e) }()
		}
		var failed error
		for range acks {
			if err := <-errs; err != nil && failed == nil {
				failed = err
			}
		}
		if failed != nil {
			return failed
		}
		d, err := j.c.AwaitEpoch(ctx, j.job, e)
		if err != nil {
			return fmt.Errorf("await epoch %d: %w", e, err)
		}
		note := ""
		if materializes(e) {
			note = " (aggregations materialized their state)"
		}
		j.printf("epoch %d completed in %s: %d acks%s\n", e, time.Since(start).Round(time.Millisecond), d.Acked, note)
		if tick != nil && e+1 < first+n {
			select {
			case <-tick:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// ack acknowledges epoch e for task: offsets, the transaction id, or the
// aggregation's changelog (uploaded, then acknowledged as a delta).
func (j *jobRunner) ack(ctx context.Context, tk wire.Task, e uint64) error {
	req := client.AckRequest{}
	switch {
	case tk.Caps.Has(wire.KindInput):
		req.Payloads = map[wire.Kind][]byte{wire.KindInput: []byte(offsets(tk.ID, e))}
	case tk.Caps.Has(wire.KindOutput):
		req.Payloads = map[wire.Kind][]byte{wire.KindOutput: []byte(txnID(e))}
	case tk.Caps.Has(wire.KindState):
		if err := j.writeState(ctx, tk.ID, e); err != nil {
			return fmt.Errorf("%s epoch %d: %w", tk.ID, e, err)
		}
		req.Manifest = j.aggs[tk.ID].ts.Manifest()
	}
	if _, err := j.c.Ack(ctx, j.job, j.gen, e, tk.ID, req); err != nil {
		return fmt.Errorf("ack epoch %d of %s: %w", e, tk.ID, err)
	}
	if a := j.aggs[tk.ID]; a != nil {
		a.ts.Acked()
	}
	return nil
}

// writeState brings an aggregation's state to epoch e: a changelog segment
// with the changes since the state it holds, or every tenth epoch a
// materialized base that replaces the changelog.
func (j *jobRunner) writeState(ctx context.Context, task string, e uint64) error {
	a := j.aggs[task]
	prev, next := aggregateAt(task, a.epoch), aggregateAt(task, e)
	var data []byte
	if materializes(e) {
		a.seq += uint64(len(keys))
		data = baseSnapshot(next, a.seq)
	} else {
		data = changelog(prev, next, a.seq+1)
	}
	key, err := j.c.Upload(ctx, j.job, j.gen, task, strings.NewReader(string(data)), int64(len(data)))
	if err != nil {
		return err
	}
	if err := a.ts.AddBlob(key, uint64(len(data)), checksum(data)); err != nil {
		return err
	}
	if materializes(e) {
		err = a.ts.Materialize([]manifests.Base{{Key: key, Length: uint64(len(data))}}, a.seq+1)
	} else {
		err = a.ts.AddSegment(key, 0, uint64(len(data)), a.seq+1, a.seq+uint64(len(keys)))
		a.seq += uint64(len(keys))
	}
	if err != nil {
		return err
	}
	a.epoch = e
	return nil
}

func (j *jobRunner) printStats(s client.Stats) {
	j.printf("requests: %d metastore, %d object-store PUTs (%d bytes), %d object-store GETs (%d bytes), %d retries\n",
		s.MetastoreRequests, s.ObjectPuts, s.ObjectBytesPut, s.ObjectGets, s.ObjectBytesRead, s.Retries)
}
