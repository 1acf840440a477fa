package etcdsut

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metastore/metastore/bench/internal/sut"
)

const (
	// pageSize is the number of segment records a manifest read asks for
	// at a time.
	pageSize = 10000
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

func jobKey(job string) string     { return "/jobs/" + job }
func currentKey(job string) string { return jobKey(job) + "/current" }
func epochKey(job string, epoch uint64) string {
	return fmt.Sprintf("%s/epochs/%020d", jobKey(job), epoch)
}
func taskKey(job, task string) string   { return jobKey(job) + "/tasks/" + task }
func segPrefix(job, task string) string { return taskKey(job, task) + "/seg/" }
func segKey(job, task string, i uint64) string {
	return fmt.Sprintf("%s%010d", segPrefix(job, task), i)
}

// checkName refuses names that would break the key layout.
func checkName(kind, name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("etcdsut: invalid %s name %q (empty, or holds '/' or NUL)", kind, name)
	}
	return nil
}

// checkJob refuses a job name or task list that would break the key
// layout, an empty task list and a task listed twice.
func checkJob(job string, tasks []string) error {
	if err := checkName("job", job); err != nil {
		return err
	}
	if len(tasks) == 0 {
		return fmt.Errorf("etcdsut: job %s has no tasks", job)
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		if err := checkName("task", t); err != nil {
			return err
		}
		if seen[t] {
			return fmt.Errorf("etcdsut: job %s lists task %s twice", job, t)
		}
		seen[t] = true
	}
	return nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("etcdsut: encode %T: %v", v, err))
	}
	return string(b)
}

// decodeRange decodes the single record of a range response into v and
// returns its ModRevision, or 0 (leaving v alone) when the key is absent.
func decodeRange(r *clientv3.GetResponse, key string, v any) (int64, error) {
	if len(r.Kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(r.Kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("etcdsut: decode %s: %w", key, err)
	}
	return r.Kvs[0].ModRevision, nil
}

// rangeOf returns the i-th response of a transaction as a range response.
func rangeOf(t *clientv3.TxnResponse, i int) *clientv3.GetResponse {
	return (*clientv3.GetResponse)(t.Responses[i].GetResponseRange())
}

// transient reports whether err leaves the request's outcome open to a
// retry: the member was unreachable, had no leader, or timed out.
func transient(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	if s, ok := status.FromError(err); ok {
		return s.Code() == codes.Unavailable
	}
	return false
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

// read runs a read-only transaction of ops, retrying transient errors.
func read(ctx context.Context, cli *clientv3.Client, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	for attempt := 0; ; attempt++ {
		r, err := cli.Txn(ctx).Then(ops...).Commit()
		if err == nil {
			return r, nil
		}
		if !transient(err) {
			return nil, err
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// tasks returns the tasks of job, from the job record read once.
func (s *System) tasks(ctx context.Context, cli *clientv3.Client, job string) ([]string, error) {
	s.jobsMu.Lock()
	t, ok := s.jobs[job]
	s.jobsMu.Unlock()
	if ok {
		return t, nil
	}
	r, err := read(ctx, cli, clientv3.OpGet(jobKey(job)))
	if err != nil {
		return nil, fmt.Errorf("etcdsut: read job %s: %w", job, err)
	}
	var rec jobRecord
	rev, err := decodeRange(rangeOf(r, 0), jobKey(job), &rec)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		return nil, fmt.Errorf("etcdsut: no job %s", job)
	}
	s.jobsMu.Lock()
	s.jobs[job] = rec.Tasks
	s.jobsMu.Unlock()
	return rec.Tasks, nil
}

// casCreateJob writes the job record and its current-epoch record (epoch 0)
// in one transaction that requires the job not to exist.
func (s *System) casCreateJob(ctx context.Context, job string, tasks []string) error {
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
			Then(clientv3.OpPut(jk, jobValue), clientv3.OpPut(currentKey(job), mustJSON(currentRecord{}))).
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
			// A lost attempt of this call may have written the job.
			kvs := rangeOf(r, 0).Kvs
			if !sent || len(kvs) == 0 || string(kvs[0].Value) != jobValue {
				return fmt.Errorf("etcdsut: job %s exists", job)
			}
		}
		s.jobsMu.Lock()
		s.jobs[job] = tasks
		s.jobsMu.Unlock()
		return nil
	}
}

// casBeginEpoch writes the epoch record (no acks yet) and the job's
// current-epoch record in one transaction guarded by the current-epoch
// record's revision and the epoch record's absence.
func (s *System) casBeginEpoch(ctx context.Context, job string, epoch uint64) error {
	cli, err := s.client()
	if err != nil {
		return err
	}
	tasks, err := s.tasks(ctx, cli, job)
	if err != nil {
		return err
	}
	ck, ek := currentKey(job), epochKey(job, epoch)
	reads := []clientv3.Op{clientv3.OpGet(ck), clientv3.OpGet(ek)}
	r, err := read(ctx, cli, reads...)
	if err != nil {
		return fmt.Errorf("etcdsut: begin epoch %d of %s: read: %w", epoch, job, err)
	}
	sent := false
	for attempt := 0; ; attempt++ {
		var cur currentRecord
		crev, err := decodeRange(rangeOf(r, 0), ck, &cur)
		if err != nil {
			return err
		}
		if crev == 0 {
			return fmt.Errorf("etcdsut: begin epoch %d: no job %s", epoch, job)
		}
		if sent && cur.Epoch == epoch && len(rangeOf(r, 1).Kvs) == 1 {
			return nil // the attempt whose outcome was unknown committed
		}
		if cur.Epoch >= epoch {
			return fmt.Errorf("etcdsut: begin epoch %d of %s: epoch %d has begun", epoch, job, cur.Epoch)
		}
		t, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(ck), "=", crev),
				clientv3.Compare(clientv3.CreateRevision(ek), "=", 0)).
			Then(clientv3.OpPut(ck, mustJSON(currentRecord{Epoch: epoch})),
				clientv3.OpPut(ek, mustJSON(epochRecord{Tasks: len(tasks)}))).
			Else(reads...).
			Commit()
		switch {
		case err != nil && transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("etcdsut: begin epoch %d of %s: %w", epoch, job, err)
			}
			if r, err = read(ctx, cli, reads...); err != nil {
				return fmt.Errorf("etcdsut: begin epoch %d of %s: read: %w", epoch, job, err)
			}
		case err != nil:
			return fmt.Errorf("etcdsut: begin epoch %d of %s: %w", epoch, job, err)
		case t.Succeeded:
			return nil
		default:
			s.retries.Add(1)
			r = t
		}
	}
}

