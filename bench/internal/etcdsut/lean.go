package etcdsut

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/metastore/metastore/bench/internal/sut"
)

// The lean design: no record is shared by the tasks of a job, so their
// acks never conflict.
//
//	/jobs/J                              {"tasks":["t1","t2"]}                       job
//	/jobs/J/generation                   00000000000000000001                         the job's generation (the fence)
//	/jobs/J/epochs/EEEE…(20)             {"generation":1,"completed":false}           epoch, begun; completed by the coordinator
//	/jobs/J/acks/EEEE…(20)/T             {"generation":1,"segments":3,"first_key":…} task T's ack of the epoch
//	/jobs/J/tasks/T/seg/EEEE…(20)/III(4) {"key":…,"offset":…,"length":…,"first_seq":…,"last_seq":…}
//
// An ack is one transaction: If the generation key holds the generation
// the task works for, the epoch record exists and the task's ack record of
// the epoch does not, Then put the ack record and one record per segment
// (keyed by epoch and position, so the manifest's key order is ack order).
// A task of a generation that has been superseded (a new coordinator bumped
// the generation key) is refused: the fence. A repeated ack of an epoch is
// refused by the ack record's existence.
//
// The coordinator watches the epoch's ack prefix (the watch created, from
// the current revision, before the epoch begins) and begins the epoch with
// one transaction (If the generation is its own and the epoch record is
// absent, Then put the epoch record). When every task's ack record has
// appeared it writes the completion itself (If the generation is its own,
// Then put the epoch record completed). It begins the next epoch once its
// watch has seen every ack of the previous one, as a coordinator that
// keeps one checkpoint in flight does; the completion's write and the next
// begin are then in flight together (neither depends on the other). An
// epoch whose completion could not be written (the generation was
// superseded) stops the coordinator at its next begin.
//
// The generation, the tasks and the last epoch begun are kept by the
// System for each job (read from etcd on first use), as a worker and its
// coordinator keep what they were started with.

type leanEpochRecord struct {
	Generation uint64 `json:"generation"`
	Completed  bool   `json:"completed"`
}

type leanAckRecord struct {
	Generation uint64 `json:"generation"`
	Segments   int    `json:"segments"`
	// FirstKey is the blob key of the ack's first segment (blob keys are
	// fresh for every ack): it tells a lost attempt of this ack from
	// another ack of the task.
	FirstKey string `json:"first_key,omitempty"`
}

func generationKey(job string) string { return jobKey(job) + "/generation" }
func generationValue(g uint64) string { return fmt.Sprintf("%020d", g) }
func ackPrefix(job string, epoch uint64) string {
	return fmt.Sprintf("%s/acks/%020d/", jobKey(job), epoch)
}
func ackKey(job, task string, epoch uint64) string { return ackPrefix(job, epoch) + task }
func leanSegKey(job, task string, epoch uint64, i int) string {
	return fmt.Sprintf("%s%020d/%04d", segPrefix(job, task), epoch, i)
}

// coordinator is what a job's coordinator and workers know: the generation
// they work for, the last epoch begun, and the watches of the epochs whose
// completion is awaited.
type coordinator struct {
	mu         sync.Mutex
	generation uint64
	begun      uint64
	pending    map[uint64]*epochWatch
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

func (s *System) newCoordinator(generation, begun uint64) *coordinator {
	ctx, cancel := context.WithCancel(s.watchCtx)
	return &coordinator{generation: generation, begun: begun, pending: map[uint64]*epochWatch{}, ctx: ctx, cancel: cancel}
}

// coordinatorOf returns the job's coordinator state, reading the generation
// key on first use.
func (s *System) coordinatorOf(ctx context.Context, cli *clientv3.Client, job string) (*coordinator, error) {
	s.jobsMu.Lock()
	co, ok := s.coords[job]
	s.jobsMu.Unlock()
	if ok {
		return co, nil
	}
	r, err := read(ctx, cli, clientv3.OpGet(generationKey(job)))
	if err != nil {
		return nil, fmt.Errorf("etcdsut: read the generation of %s: %w", job, err)
	}
	kvs := rangeOf(r, 0).Kvs
	if len(kvs) == 0 {
		return nil, fmt.Errorf("etcdsut: no job %s", job)
	}
	var g uint64
	if _, err := fmt.Sscan(string(kvs[0].Value), &g); err != nil {
		return nil, fmt.Errorf("etcdsut: decode the generation of %s: %w", job, err)
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if co, ok := s.coords[job]; ok {
		return co, nil
	}
	co = s.newCoordinator(g, 0)
	s.coords[job] = co
	return co, nil
}

// leanCreateJob writes the job record and its generation (1) in one
// transaction that requires the job not to exist.
func (s *System) leanCreateJob(ctx context.Context, job string, tasks []string) error {
	if err := checkJob(job, tasks); err != nil {
		return err
	}
	cli, err := s.client()
	if err != nil {
		return err
	}
	tasks = slices.Clone(tasks)
	jk := jobKey(job)
	jobValue := mustJSON(jobRecord{Tasks: tasks})
	sent := false
	for attempt := 0; ; attempt++ {
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(jk), "=", 0)).
			Then(clientv3.OpPut(jk, jobValue), clientv3.OpPut(generationKey(job), generationValue(1))).
			Else(clientv3.OpGet(jk)).
			Commit()
		if err != nil {
			if !transient(err) {
				return fmt.Errorf("etcdsut: create job %s: %w", job, err)
			}
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("etcdsut: create job %s: %w", job, err)
			}
			continue
		}
		if !r.Succeeded {
			kvs := rangeOf(r, 0).Kvs
			if !sent || len(kvs) == 0 || string(kvs[0].Value) != jobValue {
				return fmt.Errorf("etcdsut: job %s exists", job)
			}
		}
		s.jobsMu.Lock()
		s.jobs[job] = tasks
		s.coords[job] = s.newCoordinator(1, 0)
		s.jobsMu.Unlock()
		return nil
	}
}

