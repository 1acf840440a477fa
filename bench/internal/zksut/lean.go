package zksut

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/metastore/metastore/bench/internal/sut"
)

// The lean design: no znode is written by more than one task of a job, so
// their acks never conflict.
//
//	/jobs/J                         {"tasks":["t1","t2"]}                              job
//	/jobs/J/generation              "1"                                                the job's generation (the fence); its version is the generation - 1
//	/jobs/J/epochs/EEEE…(20)        {"generation":1,"completed":false}                 epoch, begun; completed by the coordinator
//	/jobs/J/epochs/EEEE…(20)/T      {"generation":1,"first":42,"segments":3,"first_key":…} task T's ack of the epoch
//	/jobs/J/tasks/T/seg/BBBBBB/IIIIIIIII {"key":…,"offset":…,"length":…,"first_seq":…,"last_seq":…}
//
// An ack is one multi: a check of the generation znode's version (the
// generation the task works for), the creation of the task's ack znode
// under the epoch znode (which fails when the epoch has not begun, or the
// task acknowledged it already) and the creation of its segment znodes
// (and of a bucket znode where a segment starts one). A task of a
// superseded generation (a new coordinator set the generation znode) is
// refused by the check: the fence. Segments are numbered on from the
// task's last, which the worker keeps (it finds it in its buckets, after a
// sync, when it starts or after an ack whose outcome it could not tell).
//
// The coordinator begins an epoch with one multi (the check, and the
// creation of the epoch znode) and sets a child watch on the epoch znode
// through its session; when the epoch's children are all its tasks it
// writes the completion itself (a multi of the check and the epoch znode's
// data). It begins the next epoch once its watch has seen every ack of the
// previous one, as a coordinator that keeps one checkpoint in flight does;
// the completion's write and the next begin are then in flight together
// (neither depends on the other). An epoch whose completion could not be
// written (the generation was superseded) stops the coordinator at its
// next begin.
//
// A manifest read lists the task's bucket znodes and each bucket (after a
// sync on the leader's session, for a linearizable read), then gets every
// segment znode pipelined as the compare-and-swap design does.

type leanEpochRecord struct {
	Generation uint64 `json:"generation"`
	Completed  bool   `json:"completed"`
}

type leanAckRecord struct {
	Generation uint64 `json:"generation"`
	First      uint64 `json:"first"`
	Segments   int    `json:"segments"`
	// FirstKey is the blob key of the ack's first segment (blob keys are
	// fresh for every ack): it tells a lost attempt of this ack from
	// another ack of the task.
	FirstKey string `json:"first_key,omitempty"`
}

func generationPath(job string) string { return jobPath(job) + "/generation" }
func ackPath(job, task string, epoch uint64) string {
	return epochPath(job, epoch) + "/" + task
}

// generationVersion is the version of the generation znode that holds
// generation g: it is created holding 1 and set once per new generation.
func generationVersion(g uint64) int32 { return int32(g - 1) }

// coordinator is what a job's coordinator and workers know: the generation
// they work for, the last epoch begun, the watches of the epochs whose
// completion is awaited and each task's next segment number.
type coordinator struct {
	mu         sync.Mutex
	generation uint64
	begun      uint64
	pending    map[uint64]*epochWatch
	next       map[string]uint64 // task → its next segment number, once known
	// ctx bounds the watches of this generation; cancel ends them.
	ctx    context.Context
	cancel context.CancelFunc
}

// epochWatch is the coordinator's watch of one epoch's acks: seen is
// closed once it has seen every task's ack (err nil) or the watch ended
// without (err says why); done once the completion is written (doneErr
// nil) or could not be.
type epochWatch struct {
	seen    chan struct{}
	err     error
	done    chan struct{}
	doneErr error
}

// fail ends the watch without its epoch's acks.
func (w *epochWatch) fail(err error) {
	w.err, w.doneErr = err, err
	close(w.seen)
	close(w.done)
}

// completed records the outcome of the completion's write.
func (w *epochWatch) completed(err error) {
	w.doneErr = err
	close(w.done)
}

func (s *System) newCoordinator(generation uint64) *coordinator {
	ctx, cancel := context.WithCancel(s.watchCtx)
	return &coordinator{generation: generation, pending: map[uint64]*epochWatch{}, next: map[string]uint64{}, ctx: ctx, cancel: cancel}
}

