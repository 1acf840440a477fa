package mssut

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// Roles of the Resume workload's tasks.
type role int

const (
	roleStateful role = iota // aggregation: changelog state in blobs
	roleSource               // source: its input position, inline
	roleMap                  // stateless map: checkpoints nothing
)

func (r role) caps() wire.Caps {
	switch r {
	case roleStateful:
		return statefulCaps
	case roleSource:
		return mustCaps(wire.CapInput)
	}
	return 0
}

// kinds is what a task of the role checkpoints.
func (r role) kinds() []wire.Kind {
	switch r {
	case roleStateful:
		return []wire.Kind{wire.KindState}
	case roleSource:
		return []wire.Kind{wire.KindInput}
	}
	return nil
}

// Sizes of the Resume workload's changelog: each stateful task uploads one
// blob per epoch holding two segments.
const (
	resumeSegments     = 2
	resumeSegmentBytes = 512
)

type resumeTask struct {
	id   string
	role role
	// state is the changelog the task uploaded, in order; ts its manifest.
	state  []byte
	ts     *client.TaskState
	seq    uint64
	offset []byte   // the source's last input position
	keys   []string // the blobs the task uploaded
}

// Resume checkpoints a job of tasks tasks, stateful of them with changelog
// state (real uploaded blobs, Options.ResumeEpochs epochs of one blob with
// two segments each), half of the others sources with an inline input
// position and the rest stateless maps; restarts it with a changed
// topology (a new attempt without one stateful task and one source, with a
// new stateful task and a new source) and restores every task of the new
// attempt through the client: the restore plan, then Restore.OpenState
// read to the end. MetastoreRequests counts the object-store requests the
// S3 server logged during those restores; MetastoreStatelessRequests the
// object requests (client.Stats) of the tasks without the state
// capability.
//
// The naive restore is what a store without capability flags does: at
// checkpoint time each task writes each kind it has to
// naive/jobs/JOB/tasks/TASK/KIND/epoch-N, and a restore GETs every kind of
// every task of the new topology, answered NoSuchKey for what was never
// written. NaiveRequests counts the requests the S3 server logged for it.
func (s *System) Resume(ctx context.Context, tasks, stateful int) (sut.ResumeResult, error) {
	res := sut.ResumeResult{Tasks: tasks, Stateful: stateful}
	if tasks < 2 || stateful < 1 || stateful >= tasks {
		return res, fmt.Errorf("mssut: Resume of %d tasks with %d stateful: want 1 <= stateful < tasks", tasks, stateful)
	}
	c, err := s.client()
	if err != nil {
		return res, err
	}
	job := fmt.Sprintf("resume-%d", s.seq.Add(1))
	all := make([]*resumeTask, tasks)
	for i := range all {
		r := roleStateful
		if i >= stateful {
			r = roleSource
			if (i-stateful)%2 == 1 {
				r = roleMap
			}
		}
		all[i] = &resumeTask{id: fmt.Sprintf("t%03d", i), role: r}
	}
	last, err := s.resumeCheckpoint(ctx, c, job, all)
	if err != nil {
		return res, err
	}
	if err := s.writeNaive(ctx, job, last, all); err != nil {
		return res, err
	}

	// The new topology: the first stateful task and the first source
	// leave, a new stateful task and a new source come.
	var next []*resumeTask
	removedSource := false
	for i, t := range all {
		if i == 0 || (t.role == roleSource && !removedSource) {
			removedSource = removedSource || t.role == roleSource
			continue
		}
		next = append(next, t)
	}
	next = append(next, &resumeTask{id: "new-state", role: roleStateful}, &resumeTask{id: "new-source", role: roleSource})
	if _, err := c.StartAttempt(ctx, job, "resume-2", taskSpecs(next)); err != nil {
		return res, fmt.Errorf("mssut: Resume: restart %s with a changed topology: %w", job, err)
	}

	// The leader reads every new blob's size in the background (a listing
	// or a HEAD, gc/observe.go): once, shortly after the ack. Those
	// requests are not the restores'; wait until they are done.
	var keys []string
	for _, t := range all {
		keys = append(keys, t.keys...)
	}
	if err := s.waitObserved(ctx, keys); err != nil {
		return res, fmt.Errorf("mssut: Resume: %w", err)
	}
	before, err := s.s3Sync(ctx)
	if err != nil {
		return res, err
	}
	for _, t := range next {
		st0 := c.Stats()
		if err := restoreTask(ctx, c, job, t); err != nil {
			return res, err
		}
		if !t.role.caps().Has(wire.KindState) {
			res.MetastoreStatelessRequests += int(c.Stats().Sub(st0).ObjectRequests())
		}
	}
	after, err := s.s3Sync(ctx)
	if err != nil {
		return res, err
	}
	res.MetastoreRequests = int(after.sub(before).Requests())

	before = after
	for _, t := range next {
		for _, k := range wire.Kinds {
			rc, err := s.bucket.Get(ctx, naiveKey(job, t.id, k, last), 0, -1)
			if errors.Is(err, blobstore.ErrNotFound) {
				res.NaiveNoSuchKey++
				continue
			}
			if err != nil {
				return res, fmt.Errorf("mssut: Resume: naive restore of %s/%s %s: %w", job, t.id, k, err)
			}
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return res, fmt.Errorf("mssut: Resume: naive restore of %s/%s %s: %w", job, t.id, k, err)
			}
		}
	}
	if after, err = s.s3Sync(ctx); err != nil {
		return res, err
	}
	res.NaiveRequests = int(after.sub(before).Requests())
	return res, nil
}