// casAck commits, in one transaction guarded by the revisions of the epoch
// and task records it read, the new segment records, the task record and
// the epoch record; on a conflict it recomputes them from the records the
// failed transaction returned and tries again.
func (s *System) casAck(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	if len(add)+2 > maxTxnOps {
		return fmt.Errorf("etcdsut: ack of %d segments exceeds the %d operations of a transaction", len(add), maxTxnOps)
	}
	cli, err := s.client()
	if err != nil {
		return err
	}
	tasks, err := s.tasks(ctx, cli, job)
	if err != nil {
		return err
	}
	if !slices.Contains(tasks, task) {
		return fmt.Errorf("etcdsut: ack: job %s has no task %s", job, task)
	}
	segs := make([]string, len(add))
	for i, sg := range add {
		segs[i] = mustJSON(segmentRecord(sg))
	}
	ek, tk := epochKey(job, epoch), taskKey(job, task)
	reads := []clientv3.Op{clientv3.OpGet(ek), clientv3.OpGet(tk)}
	r, err := read(ctx, cli, reads...)
	if err != nil {
		return fmt.Errorf("etcdsut: ack %s/%s epoch %d: read: %w", job, task, epoch, err)
	}
	sent := false
	for attempt := 0; ; attempt++ {
		var ep epochRecord
		var tr taskRecord
		erev, err := decodeRange(rangeOf(r, 0), ek, &ep)
		if err != nil {
			return err
		}
		trev, err := decodeRange(rangeOf(r, 1), tk, &tr)
		if err != nil {
			return err
		}
		if erev == 0 {
			return fmt.Errorf("etcdsut: ack %s/%s: epoch %d has not begun", job, task, epoch)
		}
		if sent && tr.AckedEpoch == epoch {
			return nil // the attempt whose outcome was unknown committed
		}
		if tr.AckedEpoch >= epoch {
			return fmt.Errorf("etcdsut: ack %s/%s epoch %d: task has acknowledged epoch %d", job, task, epoch, tr.AckedEpoch)
		}
		if ep.Acks >= ep.Tasks {
			return fmt.Errorf("etcdsut: ack %s/%s: epoch %d is complete", job, task, epoch)
		}
		ops := make([]clientv3.Op, 0, len(segs)+2)
		for i, v := range segs {
			ops = append(ops, clientv3.OpPut(segKey(job, task, tr.Segments+uint64(i)), v))
		}
		tr.AckedEpoch = epoch
		tr.Segments += uint64(len(segs))
		ep.Acks++
		ep.Completed = ep.Acks == ep.Tasks
		ops = append(ops, clientv3.OpPut(tk, mustJSON(tr)), clientv3.OpPut(ek, mustJSON(ep)))
		if s.beforeCommit != nil {
			s.beforeCommit(job, task)
		}
		t, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(ek), "=", erev),
				clientv3.Compare(clientv3.ModRevision(tk), "=", trev)).
			Then(ops...).
			Else(reads...).
			Commit()
		switch {
		case err != nil && transient(err):
			sent = true
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("etcdsut: ack %s/%s epoch %d: %w", job, task, epoch, err)
			}
			if r, err = read(ctx, cli, reads...); err != nil {
				return fmt.Errorf("etcdsut: ack %s/%s epoch %d: read: %w", job, task, epoch, err)
			}
		case err != nil:
			return fmt.Errorf("etcdsut: ack %s/%s epoch %d: %w", job, task, epoch, err)
		case t.Succeeded:
			return nil
		default:
			s.retries.Add(1)
			r = t
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