// coordinatorOf returns the job's coordinator state, reading the generation
// znode on first use.
func (s *System) coordinatorOf(ctx context.Context, c *zk.Conn, job string) (*coordinator, error) {
	s.jobsMu.Lock()
	co, ok := s.coords[job]
	s.jobsMu.Unlock()
	if ok {
		return co, nil
	}
	if err := syncPath(ctx, c, generationPath(job)); err != nil {
		return nil, fmt.Errorf("zksut: generation of %s: %w", job, err)
	}
	data, _, absent, err := get(ctx, c, generationPath(job))
	if err != nil {
		return nil, fmt.Errorf("zksut: generation of %s: %w", job, err)
	}
	if absent {
		return nil, fmt.Errorf("zksut: no job %s", job)
	}
	g, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("zksut: decode the generation of %s: %w", job, err)
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if co, ok := s.coords[job]; ok {
		return co, nil
	}
	co = s.newCoordinator(g)
	s.coords[job] = co
	return co, nil
}

// firstError returns the error of the first operation of a multi that
// failed and its position, or err itself (position -1) when the responses
// name none.
func firstError(res []zk.MultiResponse, err error) (int, error) {
	for i, r := range res {
		if r.Error != nil {
			return i, r.Error
		}
	}
	return -1, err
}

// leanCreateJob creates, in one multi, the job znode, its generation (1),
// the parents of its epochs and tasks, and each task's znode and segment
// root.
func (s *System) leanCreateJob(ctx context.Context, job string, tasks []string) error {
	if err := checkJob(job, tasks); err != nil {
		return err
	}
	c, err := s.session()
	if err != nil {
		return err
	}
	tasks = slices.Clone(tasks)
	jobData := mustJSON(jobRecord{Tasks: tasks})
	ops := []any{
		&zk.CreateRequest{Path: jobPath(job), Data: jobData, Acl: acl},
		&zk.CreateRequest{Path: generationPath(job), Data: []byte("1"), Acl: acl},
		&zk.CreateRequest{Path: epochsPath(job), Acl: acl},
		&zk.CreateRequest{Path: tasksPath(job), Acl: acl},
	}
	for _, t := range tasks {
		ops = append(ops,
			&zk.CreateRequest{Path: taskPath(job, t), Acl: acl},
			&zk.CreateRequest{Path: segRoot(job, t), Acl: acl})
	}
	sent := false
	for attempt := 0; ; attempt++ {
		_, err := c.Multi(ops...)
		switch {
		case err == nil:
		case transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: create job %s: %w", job, err)
			}
			continue
		case errors.Is(err, zk.ErrNodeExists):
			data, _, absent, gerr := get(ctx, c, jobPath(job))
			if gerr != nil {
				return fmt.Errorf("zksut: create job %s: %w", job, gerr)
			}
			if !sent || absent || string(data) != string(jobData) {
				return fmt.Errorf("zksut: job %s exists", job)
			}
		default:
			return fmt.Errorf("zksut: create job %s: %w", job, err)
		}
		co := s.newCoordinator(1)
		for _, t := range tasks {
			co.next[t] = 0 // a new task has no segments
		}
		s.jobsMu.Lock()
		s.jobs[job] = tasks
		s.coords[job] = co
		s.jobsMu.Unlock()
		return nil
	}
}

// leanBeginEpoch waits until the coordinator's watch has seen every ack
// of the previous epoch (when it began it) and begins epoch at the
// coordinator's generation.
func (s *System) leanBeginEpoch(ctx context.Context, job string, epoch uint64) error {
	c, err := s.sessionFor(job)
	if err != nil {
		return err
	}
	co, err := s.coordinatorOf(ctx, c, job)
	if err != nil {
		return err
	}
	co.mu.Lock()
	gen, begun, prev := co.generation, co.begun, co.pending[epoch-1]
	co.mu.Unlock()
	if epoch <= begun {
		return fmt.Errorf("zksut: begin epoch %d of %s: epoch %d has begun", epoch, job, begun)
	}
	if prev != nil {
		select {
		case <-prev.seen:
		case <-ctx.Done():
			return fmt.Errorf("zksut: begin epoch %d of %s: wait for the acks of epoch %d: %w", epoch, job, epoch-1, ctx.Err())
		}
		if prev.err != nil {
			return fmt.Errorf("zksut: begin epoch %d of %s: epoch %d did not complete: %w", epoch, job, epoch-1, prev.err)
		}
		select {
		case <-prev.done:
			if prev.doneErr != nil {
				return fmt.Errorf("zksut: begin epoch %d of %s: epoch %d did not complete: %w", epoch, job, epoch-1, prev.doneErr)
			}
		default: // the completion is being written
		}
	}
	return s.beginAs(ctx, c, co, job, gen, epoch)
}

