package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

// errNoLeader is what the fake answers while it elects a leader.
var errNoLeader = errors.New("fake: no leader")

// fake is an in-memory sut.System that enforces the checkpoint protocol
// strictly: epochs begin in order, only after the previous one completed;
// each task acks the open epoch once, with keys it was given and has not
// used. Its members are this test process (so /proc can be read) with
// data directories of their own. Killing the leader leaves the cluster
// without one for electionDelay.
type fake struct {
	name          string
	latency       time.Duration // of every write
	electionDelay time.Duration
	// failAckAfter, when positive, makes every Ack after that many fail.
	failAckAfter int
	// failRestore, when set, is the error of the footprint's restore: the
	// extras' Footprint returns its figures with it.
	failRestore error

	mu       sync.Mutex
	started  bool
	members  []*fakeMember
	leader   int // index in members; -1 while electing
	electAt  time.Time
	jobs     map[string]*fakeJob
	keySeq   int
	acks     int
	complete int // epochs completed by acks
	kills    int
}

type fakeMember struct {
	sut.Member
	alive bool
}

type fakeJob struct {
	tasks    map[string]*fakeTask
	epoch    uint64 // last begun
	complete bool   // the last begun epoch completed
	acked    map[string]bool
}

type fakeTask struct {
	segments int
	keys     map[string]bool // given, not used yet
}

var _ sut.System = (*fake)(nil)

func newFake(name string) *fake {
	return &fake{name: name, latency: 200 * time.Microsecond, electionDelay: 30 * time.Millisecond, jobs: map[string]*fakeJob{}}
}

func (f *fake) Name() string { return f.name }

func (f *fake) Start(ctx context.Context, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return errors.New("fake: already started")
	}
	for i := range 3 {
		d := filepath.Join(dir, fmt.Sprintf("m%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		f.members = append(f.members, &fakeMember{Member: sut.Member{ID: fmt.Sprintf("m%d", i), PID: os.Getpid(), DataDir: d}, alive: true})
	}
	f.started = true
	return nil
}

func (f *fake) Stop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = false
	return nil
}

func (f *fake) Members() []sut.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ms []sut.Member
	for _, m := range f.members {
		if m.alive {
			ms = append(ms, m.Member)
		}
	}
	return ms
}

// leaderLocked returns the leader's index, electing one when the election
// delay has passed, or -1.
func (f *fake) leaderLocked() int {
	if f.leader < 0 && !time.Now().Before(f.electAt) {
		for i, m := range f.members {
			if m.alive {
				f.leader = i
				break
			}
		}
	}
	return f.leader
}

// write simulates a replicated write: the latency, then op under the lock
// when there is a leader.
func (f *fake) write(ctx context.Context, op func() error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.latency):
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		return errors.New("fake: not started")
	}
	if f.leaderLocked() < 0 {
		return errNoLeader
	}
	return op()
}

func (f *fake) job(name string) (*fakeJob, error) {
	j, ok := f.jobs[name]
	if !ok {
		return nil, fmt.Errorf("fake: no job %q", name)
	}
	return j, nil
}

func (f *fake) CreateJob(ctx context.Context, job string, tasks []string) error {
	return f.write(ctx, func() error {
		if _, ok := f.jobs[job]; ok {
			return fmt.Errorf("fake: job %q exists", job)
		}
		if len(tasks) == 0 {
			return errors.New("fake: a job without tasks")
		}
		j := &fakeJob{tasks: map[string]*fakeTask{}, complete: true}
		for _, t := range tasks {
			j.tasks[t] = &fakeTask{keys: map[string]bool{}}
		}
		f.jobs[job] = j
		return nil
	})
}

func (f *fake) BeginEpoch(ctx context.Context, job string, epoch uint64) error {
	return f.write(ctx, func() error {
		j, err := f.job(job)
		if err != nil {
			return err
		}
		if epoch <= j.epoch || !j.complete {
			return fmt.Errorf("fake: begin epoch %d of %s: last begun %d (complete %v)", epoch, job, j.epoch, j.complete)
		}
		j.epoch, j.complete, j.acked = epoch, false, map[string]bool{}
		return nil
	})
}

func (f *fake) Ack(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	return f.write(ctx, func() error {
		if f.failAckAfter > 0 && f.acks >= f.failAckAfter {
			return errors.New("fake: injected ack failure")
		}
		j, err := f.job(job)
		if err != nil {
			return err
		}
		t, ok := j.tasks[task]
		if !ok {
			return fmt.Errorf("fake: job %s has no task %s", job, task)
		}
		if epoch != j.epoch || j.complete || j.acked[task] {
			return fmt.Errorf("fake: ack of %s/%s epoch %d: open epoch %d (complete %v, acked %v)", job, task, epoch, j.epoch, j.complete, j.acked[task])
		}
		for _, s := range add {
			if !t.keys[s.Key] {
				return fmt.Errorf("fake: ack of %s/%s: key %s not given or used", job, task, s.Key)
			}
			if s.Length <= 0 || s.FirstSeq > s.LastSeq {
				return fmt.Errorf("fake: bad segment %+v", s)
			}
		}
		for _, s := range add {
			delete(t.keys, s.Key)
		}
		t.segments += len(add)
		j.acked[task] = true
		f.acks++
		if len(j.acked) == len(j.tasks) {
			j.complete = true
			f.complete++
		}
		return nil
	})
}