// leanBeginEpoch waits until the coordinator's watch has seen every ack
// of the previous epoch (when it began it) and begins epoch at the
// coordinator's generation.
func (s *System) leanBeginEpoch(ctx context.Context, job string, epoch uint64) error {
	cli, err := s.client()
	if err != nil {
		return err
	}
	co, err := s.coordinatorOf(ctx, cli, job)
	if err != nil {
		return err
	}
	co.mu.Lock()
	gen, begun, prev := co.generation, co.begun, co.pending[epoch-1]
	co.mu.Unlock()
	if epoch <= begun {
		return fmt.Errorf("etcdsut: begin epoch %d of %s: epoch %d has begun", epoch, job, begun)
	}
	if prev != nil {
		select {
		case <-prev.seen:
		case <-ctx.Done():
			return fmt.Errorf("etcdsut: begin epoch %d of %s: wait for the acks of epoch %d: %w", epoch, job, epoch-1, ctx.Err())
		}
		if prev.err != nil {
			return fmt.Errorf("etcdsut: begin epoch %d of %s: epoch %d did not complete: %w", epoch, job, epoch-1, prev.err)
		}
		select {
		case <-prev.done:
			if prev.doneErr != nil {
				return fmt.Errorf("etcdsut: begin epoch %d of %s: epoch %d did not complete: %w", epoch, job, epoch-1, prev.doneErr)
			}
		default: // the completion is being written
		}
	}
	return s.beginAs(ctx, cli, co, job, gen, epoch)
}

// beginAs puts the epoch record in a transaction guarded by generation gen
// and the record's absence, then starts the coordinator's watch of the
// epoch's acks (when gen is still the coordinator's).
func (s *System) beginAs(ctx context.Context, cli *clientv3.Client, co *coordinator, job string, gen, epoch uint64) error {
	tasks, err := s.tasks(ctx, cli, job)
	if err != nil {
		return err
	}
	// The watch of the epoch's acks is set up first, from the current
	// revision: a watch created from a past revision is caught up by the
	// server's background sync (every 100 ms), a watch from the present
	// is sent each event as it commits.
	co.mu.Lock()
	coCtx := co.ctx
	co.mu.Unlock()
	watchCtx, stop := context.WithCancel(coCtx)
	wch := cli.Watch(watchCtx, ackPrefix(job, epoch), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	handed := false
	defer func() {
		if !handed {
			stop()
		}
	}()
	from, err := watchCreated(ctx, wch)
	if err != nil {
		return fmt.Errorf("etcdsut: begin epoch %d of %s: watch its acks: %w", epoch, job, err)
	}

	gk, ek := generationKey(job), epochKey(job, epoch)
	value := mustJSON(leanEpochRecord{Generation: gen})
	sent := false
	for attempt := 0; ; attempt++ {
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(gk), "=", generationValue(gen)),
				clientv3.Compare(clientv3.CreateRevision(ek), "=", 0)).
			Then(clientv3.OpPut(ek, value)).
			Else(clientv3.OpGet(gk), clientv3.OpGet(ek)).
			Commit()
		if err != nil {
			if !transient(err) {
				return fmt.Errorf("etcdsut: begin epoch %d of %s: %w", epoch, job, err)
			}
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("etcdsut: begin epoch %d of %s: %w", epoch, job, err)
			}
			continue
		}
		if r.Succeeded {
			break
		}
		if g := rangeOf(r, 0).Kvs; len(g) == 0 || string(g[0].Value) != generationValue(gen) {
			return fmt.Errorf("etcdsut: begin epoch %d of %s at generation %d: %w", epoch, job, gen, sut.ErrFenced)
		}
		e := rangeOf(r, 1).Kvs
		if !sent || len(e) == 0 || string(e[0].Value) != value {
			return fmt.Errorf("etcdsut: begin epoch %d of %s: the epoch has begun", epoch, job)
		}
		break // the attempt whose outcome was unknown committed
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
	handed = true
	go s.awaitAcks(co.ctx, cli, w, job, gen, epoch, len(tasks), wch, stop, from)
	return nil
}