func taskSpecs(ts []*resumeTask) []wire.Task {
	out := make([]wire.Task, len(ts))
	for i, t := range ts {
		out[i] = wire.Task{ID: t.id, Caps: t.role.caps()}
	}
	return out
}

// resumeCheckpoint creates the job, starts its first attempt and
// checkpoints Options.ResumeEpochs epochs; it returns the last epoch.
func (s *System) resumeCheckpoint(ctx context.Context, c *client.Client, job string, all []*resumeTask) (uint64, error) {
	if _, err := c.PutJob(ctx, job, wire.JobConfig{Retained: 1}); err != nil {
		return 0, fmt.Errorf("mssut: Resume: create job %s: %w", job, err)
	}
	att, err := c.StartAttempt(ctx, job, "resume-1", taskSpecs(all))
	if err != nil {
		return 0, fmt.Errorf("mssut: Resume: start attempt of %s: %w", job, err)
	}
	gen := att.Generation
	for _, t := range all {
		if t.role == roleStateful {
			if t.ts, err = client.NewTaskState(nil, t.role.caps()); err != nil {
				return 0, err
			}
		}
	}
	epoch := uint64(0)
	for range s.opts.ResumeEpochs {
		epoch++
		if _, err := c.BeginEpoch(ctx, job, gen, epoch); err != nil {
			return 0, fmt.Errorf("mssut: Resume: begin epoch %d of %s: %w", epoch, job, err)
		}
		err := s.parallel(ctx, len(all), func(ctx context.Context, i int) error {
			return checkpointTask(ctx, c, job, gen, epoch, all[i])
		})
		if err != nil {
			return 0, fmt.Errorf("mssut: Resume: epoch %d of %s: %w", epoch, job, err)
		}
		if _, err := c.AwaitEpoch(ctx, job, epoch); err != nil {
			return 0, fmt.Errorf("mssut: Resume: epoch %d of %s: %w", epoch, job, err)
		}
	}
	return epoch, nil
}