func (f *fake) Keys(ctx context.Context, job, task string, n int) ([]string, error) {
	var keys []string
	err := f.write(ctx, func() error {
		j, err := f.job(job)
		if err != nil {
			return err
		}
		t, ok := j.tasks[task]
		if !ok {
			return fmt.Errorf("fake: job %s has no task %s", job, task)
		}
		for range n {
			f.keySeq++
			k := fmt.Sprintf("blob-%d", f.keySeq)
			t.keys[k] = true
			keys = append(keys, k)
		}
		return nil
	})
	return keys, err
}

func (f *fake) ReadManifest(ctx context.Context, job, task string, stale bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !stale && f.leaderLocked() < 0 {
		return 0, errNoLeader
	}
	j, err := f.job(job)
	if err != nil {
		return 0, err
	}
	t, ok := j.tasks[task]
	if !ok {
		return 0, fmt.Errorf("fake: job %s has no task %s", job, task)
	}
	return t.segments, nil
}

func (f *fake) Preload(ctx context.Context, job, task string, n int) (uint64, error) {
	var next uint64
	err := f.write(ctx, func() error {
		j, err := f.job(job)
		if err != nil {
			return err
		}
		t, ok := j.tasks[task]
		if !ok || len(j.tasks) != 1 || j.epoch != 0 {
			return fmt.Errorf("fake: preload of %s/%s: not the only task of a new job", job, task)
		}
		t.segments = n
		j.epoch, j.complete = 1, true
		next = 2
		return nil
	})
	return next, err
}

func (f *fake) Leader(ctx context.Context) (sut.Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.leaderLocked()
	if i < 0 {
		return sut.Member{}, errNoLeader
	}
	return f.members[i].Member, nil
}

func (f *fake) member(m sut.Member) (int, error) {
	for i, x := range f.members {
		if x.ID == m.ID {
			return i, nil
		}
	}
	return 0, fmt.Errorf("fake: no member %s", m.ID)
}

func (f *fake) Kill(m sut.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.member(m)
	if err != nil {
		return err
	}
	if !f.members[i].alive {
		return fmt.Errorf("fake: member %s is not running", m.ID)
	}
	f.members[i].alive = false
	f.kills++
	if f.leader == i {
		f.leader, f.electAt = -1, time.Now().Add(f.electionDelay)
	}
	return nil
}

func (f *fake) Restart(ctx context.Context, m sut.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.member(m)
	if err != nil {
		return err
	}
	if f.members[i].alive {
		return fmt.Errorf("fake: member %s is running", m.ID)
	}
	f.members[i].alive = true
	return nil
}

// fakeMetastore is a fake with the metastore's extras, whose results are
// made from their arguments.
type fakeMetastore struct{ *fake }

var _ sut.Extras = fakeMetastore{}

func (f fakeMetastore) GC(ctx context.Context, objects int) (sut.GCResult, error) {
	return sut.GCResult{Deleted: objects, Seconds: 0.1, PerSecond: float64(objects) / 0.1, RaftEntries: 1, EntriesPer1000: 1000 / float64(objects), DeleteRequests: 1}, nil
}

func (f fakeMetastore) Resume(ctx context.Context, tasks, stateful int) (sut.ResumeResult, error) {
	return sut.ResumeResult{Tasks: tasks, Stateful: stateful, MetastoreRequests: stateful, NaiveRequests: 2 * tasks, NaiveNoSuchKey: 2*tasks - stateful}, nil
}

func (f fakeMetastore) Footprint(ctx context.Context, blobs, jobs int) (sut.FootprintResult, error) {
	r := sut.FootprintResult{Blobs: blobs, Jobs: jobs, MemberIDs: []string{"m0", "m1", "m2"},
		RSSBytes: []int64{3, 5, 7}, RSSAnonBytes: []int64{1, 2, 3}, RSSFileBytes: []int64{2, 3, 4}, DataDirBytes: []int64{4, 5, 6},
		RestartMember: "m1", RestartIndex: 10, RestartServeSecs: 0.1, RestartSecs: 0.2, RestoreMethod: "fake"}
	if f.failRestore != nil {
		r.RestoreError = f.failRestore.Error()
		return r, f.failRestore
	}
	r.SnapshotBytes, r.SnapshotSecs, r.RestoreSecs = 100, 0.1, 0.2
	return r, nil
}

// PeerVersion makes the fake a Versioned system.
func (f fakeMetastore) PeerVersion() string { return "fake-1" }
