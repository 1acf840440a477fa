package zksut

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metastore/metastore/bench/internal/sut"
)

const (
	// bucketSize is the number of segment znodes per bucket znode.
	bucketSize = 1000
	// readPipeline is the number of segment reads a manifest read keeps
	// in flight on its session.
	readPipeline = 64
	// preloadBatch is the number of segments Preload adds per ack.
	preloadBatch = 1000
)

type jobRecord struct {
	Tasks []string `json:"tasks"`
}

type currentRecord struct {
	Epoch uint64 `json:"epoch"`
}

type epochRecord struct {
	Tasks     int  `json:"tasks"`
	Acks      int  `json:"acks"`
	Completed bool `json:"completed"`
}

type taskRecord struct {
	AckedEpoch uint64 `json:"acked_epoch"`
	Segments   uint64 `json:"segments"`
}

type segmentRecord struct {
	Key      string `json:"key"`
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

func jobPath(job string) string     { return rootPath + "/" + job }
func currentPath(job string) string { return jobPath(job) + "/current" }
func epochsPath(job string) string  { return jobPath(job) + "/epochs" }
func epochPath(job string, epoch uint64) string {
	return fmt.Sprintf("%s/%020d", epochsPath(job), epoch)
}
func tasksPath(job string) string      { return jobPath(job) + "/tasks" }
func taskPath(job, task string) string { return tasksPath(job) + "/" + task }
func segRoot(job, task string) string  { return taskPath(job, task) + "/seg" }
func bucketPath(job, task string, i uint64) string {
	return fmt.Sprintf("%s/%06d", segRoot(job, task), i/bucketSize)
}
func segPath(job, task string, i uint64) string {
	return fmt.Sprintf("%s/%09d", bucketPath(job, task, i), i)
}

var acl = zk.WorldACL(zk.PermAll)

// checkName refuses names that would break the znode layout.
func checkName(kind, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("zksut: invalid %s name %q (empty, '.', '..', or holds '/' or NUL)", kind, name)
	}
	return nil
}

// checkJob refuses a job name or task list that would break the znode
// layout, an empty task list and a task listed twice.
func checkJob(job string, tasks []string) error {
	if err := checkName("job", job); err != nil {
		return err
	}
	if len(tasks) == 0 {
		return fmt.Errorf("zksut: job %s has no tasks", job)
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		if err := checkName("task", t); err != nil {
			return err
		}
		if seen[t] {
			return fmt.Errorf("zksut: job %s lists task %s twice", job, t)
		}
		seen[t] = true
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("zksut: encode %T: %v", v, err))
	}
	return b
}

// transient reports whether err leaves a request's outcome open to a
// retry: the session lost its connection or was replaced.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// absentRetries bounds the sync-and-read rounds of an ack that finds its
// epoch znode missing.
const absentRetries = 8

// conflict reports whether an ack's multi failed because another writer
// changed what it was conditional on: a znode's version, or the existence
// of the task znode its first ack creates.
func conflict(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists)
}

