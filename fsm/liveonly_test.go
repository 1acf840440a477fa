package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// The model of TestOnlyLiveCheckpointsHoldReferences: jobs, their
// attempts' workers, and every manifest acknowledged, by epoch and task.
type liveJob struct {
	name     string
	exists   bool
	gen      uint64
	next     uint64 // the next epoch to begin
	attempts int
	tasks    []wire.Task
	workers  map[string]*liveWorker // state tasks of the current attempt
	// acked[epoch][task] is the manifest the task acknowledged in epoch.
	acked map[uint64]map[string]manifests.Manifest
}

type liveWorker struct {
	*worker
	last    uint64 // the last epoch acknowledged in this attempt
	working bool   // acknowledged in this attempt: its manifest is the working one
}

func maxSeq(m manifests.Manifest) uint64 {
	var s uint64
	for _, sg := range m.Segments {
		s = max(s, sg.LastSeq)
	}
	return s
}

func cloneManifest(m manifests.Manifest) manifests.Manifest {
	return manifests.Manifest{Bases: slices.Clone(m.Bases), Segments: slices.Clone(m.Segments)}
}

// TestOnlyLiveCheckpointsHoldReferences is the property of the design
// brief's cost model ("the object store holds exactly the blobs that live
// checkpoints reference ... whatever the topology changes, forks and
// deletions") at the state machine: a long seeded random run of jobs
// created, reconfigured and deleted (forced, or refused for their pins),
// attempts started with changing task sets and capabilities (tasks
// removed, added, made stateless; attempts abandoned with acks of pending
// epochs), epochs begun, acknowledged (incremental manifests,
// materializations), aborted, pinned and unpinned, and tasks restoring from
// their latest checkpoint, an older savepoint, another task's or another
// job's savepoint. After every step the blobs with references are exactly
// those the live checkpoints reference: the manifests acknowledged in
// pending, retained and pinned epochs, plus, for each task of a current
// attempt that has acknowledged in it, its working manifest (the one its
// next ack's delta applies to: within an attempt the store's manifest
// carries on from the task's last successful ack, even when that epoch
// was aborted). The model computes the set from the workers' own
// manifests; the store's counts must equal it, and fsck's recount the
// counts.
func TestOnlyLiveCheckpointsHoldReferences(t *testing.T) {
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runLiveOnly(t, seed, steps) })
	}
}