// watchCreated waits for the created notification of a watch made with
// WithCreatedNotify and returns the first revision the watch reports.
func watchCreated(ctx context.Context, wch clientv3.WatchChan) (int64, error) {
	select {
	case resp, ok := <-wch:
		switch {
		case !ok:
			return 0, errors.New("the watch was closed")
		case resp.Err() != nil:
			return 0, resp.Err()
		case !resp.Created:
			return 0, errors.New("the watch reported before it was created")
		}
		return resp.Header.Revision + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// awaitAcks reads the watch wch of the epoch's ack prefix (stop ends it;
// from is the first revision it reports) until every task's ack record
// has been put, then writes the epoch's completion guarded by generation
// gen. A watch that breaks (its member lost, its history compacted) is
// opened again from the revision after the last event seen.
func (s *System) awaitAcks(ctx context.Context, cli *clientv3.Client, w *epochWatch, job string, gen, epoch uint64, tasks int, wch clientv3.WatchChan, stop context.CancelFunc, from int64) {
	prefix := ackPrefix(job, epoch)
	seen := map[string]bool{}
	for attempt := 0; len(seen) < tasks; attempt++ {
		if ctx.Err() != nil {
			stop()
			w.fail(ctx.Err())
			return
		}
		if wch == nil {
			var wctx context.Context
			wctx, stop = context.WithCancel(ctx)
			wch = cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
		}
		for resp := range wch {
			if resp.CompactRevision != 0 {
				// The history from `from` is gone: what it held is in
				// the prefix as it is now.
				r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
				if err == nil {
					for _, kv := range r.Kvs {
						seen[string(kv.Key)] = true
					}
					from = r.Header.Revision + 1
				}
				break
			}
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					seen[string(ev.Kv.Key)] = true
				}
				from = ev.Kv.ModRevision + 1
			}
			if len(seen) >= tasks {
				break
			}
		}
		stop()
		wch = nil
		if len(seen) < tasks {
			if err := backoff(ctx, attempt); err != nil {
				w.fail(err)
				return
			}
		}
	}
	close(w.seen)
	gk, ek := generationKey(job), epochKey(job, epoch)
	for attempt := 0; ; attempt++ {
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(gk), "=", generationValue(gen))).
			Then(clientv3.OpPut(ek, mustJSON(leanEpochRecord{Generation: gen, Completed: true}))).
			Commit()
		switch {
		case err != nil && transient(err):
			if err := backoff(ctx, attempt); err != nil {
				w.completed(err)
				return
			}
			continue
		case err != nil:
			w.completed(fmt.Errorf("etcdsut: complete epoch %d of %s: %w", epoch, job, err))
		case !r.Succeeded:
			w.completed(fmt.Errorf("etcdsut: complete epoch %d of %s at generation %d: %w", epoch, job, gen, sut.ErrFenced))
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
	cli, err := s.client()
	if err != nil {
		return err
	}
	co, err := s.coordinatorOf(ctx, cli, job)
	if err != nil {
		return err
	}
	co.mu.Lock()
	gen := co.generation
	co.mu.Unlock()
	return s.ackAs(ctx, cli, job, task, gen, epoch, add)
}