// backoff waits before a retry after a transient error.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(min(attempt+1, 10)) * 50 * time.Millisecond
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// get reads a znode, retrying transient errors; absent reports ErrNoNode.
func get(ctx context.Context, c *zk.Conn, path string) (data []byte, version int32, absent bool, err error) {
	for attempt := 0; ; attempt++ {
		data, st, err := c.Get(path)
		switch {
		case err == nil:
			return data, st.Version, false, nil
		case errors.Is(err, zk.ErrNoNode):
			return nil, 0, true, nil
		case !transient(err):
			return nil, 0, false, fmt.Errorf("get %s: %w", path, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, 0, false, fmt.Errorf("get %s: %w", path, err)
		}
	}
}

// syncPath makes the session's member catch up with the leader (a sync
// on path), retrying transient errors.
func syncPath(ctx context.Context, c *zk.Conn, path string) error {
	for attempt := 0; ; attempt++ {
		_, err := c.Sync(path)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !transient(err) {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
}

// getJSON reads a znode into v; absent reports ErrNoNode.
func getJSON(ctx context.Context, c *zk.Conn, path string, v any) (version int32, absent bool, err error) {
	data, version, absent, err := get(ctx, c, path)
	if err != nil || absent {
		return 0, absent, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return 0, false, fmt.Errorf("decode %s: %w", path, err)
	}
	return version, false, nil
}

// getJSONSynced is getJSON, but when the znode is absent it syncs and
// reads again: it may have been created through another session, and the
// session's member may not have applied that yet.
func getJSONSynced(ctx context.Context, c *zk.Conn, path string, v any) (version int32, absent bool, err error) {
	version, absent, err = getJSON(ctx, c, path, v)
	if err != nil || !absent {
		return version, absent, err
	}
	if err := syncPath(ctx, c, path); err != nil {
		return 0, false, err
	}
	return getJSON(ctx, c, path, v)
}

// tasks returns the tasks of job, from the job znode read once.
func (s *System) tasks(ctx context.Context, c *zk.Conn, job string) ([]string, error) {
	s.jobsMu.Lock()
	t, ok := s.jobs[job]
	s.jobsMu.Unlock()
	if ok {
		return t, nil
	}
	var rec jobRecord
	_, absent, err := getJSONSynced(ctx, c, jobPath(job), &rec)
	if err != nil {
		return nil, fmt.Errorf("zksut: read job %s: %w", job, err)
	}
	if absent {
		return nil, fmt.Errorf("zksut: no job %s", job)
	}
	s.jobsMu.Lock()
	s.jobs[job] = rec.Tasks
	s.jobsMu.Unlock()
	return rec.Tasks, nil
}

// casCreateJob creates the job znode (with the task list), its current-epoch
// znode (epoch 0) and the parents of its epochs and tasks in one multi.
func (s *System) casCreateJob(ctx context.Context, job string, tasks []string) error {
	if err := checkJob(job, tasks); err != nil {
		return err
	}
	c, err := s.session()
	if err != nil {
		return err
	}
	tasks = slices.Clone(tasks)
	jobData := mustJSON(jobRecord{Tasks: tasks})
	sent := false
	for attempt := 0; ; attempt++ {
		_, err := c.Multi(
			&zk.CreateRequest{Path: jobPath(job), Data: jobData, Acl: acl},
			&zk.CreateRequest{Path: currentPath(job), Data: mustJSON(currentRecord{}), Acl: acl},
			&zk.CreateRequest{Path: epochsPath(job), Acl: acl},
			&zk.CreateRequest{Path: tasksPath(job), Acl: acl},
		)
		switch {
		case err == nil:
		case transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: create job %s: %w", job, err)
			}
			continue
		case errors.Is(err, zk.ErrNodeExists):
			// A lost attempt of this call may have created the job.
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
		s.jobsMu.Lock()
		s.jobs[job] = tasks
		s.jobsMu.Unlock()
		return nil
	}
}

// casBeginEpoch sets the current-epoch znode, at the version read, and
// creates the epoch znode (no acks yet) in one multi.
func (s *System) casBeginEpoch(ctx context.Context, job string, epoch uint64) error {
	c, err := s.sessionFor(job)
	if err != nil {
		return err
	}
	tasks, err := s.tasks(ctx, c, job)
	if err != nil {
		return err
	}
	sent := false
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, err)
		}
		var cur currentRecord
		version, absent, err := getJSONSynced(ctx, c, currentPath(job), &cur)
		if err != nil {
			return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, err)
		}
		if absent {
			return fmt.Errorf("zksut: begin epoch %d: no job %s", epoch, job)
		}
		if sent && cur.Epoch == epoch {
			return nil // the attempt whose outcome was unknown committed
		}
		if cur.Epoch >= epoch {
			return fmt.Errorf("zksut: begin epoch %d of %s: epoch %d has begun", epoch, job, cur.Epoch)
		}
		_, err = c.Multi(
			&zk.SetDataRequest{Path: currentPath(job), Data: mustJSON(currentRecord{Epoch: epoch}), Version: version},
			&zk.CreateRequest{Path: epochPath(job, epoch), Data: mustJSON(epochRecord{Tasks: len(tasks)}), Acl: acl},
		)
		switch {
		case err == nil:
			return nil
		case transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, err)
			}
		case errors.Is(err, zk.ErrBadVersion):
			s.retries.Add(1)
		default:
			return fmt.Errorf("zksut: begin epoch %d of %s: %w", epoch, job, err)
		}
	}
}

