package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/nemesis"
	"github.com/metastore/metastore/jepsen/workload"
	"github.com/metastore/metastore/wire"
)

// Prefix and Subnet name the scenarios' clusters: namespaces, links and
// rules start with Prefix, members live in Subnet.0/24.
const (
	Prefix = "msc"
	Subnet = "10.79.0"
)

// Options configure a tier run.
type Options struct {
	// OutDir is where failed scenarios keep their artifacts (default
	// ./jepsen-results).
	OutDir string
	// Out receives the report (default os.Stdout).
	Out io.Writer
	// Verbose sends progress lines of the cluster and nemesis to Out.
	Verbose bool
	// Race builds the members with the race detector.
	Race bool
	// Env is added to every member's environment in every scenario.
	Env []string
	// Jobs is the number of jobs of the workload (default 3).
	Jobs int
	// ReuseSameRef: see workload.Config.ReuseSameRef.
	ReuseSameRef bool
	// ReuseProb, ReuseHold, ReuseWindow, GCInterval and GCBatch override
	// every scenario's when set.
	ReuseProb   float64
	ReuseHold   time.Duration
	ReuseWindow time.Duration
	GCInterval  time.Duration
	GCBatch     int
	// KeepAll keeps the artifacts of passed scenarios too.
	KeepAll bool
	// KeepData keeps the work directory (the members' data directories) of
	// a scenario whose artifacts are kept, to read its state files.
	KeepData bool
	// LossyDisk puts every scenario's members on lossy disks
	// (cluster.Options.LossyDisk), not only those whose faults need it.
	LossyDisk bool
}

// ScenarioResult is the outcome of one scenario.
type ScenarioResult struct {
	Name   string
	Faults []nemesis.Result
	Counts history.Counts
	// Duration is the workload's; FaultTime is how much of it faults were
	// in force (from each Inject's return to its Heal's return).
	Duration time.Duration
	// Reuses counts the acks answered ok that referenced again a blob the
	// store recorded as a GC candidate.
	Reuses int
	// AckBatches and AcksBatched: the requests that carried acks
	// together, and the acks in them (workload.Result).
	AckBatches, AcksBatched int64
	Verdicts                []checker.Verdict
	// Err is set when the scenario could not run (the cluster did not
	// start, say): a failure too.
	Err  error
	Dir  string
	Took time.Duration
}

// FaultTime is how long faults were in force: the sum, over the fault
// runs whose Inject succeeded, of the time from Inject to Heal.
func (r *ScenarioResult) FaultTime() time.Duration {
	var d time.Duration
	for _, f := range r.Faults {
		if !f.Injected.IsZero() && f.Healed.After(f.Injected) {
			d += f.Healed.Sub(f.Injected)
		}
	}
	return d
}

// Passed reports whether the scenario ran and every checker passed.
func (r *ScenarioResult) Passed() bool { return r.Err == nil && checker.Passed(r.Verdicts) }

// Runner runs scenarios, one cluster at a time.
type Runner struct {
	opts   Options
	binary string
	binDir string
}

// New prepares a runner: it checks the machine can run the suite and
// builds the metastore binary once (faultinject tag).
func New(ctx context.Context, opts Options) (*Runner, error) {
	if err := cluster.Supported(); err != nil {
		return nil, err
	}
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.OutDir == "" {
		opts.OutDir = "jepsen-results"
	}
	r := &Runner{opts: opts}
	dir, err := os.MkdirTemp("", "metastore-jepsen-bin-*")
	if err != nil {
		return nil, err
	}
	r.binDir = dir
	r.binary = filepath.Join(dir, "metastore")
	start := time.Now()
	if err := cluster.Build(ctx, cluster.MetastorePackage, r.binary, []string{cluster.FaultInjectTag}, opts.Race); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.printf("built metastore (tags faultinject, race %v) in %s\n", opts.Race, time.Since(start).Round(time.Second))
	return r, nil
}