// checkpointTask acknowledges epoch for one task as its role does: a
// stateful task uploads a changelog blob and acknowledges the delta adding
// its segments, a source its input position; a map acknowledges nothing
// (the epoch does not wait for it).
func checkpointTask(ctx context.Context, c *client.Client, job string, gen, epoch uint64, t *resumeTask) error {
	switch t.role {
	case roleStateful:
		var blob []byte
		for i := range resumeSegments {
			seg := bytes.Repeat([]byte{byte('a' + (int(epoch)+i)%26)}, resumeSegmentBytes)
			copy(seg, fmt.Sprintf("%s epoch %d segment %d;", t.id, epoch, i))
			blob = append(blob, seg...)
		}
		key, err := c.Upload(ctx, job, gen, t.id, bytes.NewReader(blob), int64(len(blob)))
		if err != nil {
			return fmt.Errorf("upload of %s: %w", t.id, err)
		}
		if err := t.ts.AddBlob(key, uint64(len(blob)), ""); err != nil {
			return err
		}
		t.keys = append(t.keys, key)
		for i := range resumeSegments {
			if err := t.ts.AddSegment(key, uint64(i*resumeSegmentBytes), resumeSegmentBytes, t.seq+1, t.seq+10); err != nil {
				return err
			}
			t.seq += 10
		}
		if _, err := c.Ack(ctx, job, gen, epoch, t.id, client.AckRequest{Manifest: t.ts.Manifest()}); err != nil {
			return fmt.Errorf("ack of %s: %w", t.id, err)
		}
		t.ts.Acked()
		t.state = append(t.state, blob...)
	case roleSource:
		t.offset = fmt.Appendf(nil, "%s:offset=%d", t.id, 1000*epoch)
		if _, err := c.Ack(ctx, job, gen, epoch, t.id, client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: t.offset}}); err != nil {
			return fmt.Errorf("ack of %s: %w", t.id, err)
		}
	}
	return nil
}

// restoreTask restores one task of the new attempt the way a worker does
// and checks what it got: a stateful task of the old topology its whole
// changelog, a source its last position, a new task nothing.
func restoreTask(ctx context.Context, c *client.Client, job string, t *resumeTask) error {
	r, err := c.Restore(ctx, job, t.id, client.RestoreOptions{})
	if err != nil {
		return fmt.Errorf("mssut: Resume: restore plan of %s/%s: %w", job, t.id, err)
	}
	rc, err := r.OpenState(ctx)
	var state []byte
	switch {
	case errors.Is(err, client.ErrNothingToRecover), errors.Is(err, client.ErrNoPriorState):
	case err != nil:
		return fmt.Errorf("mssut: Resume: open the state of %s/%s: %w", job, t.id, err)
	default:
		state, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("mssut: Resume: read the state of %s/%s: %w", job, t.id, err)
		}
	}
	if !bytes.Equal(state, t.state) {
		return fmt.Errorf("mssut: Resume: %s/%s restored %d bytes of state, checkpointed %d", job, t.id, len(state), len(t.state))
	}
	if got := r.Payload(wire.KindInput); !bytes.Equal(got, t.offset) {
		return fmt.Errorf("mssut: Resume: %s/%s restored input position %q, checkpointed %q", job, t.id, got, t.offset)
	}
	return nil
}

// writeNaive writes, as a store without capability flags would at
// checkpoint time, each kind each task has to its own object.
func (s *System) writeNaive(ctx context.Context, job string, epoch uint64, all []*resumeTask) error {
	return s.parallel(ctx, len(all), func(ctx context.Context, i int) error {
		t := all[i]
		for _, k := range t.role.kinds() {
			body := t.offset
			if k == wire.KindState {
				body = t.state
			}
			key := naiveKey(job, t.id, k, epoch)
			if err := s.bucket.Put(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
				return fmt.Errorf("mssut: Resume: naive write of %s: %w", key, err)
			}
		}
		return nil
	})
}

func naiveKey(job, task string, k wire.Kind, epoch uint64) string {
	return fmt.Sprintf("%s/jobs/%s/tasks/%s/%s/epoch-%d", NaivePrefix, job, task, k, epoch)
}

// waitObserved waits until the leader has observed every blob of keys in
// the object store (the blob's record shows an observation).
func (s *System) waitObserved(ctx context.Context, keys []string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return sut.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		leader, err := s.leader(ctx)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			var b struct {
				Observed *json.RawMessage `json:"observed"`
			}
			if err := s.send(ctx, leader.url(), http.MethodGet, "/v1/blobs/"+k, nil, 0, &b, defaultStatusRequestTimeout); err != nil {
				return false, nil // asked again
			}
			if b.Observed == nil {
				return false, nil
			}
		}
		return true, nil
	})
}