// casAck reads the epoch and task znodes and commits, in one multi
// conditional on their versions, the new segment znodes, the task znode
// and the epoch znode; on a conflict it reads again and retries.
func (s *System) casAck(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	c, err := s.sessionFor(job + "/" + task)
	if err != nil {
		return err
	}
	tasks, err := s.tasks(ctx, c, job)
	if err != nil {
		return err
	}
	if !slices.Contains(tasks, task) {
		return fmt.Errorf("zksut: ack: job %s has no task %s", job, task)
	}
	segs := make([][]byte, len(add))
	for i, sg := range add {
		segs[i] = mustJSON(segmentRecord(sg))
	}
	sent, synced := false, false // synced: a sync precedes this read
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
		}
		var ep epochRecord
		var tr taskRecord
		get := getJSONSynced
		if synced {
			get = getJSON
		}
		ever, eabsent, err := get(ctx, c, epochPath(job, epoch), &ep)
		if err != nil {
			return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
		}
		synced = false
		for wait := 0; eabsent && wait < absentRetries; wait++ {
			// Seen under load: the epoch znode created (and acknowledged)
			// through the coordinator's session is still missing after a
			// sync on this one. Sync and read again for a while before
			// calling the epoch not begun.
			if err := backoff(ctx, wait); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			s.absentRetries.Add(1)
			if err := syncPath(ctx, c, epochPath(job, epoch)); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			if ever, eabsent, err = getJSON(ctx, c, epochPath(job, epoch), &ep); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
		}
		if eabsent {
			return fmt.Errorf("zksut: ack %s/%s: epoch %d has not begun", job, task, epoch)
		}
		tver, tabsent, err := getJSON(ctx, c, taskPath(job, task), &tr)
		if err != nil {
			return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
		}
		if sent && tr.AckedEpoch == epoch {
			return nil // the attempt whose outcome was unknown committed
		}
		if tr.AckedEpoch >= epoch {
			return fmt.Errorf("zksut: ack %s/%s epoch %d: task has acknowledged epoch %d", job, task, epoch, tr.AckedEpoch)
		}
		if ep.Acks >= ep.Tasks {
			return fmt.Errorf("zksut: ack %s/%s: epoch %d is complete", job, task, epoch)
		}
		ops := make([]any, 0, len(segs)+len(segs)/bucketSize+4)
		first := tr.Segments
		tr.AckedEpoch = epoch
		tr.Segments += uint64(len(segs))
		if tabsent {
			ops = append(ops,
				&zk.CreateRequest{Path: taskPath(job, task), Data: mustJSON(tr), Acl: acl},
				&zk.CreateRequest{Path: segRoot(job, task), Acl: acl})
		} else {
			ops = append(ops, &zk.SetDataRequest{Path: taskPath(job, task), Data: mustJSON(tr), Version: tver})
		}
		for i, data := range segs {
			idx := first + uint64(i)
			if idx%bucketSize == 0 {
				ops = append(ops, &zk.CreateRequest{Path: bucketPath(job, task, idx), Acl: acl})
			}
			ops = append(ops, &zk.CreateRequest{Path: segPath(job, task, idx), Data: data, Acl: acl})
		}
		ep.Acks++
		ep.Completed = ep.Acks == ep.Tasks
		ops = append(ops, &zk.SetDataRequest{Path: epochPath(job, epoch), Data: mustJSON(ep), Version: ever})
		if s.beforeCommit != nil {
			s.beforeCommit(job, task)
		}
		_, err = c.Multi(ops...)
		switch {
		case err == nil:
			return nil
		case transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
		case conflict(err):
			s.retries.Add(1)
			// Read what the conflicting writer wrote, not an older
			// state the session's member may still hold.
			if err := syncPath(ctx, c, epochPath(job, epoch)); err != nil {
				return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			synced = true
		default:
			return fmt.Errorf("zksut: ack %s/%s epoch %d: %w", job, task, epoch, err)
		}
	}
}

// Keys makes up n blob keys, unique across Systems and calls: a key-value
// store hands out no upload slots.
func (s *System) Keys(ctx context.Context, job, task string, n int) ([]string, error) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%s/%s-%d", job, task, s.keyPrefix, s.keySeq.Add(1))
	}
	return keys, nil
}

// ReadManifest finds the task's segment znodes (compare-and-swap design:
// the count in the task znode; lean design: the listings of its buckets)
// and then gets and decodes every one, readPipeline requests in flight at
// a time on one session. Without stale the session is on the leader and a sync
// precedes the reads; with stale it is on a follower and there is no sync.
func (s *System) ReadManifest(ctx context.Context, job, task string, stale bool) (int, error) {
	if _, err := s.session(); err != nil {
		return 0, err
	}
	c, err := s.memberSession(ctx, stale)
	if err != nil {
		return 0, err
	}
	n, err := s.readSegments(ctx, c, job, task, !stale, nil)
	if err != nil {
		return 0, fmt.Errorf("zksut: read manifest of %s/%s: %w", job, task, err)
	}
	return n, nil
}