// Close removes the runner's binary.
func (r *Runner) Close() { os.RemoveAll(r.binDir) }

func (r *Runner) printf(format string, args ...any) { fmt.Fprintf(r.opts.Out, format, args...) }

func (r *Runner) logf(format string, args ...any) {
	if r.opts.Verbose {
		fmt.Fprintf(r.opts.Out, "    %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

// RunTier runs scenarios in order, prints each one's report and a last
// line "scenarios: N passed, M failed", and returns the results.
func (r *Runner) RunTier(ctx context.Context, scenarios []Scenario) []*ScenarioResult {
	var results []*ScenarioResult
	passed, failed := 0, 0
	for i, sc := range scenarios {
		r.printf("=== scenario %d/%d: %s (%s)\n", i+1, len(scenarios), sc.Name, sc.Duration)
		res := r.Run(ctx, sc)
		results = append(results, res)
		r.Report(res)
		if res.Passed() {
			passed++
		} else {
			failed++
		}
		if ctx.Err() != nil {
			break
		}
	}
	r.printf("scenarios: %d passed, %d failed\n", passed, failed)
	return results
}

// Report prints the report of one scenario run (RunTier prints it for each).
func (r *Runner) Report(res *ScenarioResult) {
	for _, f := range res.Faults {
		status := "ok"
		if f.Err != nil {
			status = "FAILED: " + f.Err.Error()
		}
		r.printf("  fault %s: %s (healthy %s after heal) %s\n", f.Fault, f.Detail, f.HealthyAfter.Round(time.Millisecond), status)
	}
	if len(res.Faults) == 0 && res.Err == nil {
		r.printf("  fault: none injected\n")
	} else if res.Duration > 0 {
		r.printf("  faults in force %s of the workload's %s (%.0f%%)\n", res.FaultTime().Round(100*time.Millisecond), res.Duration, 100*res.FaultTime().Seconds()/res.Duration.Seconds())
	}
	c := res.Counts
	r.printf("  operations: %d (ok %d, fail %d, unknown %d); %d acks referenced GC candidates again; %d acks sent in %d batches\n", c.Total, c.OK, c.Fail, c.Unknown, res.Reuses, res.AcksBatched, res.AckBatches)
	for _, v := range res.Verdicts {
		mark := "PASS"
		if !v.OK {
			mark = "FAIL"
		}
		r.printf("  %-14s %s  %s\n", v.Name+":", mark, v.Summary)
		if !v.OK {
			for i, p := range v.Problems {
				if i >= 8 {
					r.printf("      ... %d more\n", len(v.Problems)-i)
					break
				}
				r.printf("      - %s\n", p)
			}
			if v.Artifact != "" {
				r.printf("      see %s\n", v.Artifact)
			}
		}
	}
	if res.Err != nil {
		r.printf("  ERROR: %v\n", res.Err)
	}
	verdict := "PASSED"
	if !res.Passed() {
		verdict = "FAILED"
	}
	r.printf("  %s in %s", verdict, res.Took.Round(time.Second))
	if res.Dir != "" {
		r.printf("; artifacts kept in %s", res.Dir)
	}
	r.printf("\n")
}

// Run runs one scenario on a fresh cluster.
func (r *Runner) Run(ctx context.Context, sc Scenario) *ScenarioResult {
	start := time.Now()
	res := &ScenarioResult{Name: sc.Name}
	defer func() { res.Took = time.Since(start) }()
	copts := cluster.Options{
		// Names and a subnet of the suite's own, apart from the
		// cluster package's tests (prefix msj, 10.77.0), so that their
		// clean-up of leftovers never touches a scenario's cluster. The
		// members' object-store prefix is taken from Prefix; the same value
		// for S3Prefix keeps Bucket and S3KeyPrefix in step.
		Prefix:     Prefix,
		Subnet:     Subnet,
		S3Prefix:   Prefix,
		Binary:     r.binary,
		GCInterval: cmp.Or(r.opts.GCInterval, sc.GCInterval),
		GCBatch:    cmp.Or(r.opts.GCBatch, sc.GCBatch),
		Env:        append(append([]string(nil), r.opts.Env...), sc.Env...),
		Logf:       r.logf,
	}
	copts.LossyDisk = r.opts.LossyDisk
	for _, mk := range sc.Faults {
		if dn, ok := mk().(nemesis.DiskNeeder); ok && dn.NeedsLossyDisk() {
			copts.LossyDisk = true
		}
	}
	sctx, cancel := context.WithTimeout(ctx, sc.Duration+10*time.Minute)
	defer cancel()
	c, err := cluster.Start(sctx, copts)
	if err != nil {
		res.Err = fmt.Errorf("start cluster: %w", err)
		return res
	}
	keep := false
	defer func() {
		_ = c.Close()
		if keep {
			res.Dir = c.WorkDir()
		} else {
			os.RemoveAll(c.WorkDir())
		}
	}()

	h := history.New()
	members := map[string]string{}
	for _, m := range c.Members() {
		if !m.Spare {
			members[m.ID] = "http://" + m.HTTPAddr
		}
	}
	wcfg := workload.Config{Members: members, Duration: sc.Duration, Jobs: r.opts.Jobs, Readers: sc.ReadersPerMember,
		ReuseProb: cmp.Or(r.opts.ReuseProb, sc.ReuseProb), ReuseHold: cmp.Or(r.opts.ReuseHold, sc.ReuseHold),
		ReuseWindow: cmp.Or(r.opts.ReuseWindow, sc.ReuseWindow), ReuseSameRef: r.opts.ReuseSameRef, GCGrace: c.Options().GCGrace, GCInterval: c.Options().GCInterval, Logf: r.logf}
	wl, err := workload.New(wcfg, h)
	if err != nil {
		res.Err = err
		return res
	}

	// The workload, and the nemesis beside it.
	var wres *workload.Result
	var werr error
	var wg sync.WaitGroup
	wctx, wcancel := context.WithCancel(sctx)
	defer wcancel()
	wg.Add(1)
	go func() { defer wg.Done(); wres, werr = wl.Run(wctx) }()
	var faults []nemesis.Result
	if len(sc.Faults) > 0 {
		hold := durationOr(sc.Hold, 5*time.Second)
		nr := &nemesis.Runner{
			Cluster:       c,
			Hold:          hold,
			HealthTimeout: sc.HealthTimeout,
			Logf:          r.logf,
			OnEvent: func(e nemesis.Event) {
				he := history.Event{Time: e.Time, Fault: e.Fault, Phase: string(e.Phase), Detail: e.Detail}
				if e.Err != nil {
					he.Error = e.Err.Error()
				}
				h.AddEvent(he)
			},
		}
		// Faults back to back from FirstFault on, while a whole hold
		// still fits before the workload ends.
		deadline := time.Now().Add(sc.Duration)
		sleepCtx(sctx, durationOr(sc.FirstFault, time.Second))
		for i := 0; time.Until(deadline) > hold && sctx.Err() == nil; i++ {
			f := sc.Faults[i%len(sc.Faults)]()
			fr := nr.Run(sctx, f)
			faults = append(faults, fr)
			sleepCtx(sctx, 200*time.Millisecond)
		}
	}
	wg.Wait()
	h.End = time.Now()
	res.Faults = faults
	res.Duration = sc.Duration
	ops := h.Snapshot()
	res.Counts = history.Count(ops)
	for _, o := range ops {
		if o.Kind == history.KindAck && o.Outcome == history.OK && strings.HasPrefix(o.Note, workload.NoteReuse) {
			res.Reuses++
		}
	}
	if werr != nil {
		res.Err = fmt.Errorf("workload: %w", werr)
	}
	if wres != nil {
		res.AckBatches, res.AcksBatched = wres.AckBatches, wres.AcksBatched
	}

	// Heal whatever is left, wait for health, collect the final state.
	var panics []*regexp.Regexp
	for _, mk := range sc.Faults {
		if pe, ok := mk().(nemesis.PanicExpecter); ok {
			panics = append(panics, pe.ExpectedPanics()...)
		}
	}
	final := r.finish(sctx, c, wres, durationOr(sc.HealthTimeout, 2*time.Minute), panics)
	in := &checker.Input{Ops: ops, Final: final, S3: c.S3.Requests(), S3Prefix: c.S3KeyPrefix()}
	for _, f := range faults {
		in.ClockSkew = max(in.ClockSkew, f.ClockSkew)
	}
	dir := filepath.Join(r.opts.OutDir, fmt.Sprintf("%s-%s", time.Now().Format("20060102-150405"), sanitize(sc.Name)))
	in.OutDir = dir
	res.Verdicts = append(res.Verdicts, checker.Check(in)...)
	res.Verdicts = append(res.Verdicts, nemesisVerdict(faults))

	if !res.Passed() || r.opts.KeepAll {
		keep = true
		if err := r.saveArtifacts(dir, c, h, final, res); err != nil {
			r.printf("  (saving artifacts: %v)\n", err)
		}
		res.Dir = dir
		// The artifacts hold copies of the logs; the work dir (the
		// members' data directories) goes too, unless Options.KeepData.
		keep = r.opts.KeepData
		if keep {
			r.printf("  data directories kept in %s\n", c.WorkDir())
		}
	} else if in.OutDir != "" {
		os.RemoveAll(dir)
	}
	return res
}

// nemesisVerdict fails when a fault's own checks failed: the cluster was
// not healthy before or after, or the heal could not verify what the fault
// promised (a snapshot installed, a crashed deletion finished).
func nemesisVerdict(faults []nemesis.Result) checker.Verdict {
	v := checker.Verdict{Name: "nemesis", OK: true, Summary: fmt.Sprintf("%d fault runs, each healthy before and after", len(faults))}
	for _, f := range faults {
		if f.Err != nil {
			v.OK = false
			v.Problems = append(v.Problems, fmt.Sprintf("%s: %v", f.Fault, f.Err))
		}
	}
	if !v.OK {
		v.Summary = fmt.Sprintf("%d of %d fault runs failed; first: %s", len(v.Problems), len(faults), v.Problems[0])
	}
	return v
}

// finish heals the cluster, waits until it is healthy, reads the final
// state, runs the final GC cycles after the grace period, lists the bucket
// and reads every member's hash, fsck and log (skipping the panics the
// faults expect: nemesis.PanicExpecter).
func (r *Runner) finish(ctx context.Context, c *cluster.Cluster, wres *workload.Result, healthTimeout time.Duration, expectedPanics []*regexp.Regexp) *checker.Final {
	f := &checker.Final{Jobs: map[string]*checker.JobFinal{}, Records: map[string]checker.BlobRecord{}}
	_ = c.Heal(ctx)
	c.ClearLinks()
	c.S3.ClearRules()
	for _, m := range c.Members() {
		if m.Paused() {
			_ = m.Resume()
		}
		if !m.Running() && m.Starts() > 0 && !m.Spare {
			if err := m.Start(ctx); err != nil {
				r.logf("restart %s: %v", m.ID, err)
			}
		}
	}
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	if err := c.WaitHealthy(hctx); err != nil {
		f.HealthErr = err.Error()
	}
	cancel()

	var endpoints []string
	for _, m := range c.Serving() {
		endpoints = append(endpoints, "http://"+m.HTTPAddr)
	}
	if len(endpoints) == 0 {
		f.CollectErr = "no member is serving"
		return f
	}
	healthy := f.HealthErr == ""
	if !healthy {
		// Without a healthy cluster the reads below would each wait out
		// their timeouts (minutes): the state is not collected, the
		// checkers that need it fail, and the members' own checks and
		// logs are still read.
		f.CollectErr = "not collected: the cluster is not healthy after the heal"
		wres = nil
	}
	cl, err := client.New(client.Config{Endpoints: endpoints, RequestTimeout: 10 * time.Second, MaxAttempts: 10})
	if err != nil {
		f.CollectErr = err.Error()
		return f
	}
	if wres != nil {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		if err := collect(cctx, cl, wres, f); err != nil {
			f.CollectErr = err.Error()
		}
		cancel()
	}

	// Quiet for the grace period, then two GC cycles.
	sleepCtx(ctx, c.Options().GCGrace+time.Second)
	f.GCStart, f.Grace = time.Now(), c.Options().GCGrace
	for i := 0; healthy && i < 2; i++ {
		var rep map[string]any
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := c.Send(gctx, "POST", "/v1/gc/run", nil, &rep)
		cancel()
		if err != nil {
			f.GCRuns = append(f.GCRuns, "error: "+err.Error())
		} else {
			f.GCRuns = append(f.GCRuns, fmt.Sprintf("deleted %v", rep["deleted"]))
		}
	}

	// The bucket, straight from the S3 server.
	lctx, lcancel := context.WithTimeout(ctx, time.Minute)
	defer lcancel()
	prefix := strings.TrimSuffix(c.S3KeyPrefix(), "/")
	store, err := blobstore.NewS3(lctx, blobtest.Config(c.S3Endpoint(), c.Options().Bucket, prefix))
	if err == nil {
		f.ListedAt = time.Now()
		err = store.List(lctx, "", func(i blobstore.Info) error {
			f.Bucket = append(f.Bucket, i.Key)
			return nil
		})
	}
	if err != nil {
		f.BucketErr = err.Error()
	}
	sort.Strings(f.Bucket)
	// The records of every object outside the checkpoints read above
	// (working manifests included): gc-liveness judges those.
	referenced := map[string]bool{}
	for _, jobs := range []map[string]*checker.JobFinal{f.Jobs, f.Others} {
		for _, jf := range jobs {
			for _, e := range jf.Epochs {
				for _, tc := range e.Tasks {
					for _, k := range tc.Keys {
						referenced[k] = true
					}
				}
			}
		}
	}
	for _, k := range f.Bucket {
		if referenced[k] || !healthy {
			continue
		}
		var b wire.Blob
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.Send(bctx, "GET", workload.BlobPath(k), nil, &b)
		cancel()
		rec := checker.BlobRecord{State: string(b.State), Refs: b.Refs, Job: b.Job, Task: b.Task, Generation: b.Generation,
			LeaseUntil: b.LeaseUntil, UnreferencedAt: b.UnreferencedAt}
		if err != nil {
			rec.Err = err.Error()
		}
		f.Records[k] = rec
	}

	// Convergence: healthy (same hash at the same index), then each
	// member's hash and fsck, asked of the member itself.
	hctx, cancel = context.WithTimeout(ctx, min(time.Minute, healthTimeout))
	if err := c.WaitHealthy(hctx); err != nil && f.HealthErr == "" {
		f.HealthErr = err.Error()
	}
	cancel()
	hctx, cancel = context.WithTimeout(ctx, time.Minute)
	hashes := finalHashes(hctx, cluster.IDs(c.Serving()), func(ctx context.Context, id string) (cluster.StateHash, error) {
		return c.StateHash(ctx, c.Member(id))
	})
	cancel()
	for _, m := range c.Members() {
		if m.Starts() == 0 {
			continue
		}
		mf := checker.MemberFinal{ID: m.ID}
		mf.LogFindings = checker.ScanLog(m.LogSince(0), expectedPanics...)
		if m.Serving() {
			if h, ok := hashes[m.ID]; !ok {
				mf.HashErr = "not read"
			} else if h.err != nil {
				mf.HashErr = h.err.Error()
			} else {
				mf.Hash, mf.Index = h.Hash, h.Index
			}
			var fr struct {
				OK     bool            `json:"ok"`
				Report wire.FsckReport `json:"report"`
			}
			// A whole-state check; on a loaded machine one attempt may
			// outlast the HTTP client's timeout: repeated while the minute
			// lasts.
			mctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := c.Get(mctx, m, "/v1/fsck?consistency=stale", &fr)
			for err != nil && mctx.Err() == nil {
				select {
				case <-mctx.Done():
				case <-time.After(time.Second): // polling, not synchronisation
					err = c.Get(mctx, m, "/v1/fsck?consistency=stale", &fr)
				}
			}
			if err != nil {
				mf.FsckErr = err.Error()
			} else {
				for _, mm := range fr.Report.Mismatches {
					mf.FsckProblems = append(mf.FsckProblems, fmt.Sprintf("blob %s (%s): %d references stored, %d recounted", mm.Key, mm.State, mm.Stored, mm.Recounted))
				}
				mf.FsckProblems = append(mf.FsckProblems, fr.Report.Problems...)
				if !fr.OK && len(mf.FsckProblems) == 0 {
					mf.FsckProblems = append(mf.FsckProblems, "fsck answered ok=false")
				}
			}
			cancel()
			f.Members = append(f.Members, mf)
		} else if len(mf.LogFindings) > 0 {
			f.Members = append(f.Members, mf)
		}
	}
	return f
}

// memberHash is one member's state hash, or why it was not read.
type memberHash struct {
	cluster.StateHash
	err error
}

// finalHashes reads the state hash of each member of ids, in rounds until
// a round finds them all at one applied index or ctx ends, and answers the
// last round. The leader's own tasks may commit an entry between two reads
// of a round (convergence compares hashes at one index).
func finalHashes(ctx context.Context, ids []string, read func(context.Context, string) (cluster.StateHash, error)) map[string]memberHash {
	for {
		round := map[string]memberHash{}
		same := true
		var index uint64
		for i, id := range ids {
			h, err := read(ctx, id)
			round[id] = memberHash{StateHash: h, err: err}
			if err != nil || (i > 0 && h.Index != index) {
				same = false
			}
			index = h.Index
		}
		if same || ctx.Err() != nil {
			return round
		}
		select {
		case <-ctx.Done():
			return round
		case <-time.After(100 * time.Millisecond): // polling, not synchronisation
		}
	}
}

// collect reads the final state of every job through linearizable reads:
// every remembered epoch with its ack records, and for retained, pinned
// and pending ones what each task holds. The workload's jobs go to
// f.Jobs; the others the store holds (a fault's own: gc-crash-after-mark's
// garbage job) to f.Others, each epoch's task set read from its attempt:
// their checkpoints are live too (checker.LiveSet).
func collect(ctx context.Context, cl *client.Client, wres *workload.Result, f *checker.Final) error {
	var errs []error
	mine := map[string]bool{}
	for ji, job := range wres.Jobs {
		mine[job] = true
		var tasks []wire.Task
		for _, t := range workload.Tasks(ji) {
			caps, _ := wire.ParseCaps(t.Caps)
			tasks = append(tasks, wire.Task{ID: t.ID, Caps: caps})
		}
		jf, err := readJob(ctx, cl, job, func(uint64) ([]wire.Task, error) { return tasks, nil })
		if jf != nil {
			f.Jobs[job] = jf
		}
		errs = append(errs, err)
	}
	all, err := cl.Jobs(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("jobs: %w", err))
	}
	for _, j := range all {
		if mine[j.ID] {
			continue
		}
		attempts := map[uint64][]wire.Task{}
		jf, err := readJob(ctx, cl, j.ID, func(gen uint64) ([]wire.Task, error) {
			if ts, ok := attempts[gen]; ok {
				return ts, nil
			}
			a, err := cl.Attempt(ctx, j.ID, gen)
			if err != nil {
				return nil, fmt.Errorf("attempt %d of %s: %w", gen, j.ID, err)
			}
			attempts[gen] = a.TaskList
			return a.TaskList, nil
		})
		if jf != nil {
			if f.Others == nil {
				f.Others = map[string]*checker.JobFinal{}
			}
			f.Others[j.ID] = jf
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// readJob reads one job's final state; tasks gives the task set of a
// generation.
func readJob(ctx context.Context, cl *client.Client, job string, tasks func(gen uint64) ([]wire.Task, error)) (*checker.JobFinal, error) {
	var errs []error
	j, err := cl.Job(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	eps, err := cl.Epochs(ctx, job, "")
	if err != nil {
		return nil, fmt.Errorf("epochs of %s: %w", job, err)
	}
	jf := &checker.JobFinal{Generation: j.Generation, LatestCompleted: j.LatestCompleted}
	for _, listed := range eps {
		// One read gives the epoch with its ack records (the list and
		// this read may straddle an ack timeout).
		d, err := cl.Epoch(ctx, job, listed.Epoch)
		if err != nil {
			errs = append(errs, fmt.Errorf("epoch %d of %s: %w", listed.Epoch, job, err))
			continue
		}
		e := d.Epoch
		ef := checker.EpochFinal{Epoch: e.Epoch, Generation: e.Generation, State: string(e.State), Pinned: e.Pinned,
			Expected: e.Expected, Acked: e.Acked, CompletedAt: e.CompletedAt, Tasks: map[string]checker.TaskCheckpoint{},
			Acks: map[string]checker.AckRecord{}}
		for _, a := range d.Acks {
			ef.Acks[a.Task] = checker.AckRecord{Hash: a.ContentHash}
		}
		var ts []wire.Task
		if e.State == wire.EpochCompleted || e.State == wire.EpochPending {
			if ts, err = tasks(e.Generation); err != nil {
				errs = append(errs, err)
			}
		}
		for _, t := range ts {
			caps := t.Caps
			if !caps.Expected() {
				continue
			}
			switch e.State {
			case wire.EpochCompleted:
				rs, err := cl.Restore(ctx, job, t.ID, client.RestoreOptions{Epoch: e.Epoch})
				if err != nil {
					errs = append(errs, fmt.Errorf("restore %s/%s epoch %d: %w", job, t.ID, e.Epoch, err))
					continue
				}
				tc := checker.TaskCheckpoint{Value: string(rs.Payload(workload.MainKind(caps)))}
				if m := rs.StateManifest(); m != nil {
					tc.HasManifest = true
					tc.Keys, tc.Refs = m.Blobs(), history.ManifestRefs(*m)
				}
				ef.Tasks[t.ID] = tc
			case wire.EpochPending:
				if !caps.Has(wire.KindState) {
					continue
				}
				m, err := cl.EpochManifest(ctx, job, e.Epoch, t.ID)
				if err != nil {
					if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrInvalid) {
						continue
					}
					errs = append(errs, fmt.Errorf("manifest %s/%s epoch %d: %w", job, t.ID, e.Epoch, err))
					continue
				}
				ef.Tasks[t.ID] = checker.TaskCheckpoint{HasManifest: true, Keys: m.Blobs(), Refs: history.ManifestRefs(*m)}
			}
		}
		jf.Epochs = append(jf.Epochs, ef)
	}
	return jf, errors.Join(errs...)
}

// saveArtifacts keeps what a failed scenario needs for a post-mortem: the
// history, the final state, the verdicts, the node logs and the S3
// request log (the linearizability visualization is already there).
func (r *Runner) saveArtifacts(dir string, c *cluster.Cluster, h *history.History, final *checker.Final, res *ScenarioResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	errs = append(errs, h.Save(filepath.Join(dir, "history.json")))
	errs = append(errs, writeJSON(filepath.Join(dir, "final.json"), final))
	errs = append(errs, writeJSON(filepath.Join(dir, "verdicts.json"), res.Verdicts))
	logs := filepath.Join(c.WorkDir(), "logs")
	entries, err := os.ReadDir(logs)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(logs, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.WriteFile(filepath.Join(dir, e.Name()), raw, 0o644))
	}
	return errors.Join(errs...)
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