// ReadManifest reads and decodes every segment record of the task (both
// designs keep them under one prefix): the
// key range of its segment prefix in pages of pageSize, every page at the
// first page's revision. Without stale the reads are linearizable, on the
// leader's own client; with stale they are serializable reads on a
// follower's.
func (s *System) ReadManifest(ctx context.Context, job, task string, stale bool) (int, error) {
	if _, err := s.client(); err != nil {
		return 0, err
	}
	cli, err := s.memberClient(ctx, stale)
	if err != nil {
		return 0, err
	}
	for {
		n, err := readSegments(ctx, cli, segPrefix(job, task), stale, nil)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // the snapshot's revision was compacted between pages
		}
		if err != nil {
			return 0, fmt.Errorf("etcdsut: read manifest of %s/%s: %w", job, task, err)
		}
		return n, nil
	}
}

// readSegments reads the key range of prefix in pages of pageSize, every
// page at the first page's revision, decodes each record as a segment and
// hands it to visit (when not nil), in key order. It returns the number of
// records.
func readSegments(ctx context.Context, cli *clientv3.Client, prefix string, serializable bool, visit func(segmentRecord)) (int, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev, n := prefix, int64(0), 0
	for attempt := 0; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		r, err := cli.Get(ctx, key, opts...)
		if err != nil {
			if !transient(err) {
				return 0, err
			}
			if err := backoff(ctx, attempt); err != nil {
				return 0, err
			}
			attempt++
			continue
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		for _, kv := range r.Kvs {
			var sg segmentRecord
			if err := json.Unmarshal(kv.Value, &sg); err != nil {
				return 0, fmt.Errorf("decode %s: %w", kv.Key, err)
			}
			if visit != nil {
				visit(sg)
			}
			n++
		}
		if !r.More || len(r.Kvs) == 0 {
			return n, nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// Preload gives the job's only task n segments in acks of preloadBatch
// segments, each in an epoch of its own, and returns the next epoch.
func (s *System) Preload(ctx context.Context, job, task string, n int) (uint64, error) {
	cli, err := s.client()
	if err != nil {
		return 0, err
	}
	tasks, err := s.tasks(ctx, cli, job)
	if err != nil {
		return 0, err
	}
	if len(tasks) != 1 || tasks[0] != task {
		return 0, fmt.Errorf("etcdsut: preload: job %s has tasks %v, not only %s", job, tasks, task)
	}
	next, err := s.nextEpoch(ctx, cli, job)
	if err != nil {
		return 0, err
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
func (s *System) casNextEpoch(ctx context.Context, cli *clientv3.Client, job string) (uint64, error) {
	r, err := read(ctx, cli, clientv3.OpGet(currentKey(job)))
	if err != nil {
		return 0, fmt.Errorf("etcdsut: read the current epoch of %s: %w", job, err)
	}
	var cur currentRecord
	if _, err := decodeRange(rangeOf(r, 0), currentKey(job), &cur); err != nil {
		return 0, err
	}
	return cur.Epoch + 1, nil
}

// casEpochState reads an epoch record (tests check completion with it).
func (s *System) casEpochState(ctx context.Context, job string, epoch uint64) (epochRecord, error) {
	cli, err := s.client()
	if err != nil {
		return epochRecord{}, err
	}
	var ep epochRecord
	r, err := read(ctx, cli, clientv3.OpGet(epochKey(job, epoch)))
	if err != nil {
		return ep, err
	}
	rev, err := decodeRange(rangeOf(r, 0), epochKey(job, epoch), &ep)
	if err == nil && rev == 0 {
		err = fmt.Errorf("etcdsut: no epoch %d of %s", epoch, job)
	}
	return ep, err
}