// casSegmentPaths returns the paths of the task's segment znodes, in
// order, from the count in its task znode, after a sync when linearizable.
func casSegmentPaths(ctx context.Context, c *zk.Conn, job, task string, linearizable bool) ([]string, error) {
	if linearizable {
		if err := syncPath(ctx, c, taskPath(job, task)); err != nil {
			return nil, err
		}
	}
	var tr taskRecord
	if _, _, err := getJSON(ctx, c, taskPath(job, task), &tr); err != nil {
		return nil, err
	}
	paths := make([]string, tr.Segments)
	for i := range paths {
		paths[i] = segPath(job, task, uint64(i))
	}
	return paths, nil
}

// readSegments reads the task's segment znodes (from the task znode's
// count, or with lean from the bucket listings) and decodes them.
func (s *System) readSegments(ctx context.Context, c *zk.Conn, job, task string, linearizable bool, visit func(int, segmentRecord)) (int, error) {
	list := casSegmentPaths
	if s.lean {
		list = leanSegmentPaths
	}
	paths, err := list(ctx, c, job, task, linearizable)
	if err != nil {
		return 0, err
	}
	if err := getSegments(ctx, c, paths, visit); err != nil {
		return 0, err
	}
	return len(paths), nil
}

// getSegments gets and decodes the segment znodes at paths, readPipeline
// requests in flight at a time on session c, and hands each to visit (when
// not nil) with its position in paths.
func getSegments(ctx context.Context, c *zk.Conn, paths []string, visit func(int, segmentRecord)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var next atomic.Uint64
	var wg sync.WaitGroup
	for range min(readPipeline, len(paths)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= uint64(len(paths)) {
					return
				}
				path := paths[i]
				var sg segmentRecord
				_, absent, err := getJSON(ctx, c, path, &sg)
				if err == nil && absent {
					err = fmt.Errorf("segment %s is missing", path)
				}
				if err != nil {
					cancel(err)
					return
				}
				if visit != nil {
					mu.Lock()
					visit(int(i), sg)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// Preload gives the job's only task n segments in acks of preloadBatch
// segments, each in an epoch of its own, and returns the next epoch.
func (s *System) Preload(ctx context.Context, job, task string, n int) (uint64, error) {
	c, err := s.session()
	if err != nil {
		return 0, err
	}
	tasks, err := s.tasks(ctx, c, job)
	if err != nil {
		return 0, err
	}
	if len(tasks) != 1 || tasks[0] != task {
		return 0, fmt.Errorf("zksut: preload: job %s has tasks %v, not only %s", job, tasks, task)
	}
	next, err := s.nextEpoch(ctx, c, job)
	if err != nil {
		return 0, fmt.Errorf("zksut: preload %s: %w", job, err)
	}
	var seq uint64
	for done := 0; done < n; {
		b := min(preloadBatch, n-done)
		keys, err := s.Keys(ctx, job, task, b)
		if err != nil {
			return 0, err
		}
		add := make([]sut.Segment, b)
		for i := range add {
			add[i] = sut.Segment{Key: keys[i], Length: 1 << 20, FirstSeq: seq + 1, LastSeq: seq + 100}
			seq += 100
		}
		if err := s.BeginEpoch(ctx, job, next); err != nil {
			return 0, err
		}
		if err := s.Ack(ctx, job, task, next, add); err != nil {
			return 0, err
		}
		next++
		done += b
	}
	return next, nil
}

// casNextEpoch returns the epoch after the job's current one.
func (s *System) casNextEpoch(ctx context.Context, c *zk.Conn, job string) (uint64, error) {
	var cur currentRecord
	if _, _, err := getJSON(ctx, c, currentPath(job), &cur); err != nil {
		return 0, err
	}
	return cur.Epoch + 1, nil
}

// casEpochState reads an epoch znode (tests check completion with it).
func (s *System) casEpochState(ctx context.Context, job string, epoch uint64) (epochRecord, error) {
	c, err := s.session()
	if err != nil {
		return epochRecord{}, err
	}
	var ep epochRecord
	_, absent, err := getJSON(ctx, c, epochPath(job, epoch), &ep)
	if err == nil && absent {
		err = fmt.Errorf("zksut: no epoch %d of %s", epoch, job)
	}
	return ep, err
}