// beginAs creates the epoch znode in a multi with the check of generation
// gen, then starts the coordinator's watch of the epoch's acks (when gen
// is still the coordinator's).
func (s *System) beginAs(ctx context.Context, c *zk.Conn, co *coordinator, job string, gen, epoch uint64) error {
	tasks, err := s.tasks(ctx, c, job)
	if err != nil {
		return err
	}
	data := mustJSON(leanEpochRecord{Generation: gen})
	sent := false
	for attempt := 0; ; attempt++ {
		res, err := c.Multi(
			&zk.CheckVersionRequest{Path: generationPath(job), Version: generationVersion(gen)},
			&zk.CreateRequest{Path: epochPath(job, epoch), Data: data, Acl: acl},
		)
		if err != nil && transient(err) {
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, err)
			}
			continue
		}
		if err != nil {
			i, cause := firstError(res, err)
			switch {
			case i == 0 && errors.Is(cause, zk.ErrBadVersion):
				return fmt.Errorf("zksut: begin epoch %d of %s at generation %d: %w", epoch, job, gen, sut.ErrFenced)
			case errors.Is(cause, zk.ErrNodeExists):
				got, _, absent, gerr := get(ctx, c, epochPath(job, epoch))
				if gerr != nil {
					return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, gerr)
				}
				if !sent || absent || string(got) != string(data) {
					return fmt.Errorf("zksut: begin epoch %d of %s: the epoch has begun", epoch, job)
				}
				// The attempt whose outcome was unknown committed.
			default:
				return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, cause)
			}
		}
		break
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.generation != gen {
		return nil
	}
	co.begun = max(co.begun, epoch)
	w := &epochWatch{seen: make(chan struct{}), done: make(chan struct{})}
	co.pending[epoch] = w
	for e := range co.pending {
		if e < epoch-1 {
			delete(co.pending, e)
		}
	}
	go s.awaitAcks(co.ctx, c, w, job, gen, epoch, len(tasks))
	return nil
}

// awaitAcks lists the epoch znode's children with a watch, again at every
// change, until every task's ack znode is there, then writes the epoch's
// completion in a multi with the check of generation gen.
func (s *System) awaitAcks(ctx context.Context, c *zk.Conn, w *epochWatch, job string, gen, epoch uint64, tasks int) {
	path := epochPath(job, epoch)
	for attempt := 0; ; {
		children, _, ch, err := c.ChildrenW(path)
		if err != nil {
			if !transient(err) {
				w.fail(fmt.Errorf("zksut: watch the acks of epoch %d of %s: %w", epoch, job, err))
				return
			}
			if err := backoff(ctx, attempt); err != nil {
				w.fail(err)
				return
			}
			attempt++
			continue
		}
		if len(children) >= tasks {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			w.fail(ctx.Err())
			return
		}
	}
	close(w.seen)
	done := mustJSON(leanEpochRecord{Generation: gen, Completed: true})
	for attempt := 0; ; attempt++ {
		res, err := c.Multi(
			&zk.CheckVersionRequest{Path: generationPath(job), Version: generationVersion(gen)},
			&zk.SetDataRequest{Path: path, Data: done, Version: -1},
		)
		switch {
		case err != nil && transient(err):
			if err := backoff(ctx, attempt); err != nil {
				w.completed(err)
				return
			}
			continue
		case err != nil:
			if i, cause := firstError(res, err); i == 0 && errors.Is(cause, zk.ErrBadVersion) {
				w.completed(fmt.Errorf("zksut: complete epoch %d of %s at generation %d: %w", epoch, job, gen, sut.ErrFenced))
			} else {
				w.completed(fmt.Errorf("zksut: complete epoch %d of %s: %w", epoch, job, cause))
			}
		default:
			s.completions.Add(1)
			w.completed(nil)
		}
		return
	}
}