// ackAs commits the ack of epoch by task at generation gen: one transaction
// guarded by the generation, the epoch's existence and the ack record's
// absence, putting the ack record and the segment records.
func (s *System) ackAs(ctx context.Context, cli *clientv3.Client, job, task string, gen, epoch uint64, add []sut.Segment) error {
	if len(add)+1 > maxTxnOps {
		return fmt.Errorf("etcdsut: ack of %d segments exceeds the %d operations of a transaction", len(add), maxTxnOps)
	}
	tasks, err := s.tasks(ctx, cli, job)
	if err != nil {
		return err
	}
	if !slices.Contains(tasks, task) {
		return fmt.Errorf("etcdsut: ack: job %s has no task %s", job, task)
	}
	rec := leanAckRecord{Generation: gen, Segments: len(add)}
	if len(add) > 0 {
		rec.FirstKey = add[0].Key
	}
	gk, ek, ak := generationKey(job), epochKey(job, epoch), ackKey(job, task, epoch)
	ackValue := mustJSON(rec)
	ops := make([]clientv3.Op, 0, len(add)+1)
	ops = append(ops, clientv3.OpPut(ak, ackValue))
	for i, sg := range add {
		ops = append(ops, clientv3.OpPut(leanSegKey(job, task, epoch, i), mustJSON(segmentRecord(sg))))
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(gk), "=", generationValue(gen)),
		clientv3.Compare(clientv3.CreateRevision(ek), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(ak), "=", 0)}
	els := []clientv3.Op{clientv3.OpGet(gk), clientv3.OpGet(ek, clientv3.WithKeysOnly()), clientv3.OpGet(ak)}
	sent := false
	for attempt := 0; ; attempt++ {
		var r *clientv3.TxnResponse
		var err error
		if s.acks != nil && attempt == 0 {
			// Batched design: the first attempt may travel with other
			// acks; a repeat goes alone.
			r, err = s.acks.commit(ctx, cli, cmps, ops, els)
		} else {
			r, err = cli.Txn(ctx).If(cmps...).Then(ops...).Else(els...).Commit()
		}
		if err != nil {
			if !transient(err) {
				return fmt.Errorf("etcdsut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("etcdsut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			continue
		}
		if r.Succeeded {
			return nil
		}
		if g := rangeOf(r, 0).Kvs; len(g) == 0 || string(g[0].Value) != generationValue(gen) {
			return fmt.Errorf("etcdsut: ack %s/%s epoch %d at generation %d: %w", job, task, epoch, gen, sut.ErrFenced)
		}
		if len(rangeOf(r, 1).Kvs) == 0 {
			return fmt.Errorf("etcdsut: ack %s/%s: epoch %d has not begun", job, task, epoch)
		}
		if a := rangeOf(r, 2).Kvs; sent && len(a) == 1 && string(a[0].Value) == ackValue {
			return nil // the attempt whose outcome was unknown committed
		}
		return fmt.Errorf("etcdsut: ack %s/%s epoch %d: the task has acknowledged the epoch", job, task, epoch)
	}
}

// newGeneration bumps the job's generation, as a new coordinator of the
// job does when it takes over: acks and epochs of the old generation are
// refused from then on, and the old generation's watches end. It returns
// the old and the new generation.
func (s *System) newGeneration(ctx context.Context, job string) (uint64, uint64, error) {
	cli, err := s.client()
	if err != nil {
		return 0, 0, err
	}
	co, err := s.coordinatorOf(ctx, cli, job)
	if err != nil {
		return 0, 0, err
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	old := co.generation
	gk := generationKey(job)
	r, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(gk), "=", generationValue(old))).
		Then(clientv3.OpPut(gk, generationValue(old+1))).
		Commit()
	if err != nil {
		return 0, 0, fmt.Errorf("etcdsut: new generation of %s: %w", job, err)
	}
	if !r.Succeeded {
		return 0, 0, fmt.Errorf("etcdsut: new generation of %s: generation %d is not current: %w", job, old, sut.ErrFenced)
	}
	co.cancel()
	co.ctx, co.cancel = context.WithCancel(s.watchCtx)
	co.generation = old + 1
	co.pending = map[uint64]*epochWatch{}
	return old, old + 1, nil
}

// leanNextEpoch returns the epoch after the last one the coordinator began.
func (s *System) leanNextEpoch(ctx context.Context, cli *clientv3.Client, job string) (uint64, error) {
	co, err := s.coordinatorOf(ctx, cli, job)
	if err != nil {
		return 0, err
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.begun + 1, nil
}

// leanEpochState reads an epoch record and counts its ack records.
func (s *System) leanEpochState(ctx context.Context, job string, epoch uint64) (acks int, completed bool, err error) {
	cli, err := s.client()
	if err != nil {
		return 0, false, err
	}
	r, err := read(ctx, cli, clientv3.OpGet(epochKey(job, epoch)), clientv3.OpGet(ackPrefix(job, epoch), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	if err != nil {
		return 0, false, err
	}
	var ep leanEpochRecord
	rev, err := decodeRange(rangeOf(r, 0), epochKey(job, epoch), &ep)
	if err != nil {
		return 0, false, err
	}
	if rev == 0 {
		return 0, false, fmt.Errorf("etcdsut: no epoch %d of %s", epoch, job)
	}
	return int(rangeOf(r, 1).Count), ep.Completed, nil
}

// segments reads the task's manifest from the leader, decoded, in key
// order (tests compare it with what was acknowledged).
func (s *System) segments(ctx context.Context, job, task string) ([]sut.Segment, error) {
	cli, err := s.memberClient(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []sut.Segment
	_, err = readSegments(ctx, cli, segPrefix(job, task), false, func(sg segmentRecord) { out = append(out, sut.Segment(sg)) })
	return out, err
}