func runLiveOnly(t *testing.T, seed uint64, steps int) {
	h := newHarness(t)
	rng := rand.New(rand.NewPCG(seed, 0x11fe))
	jobs := []*liveJob{{name: "j0"}, {name: "j1"}, {name: "j2"}}
	pool := []string{"t0", "t1", "t2", "t3"}
	counts := map[string]int{}
	kinds := map[string]int{}

	record := func(j *liveJob, epoch uint64, task string, m manifests.Manifest) {
		if j.acked[epoch] == nil {
			j.acked[epoch] = map[string]manifests.Manifest{}
		}
		j.acked[epoch][task] = cloneManifest(m)
	}
	// savepoints lists (job, epoch, task) of pinned epochs with a manifest.
	savepoints := func() []fsm.BaseRef {
		var out []fsm.BaseRef
		for _, j := range jobs {
			if !j.exists {
				continue
			}
			for _, n := range h.job(j.name).Retained {
				if !h.epoch(j.name, n).Pinned {
					continue
				}
				for _, tk := range slices.Sorted(mapKeys(j.acked[n])) {
					out = append(out, fsm.BaseRef{Job: j.name, Task: tk, Epoch: n})
				}
			}
		}
		return out
	}
	manifestOf := func(b fsm.BaseRef) manifests.Manifest {
		for _, j := range jobs {
			if j.name == b.Job {
				return j.acked[b.Epoch][b.Task]
			}
		}
		t.Fatalf("no job %s", b.Job)
		return manifests.Manifest{}
	}
	// baseValid: the base is still a completed epoch (pinned when it is
	// another job's).
	baseValid := func(w *liveWorker) bool {
		b := w.base
		e, _, err := h.f.Epoch(b.Job, b.Epoch)
		if err != nil || e.State != wire.EpochCompleted {
			return false
		}
		return b.Job == w.job || e.Pinned
	}

	check := func(step int, what string) {
		t.Helper()
		want := map[string]bool{}
		for _, j := range jobs {
			if !j.exists {
				continue
			}
			jr := h.job(j.name)
			for _, n := range append(slices.Clone(jr.Pending), jr.Retained...) {
				for _, m := range j.acked[n] {
					for _, k := range m.Blobs() {
						want[k] = true
					}
				}
			}
			for _, w := range j.workers {
				if w.working {
					for _, k := range w.m.Blobs() {
						want[k] = true
					}
				}
			}
		}
		refs, err := fsm.BlobRefs(h.f)
		if err != nil {
			t.Fatal(err)
		}
		var extra, missing []string
		for k, n := range refs {
			if n > 0 && !want[k] {
				extra = append(extra, k)
			}
		}
		for k := range want {
			if refs[k] == 0 {
				missing = append(missing, k)
			}
		}
		sort.Strings(extra)
		sort.Strings(missing)
		if len(extra) > 0 || len(missing) > 0 {
			t.Fatalf("seed %d step %d (%s): referenced but held by no live checkpoint: %v; held but unreferenced: %v", seed, step, what, extra, missing)
		}
		h.fsck()
	}

	for step := 0; step < steps; step++ {
		h.advance(time.Second)
		j := jobs[rng.IntN(len(jobs))]
		if !j.exists {
			cfg := wire.JobConfig{Retained: 1 + rng.IntN(3)}
			jr := h.putJob(j.name, cfg)
			*j = liveJob{name: j.name, exists: true, gen: jr.Generation, next: 1, attempts: j.attempts, acked: map[uint64]map[string]manifests.Manifest{}}
			check(step, "create "+j.name)
			continue
		}
		jr := h.job(j.name)
		var what string
		switch r := rng.IntN(100); {
		case r < 6 || len(j.tasks) == 0: // a new attempt, often with another task set
			var tasks []wire.Task
			for _, id := range pool {
				if rng.IntN(3) == 0 {
					continue
				}
				if rng.IntN(4) == 0 {
					tasks = append(tasks, task(t, id, "input"))
				} else {
					tasks = append(tasks, task(t, id, "state", "incremental"))
				}
			}
			if len(tasks) == 0 {
				tasks = append(tasks, task(t, "t0", "state", "incremental"))
			}
			j.attempts++
			a := h.start(j.name, fmt.Sprintf("%s-a%d", j.name, j.attempts), tasks...)
			j.gen, j.tasks, j.workers = a.Generation, tasks, map[string]*liveWorker{}
			sps := savepoints()
			for _, tk := range tasks {
				if !tk.Caps.Has(wire.KindState) {
					continue
				}
				w := &liveWorker{worker: &worker{job: j.name, task: tk.ID, gen: a.Generation, acked: map[uint64]manifests.Manifest{}}}
				var base *fsm.BaseRef
				switch c := rng.IntN(10); {
				case c < 6 && jr.LatestCompleted != 0:
					if _, ok := j.acked[jr.LatestCompleted][tk.ID]; ok {
						base = &fsm.BaseRef{Job: j.name, Task: tk.ID, Epoch: jr.LatestCompleted}
					}
				case c < 9 && len(sps) > 0:
					sp := sps[rng.IntN(len(sps))]
					base = &sp
				}
				if base != nil {
					w.base, w.m = base, cloneManifest(manifestOf(*base))
					w.seq = maxSeq(w.m)
				}
				j.workers[tk.ID] = w
			}
			what = fmt.Sprintf("start %s generation %d: %v", j.name, a.Generation, tasks)
		case r < 24: // begin
			if len(jr.Pending) >= 3 {
				continue
			}
			h.begin(j.name, j.gen, j.next)
			what = fmt.Sprintf("begin %s/%d", j.name, j.next)
			j.next++
		case r < 78: // ack
			if len(jr.Pending) == 0 {
				continue
			}
			n := jr.Pending[rng.IntN(len(jr.Pending))]
			tk := j.tasks[rng.IntN(len(j.tasks))]
			if e := h.epoch(j.name, n); slices.ContainsFunc(e.Acks, func(a wire.Ack) bool { return a.Task == tk.ID }) {
				continue
			}
			w := j.workers[tk.ID]
			if w == nil {
				h.ack(j.name, j.gen, n, tk.ID, payloadsFor(tk, n))
				what = fmt.Sprintf("ack %s/%d %s (inline)", j.name, n, tk.ID)
				break
			}
			if n <= w.last {
				continue
			}
			if w.base != nil && !baseValid(w) {
				w.base, w.m, w.seq = nil, manifests.Manifest{}, 0
			}
			if w.base != nil && w.base.Job != w.job {
				kinds["(cross-job forks)"]++
			} else if w.base != nil && w.base.Task != w.task {
				kinds["(forks of another task)"]++
			}
			ack := w.step(h, n, rng.IntN(5) == 0)
			for _, b := range ack.Manifest.Blobs {
				counts[b.Key]++
			}
			w.last, w.working = n, true
			record(j, n, tk.ID, w.m)
			what = fmt.Sprintf("ack %s/%d %s", j.name, n, tk.ID)
		case r < 83: // abort
			if len(jr.Pending) == 0 {
				continue
			}
			n := jr.Pending[rng.IntN(len(jr.Pending))]
			h.abort(j.name, j.gen, n, "random")
			what = fmt.Sprintf("abort %s/%d", j.name, n)
		case r < 91: // pin or unpin
			if len(jr.Retained) == 0 {
				continue
			}
			n := jr.Retained[rng.IntN(len(jr.Retained))]
			if h.epoch(j.name, n).Pinned {
				h.unpin(j.name, n)
				what = fmt.Sprintf("unpin %s/%d", j.name, n)
			} else {
				h.pin(j.name, n, fmt.Sprintf("sp-%d", n))
				what = fmt.Sprintf("pin %s/%d", j.name, n)
			}
		case r < 94: // retention changes
			cfg := jr.Config
			cfg.Retained = 1 + rng.IntN(3)
			h.putJob(j.name, cfg)
			what = fmt.Sprintf("retain %s %d", j.name, cfg.Retained)
		case r < 97: // delete
			pinned := false
			for _, n := range jr.Retained {
				pinned = pinned || h.epoch(j.name, n).Pinned
			}
			if pinned && rng.IntN(2) == 0 {
				h.reject(wire.ErrJobPinned, fsm.CmdJobDelete, fsm.JobDelete{Job: j.name})
				what = "delete refused " + j.name
				break
			}
			mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: j.name, Force: pinned}))
			if pinned {
				kinds["(forced deletes)"]++
			}
			j.exists = false
			// A zombie of the deleted job is refused.
			if len(jr.Pending) > 0 {
				h.reject(wire.ErrJobDeleted, fsm.CmdEpochAbort, fsm.EpochAbort{Job: j.name, Generation: j.gen, Epoch: jr.Pending[0]})
			}
			what = "delete " + j.name
		default:
			continue
		}
		check(step, what)
		kinds[strings.Fields(what)[0]]++
	}
	for _, k := range []string{"(cross-job forks)", "(forks of another task)", "(forced deletes)", "abort", "unpin"} {
		if kinds[k] == 0 {
			t.Errorf("seed %d: no %s in the run", seed, k)
		}
	}
	total, live := 0, 0
	refs, _ := fsm.BlobRefs(h.f)
	for _, n := range refs {
		total++
		if n > 0 {
			live++
		}
	}
	t.Logf("seed %d: %d blobs written, %d referenced at the end; steps %v", seed, total, live, kinds)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