// leanAck acknowledges epoch for task at the generation its coordinator
// holds.
func (s *System) leanAck(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	c, err := s.sessionFor(job + "/" + task)
	if err != nil {
		return err
	}
	co, err := s.coordinatorOf(ctx, c, job)
	if err != nil {
		return err
	}
	co.mu.Lock()
	gen := co.generation
	co.mu.Unlock()
	return s.ackAs(ctx, c, co, job, task, gen, epoch, add)
}

// nextSegment returns the task's next segment number: the one the worker
// keeps, or, when it keeps none, one more than the last segment znode in
// the task's buckets (read after a sync).
func (s *System) nextSegment(ctx context.Context, c *zk.Conn, co *coordinator, job, task string) (uint64, error) {
	co.mu.Lock()
	n, ok := co.next[task]
	co.mu.Unlock()
	if ok {
		return n, nil
	}
	if err := syncPath(ctx, c, segRoot(job, task)); err != nil {
		return 0, err
	}
	buckets, err := children(ctx, c, segRoot(job, task))
	if err != nil {
		return 0, err
	}
	if len(buckets) > 0 {
		last := slices.Max(buckets)
		segs, err := children(ctx, c, segRoot(job, task)+"/"+last)
		if err != nil {
			return 0, err
		}
		if len(segs) > 0 {
			i, err := strconv.ParseUint(slices.Max(segs), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("segment znode %s/%s: %w", last, slices.Max(segs), err)
			}
			n = i + 1
		}
	}
	co.mu.Lock()
	co.next[task] = n
	co.mu.Unlock()
	return n, nil
}

// children lists a znode's children, retrying transient errors.
func children(ctx context.Context, c *zk.Conn, path string) ([]string, error) {
	for attempt := 0; ; attempt++ {
		names, _, err := c.Children(path)
		if err == nil {
			return names, nil
		}
		if !transient(err) {
			return nil, fmt.Errorf("children of %s: %w", path, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, fmt.Errorf("children of %s: %w", path, err)
		}
	}
}

// ackAs commits the ack of epoch by task at generation gen: one multi of
// the generation check, the ack znode and the segment znodes.
func (s *System) ackAs(ctx context.Context, c *zk.Conn, co *coordinator, job, task string, gen, epoch uint64, add []sut.Segment) error {
	tasks, err := s.tasks(ctx, c, job)
	if err != nil {
		return err
	}
	if !slices.Contains(tasks, task) {
		return fmt.Errorf("zksut: ack: job %s has no task %s", job, task)
	}
	first, err := s.nextSegment(ctx, c, co, job, task)
	if err != nil {
		return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
	}
	// Unless the ack commits, the worker finds its next segment number
	// again before its next ack.
	committed := false
	defer func() {
		co.mu.Lock()
		defer co.mu.Unlock()
		if committed {
			co.next[task] = first + uint64(len(add))
		} else {
			delete(co.next, task)
		}
	}()
	rec := leanAckRecord{Generation: gen, First: first, Segments: len(add)}
	if len(add) > 0 {
		rec.FirstKey = add[0].Key
	}
	data := mustJSON(rec)
	ops := make([]any, 0, len(add)+len(add)/bucketSize+3)
	ops = append(ops,
		&zk.CheckVersionRequest{Path: generationPath(job), Version: generationVersion(gen)},
		&zk.CreateRequest{Path: ackPath(job, task, epoch), Data: data, Acl: acl})
	for i, sg := range add {
		idx := first + uint64(i)
		if idx%bucketSize == 0 {
			ops = append(ops, &zk.CreateRequest{Path: bucketPath(job, task, idx), Acl: acl})
		}
		ops = append(ops, &zk.CreateRequest{Path: segPath(job, task, idx), Data: mustJSON(segmentRecord(sg)), Acl: acl})
	}
	sent := false
	for attempt := 0; ; attempt++ {
		res, err := c.Multi(ops...)
		if err == nil {
			committed = true
			return nil
		}
		if transient(err) {
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			continue
		}
		i, cause := firstError(res, err)
		switch {
		case i == 0 && errors.Is(cause, zk.ErrBadVersion):
			return fmt.Errorf("zksut: ack %s/%s epoch %d at generation %d: %w", job, task, epoch, gen, sut.ErrFenced)
		case i == 1 && errors.Is(cause, zk.ErrNoNode):
			return fmt.Errorf("zksut: ack %s/%s: epoch %d has not begun", job, task, epoch)
		case i == 1 && errors.Is(cause, zk.ErrNodeExists):
			got, _, absent, gerr := get(ctx, c, ackPath(job, task, epoch))
			if gerr != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, gerr)
			}
			if sent && !absent && string(got) == string(data) {
				committed = true
				return nil // the attempt whose outcome was unknown committed
			}
			return fmt.Errorf("zksut: ack %s/%s epoch %d: the task has acknowledged the epoch", job, task, epoch)
		default:
			return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, cause)
		}
	}
}

// newGeneration sets the job's generation znode to the next generation, as
// a new coordinator of the job does when it takes over: acks and epochs of
// the old generation are refused from then on, and the old generation's
// watches end. It returns the old and the new generation.
func (s *System) newGeneration(ctx context.Context, job string) (uint64, uint64, error) {
	c, err := s.sessionFor(job)
	if err != nil {
		return 0, 0, err
	}
	co, err := s.coordinatorOf(ctx, c, job)
	if err != nil {
		return 0, 0, err
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	old := co.generation
	_, err = c.Set(generationPath(job), []byte(strconv.FormatUint(old+1, 10)), generationVersion(old))
	if errors.Is(err, zk.ErrBadVersion) {
		return 0, 0, fmt.Errorf("zksut: new generation of %s: generation %d is not current: %w", job, old, sut.ErrFenced)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("zksut: new generation of %s: %w", job, err)
	}
	co.cancel()
	co.ctx, co.cancel = context.WithCancel(s.watchCtx)
	co.generation = old + 1
	co.pending = map[uint64]*epochWatch{}
	return old, old + 1, nil
}

// leanNextEpoch returns the epoch after the last one the coordinator began.
func (s *System) leanNextEpoch(ctx context.Context, c *zk.Conn, job string) (uint64, error) {
	co, err := s.coordinatorOf(ctx, c, job)
	if err != nil {
		return 0, err
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.begun + 1, nil
}

// leanSegmentPaths lists the task's buckets and each bucket's segment
// znodes (after a sync when linearizable) and returns their paths in
// segment order.
func leanSegmentPaths(ctx context.Context, c *zk.Conn, job, task string, linearizable bool) ([]string, error) {
	root := segRoot(job, task)
	if linearizable {
		if err := syncPath(ctx, c, root); err != nil {
			return nil, err
		}
	}
	buckets, err := children(ctx, c, root)
	if err != nil {
		return nil, err
	}
	slices.Sort(buckets)
	var paths []string
	for _, b := range buckets {
		segs, err := children(ctx, c, root+"/"+b)
		if err != nil {
			return nil, err
		}
		slices.Sort(segs)
		for _, sg := range segs {
			paths = append(paths, root+"/"+b+"/"+sg)
		}
	}
	return paths, nil
}

// leanEpochState reads an epoch znode and counts its ack znodes, after a
// sync.
func (s *System) leanEpochState(ctx context.Context, job string, epoch uint64) (int, bool, error) {
	c, err := s.session()
	if err != nil {
		return 0, false, err
	}
	if err := syncPath(ctx, c, epochPath(job, epoch)); err != nil {
		return 0, false, err
	}
	var ep leanEpochRecord
	_, absent, err := getJSON(ctx, c, epochPath(job, epoch), &ep)
	if err != nil {
		return 0, false, err
	}
	if absent {
		return 0, false, fmt.Errorf("zksut: no epoch %d of %s", epoch, job)
	}
	acks, err := children(ctx, c, epochPath(job, epoch))
	if err != nil {
		return 0, false, err
	}
	return len(acks), ep.Completed, nil
}

// segments reads the task's manifest through the leader's session after a
// sync, decoded, in segment order (tests compare it with what was
// acknowledged).
func (s *System) segments(ctx context.Context, job, task string) ([]sut.Segment, error) {
	c, err := s.memberSession(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []sut.Segment
	var got []segmentRecord
	n, err := s.readSegments(ctx, c, job, task, true, func(i int, sg segmentRecord) {
		for len(got) <= i {
			got = append(got, segmentRecord{})
		}
		got[i] = sg
	})
	if err != nil {
		return nil, err
	}
	for _, sg := range got[:min(n, len(got))] {
		out = append(out, sut.Segment(sg))
	}
	return out, nil
}
