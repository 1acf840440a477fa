package mssut

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// jobState is what the system remembers of a job it created: the
// generation every write carries, the epochs begun, and per task the blobs
// its acks committed.
type jobState struct {
	name     string
	gen      uint64
	attempts int
	tasks    map[string]*taskState

	mu        sync.Mutex
	lastEpoch uint64
}

// taskState holds the sizes of the blobs a task's acks committed. Its
// mutex orders the task's acks, which the store requires anyway.
type taskState struct {
	mu        sync.Mutex
	committed map[string]uint64
}

func (j *jobState) begun(epoch uint64) {
	j.mu.Lock()
	j.lastEpoch = max(j.lastEpoch, epoch)
	j.mu.Unlock()
}

func (j *jobState) nextEpoch() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastEpoch + 1
}

func (s *System) job(name string) (*jobState, error) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return nil, fmt.Errorf("mssut: job %q was not created with CreateJob", name)
	}
	return j, nil
}

func (j *jobState) task(name string) (*taskState, error) {
	t, ok := j.tasks[name]
	if !ok {
		return nil, fmt.Errorf("mssut: job %q has no task %q", j.name, name)
	}
	return t, nil
}

// statefulCaps are the capabilities of every task CreateJob registers.
var statefulCaps = mustCaps(wire.CapState, wire.CapIncremental)

func mustCaps(names ...wire.Capability) wire.Caps {
	var ss []string
	for _, n := range names {
		ss = append(ss, string(n))
	}
	c, err := wire.ParseCaps(ss)
	if err != nil {
		panic(err)
	}
	return c
}

func (s *System) client() (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return nil, fmt.Errorf("mssut: the system is not started")
	}
	return s.c, nil
}

// CreateJob creates the job with the store's default config (one retained
// checkpoint) and starts an attempt whose tasks all have the state and
// incremental capabilities. Creating a job again starts a new attempt (a
// new generation fencing the previous one) with the tasks given.
func (s *System) CreateJob(ctx context.Context, job string, tasks []string) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	specs := make([]wire.Task, len(tasks))
	for i, t := range tasks {
		specs[i] = wire.Task{ID: t, Caps: statefulCaps}
	}
	s.jobsMu.Lock()
	prev := s.jobs[job]
	s.jobsMu.Unlock()
	attempt := 1
	if prev != nil {
		attempt = prev.attempts + 1
	}
	if _, err := c.PutJob(ctx, job, wire.JobConfig{}); err != nil {
		return fmt.Errorf("mssut: create job %s: %w", job, err)
	}
	att, err := c.StartAttempt(ctx, job, fmt.Sprintf("mssut-%d", attempt), specs)
	if err != nil {
		return fmt.Errorf("mssut: start attempt of job %s: %w", job, err)
	}
	js := &jobState{name: job, gen: att.Generation, attempts: attempt, tasks: map[string]*taskState{}}
	if prev != nil {
		js.lastEpoch = prev.nextEpoch() - 1
	}
	for _, t := range tasks {
		js.tasks[t] = &taskState{committed: map[string]uint64{}}
	}
	s.jobsMu.Lock()
	s.jobs[job] = js
	s.jobsMu.Unlock()
	return nil
}

// BeginEpoch begins epoch in the job's current generation.
func (s *System) BeginEpoch(ctx context.Context, job string, epoch uint64) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	js, err := s.job(job)
	if err != nil {
		return err
	}
	if _, err := c.BeginEpoch(ctx, job, js.gen, epoch); err != nil {
		return fmt.Errorf("mssut: begin epoch %d of job %s: %w", epoch, job, err)
	}
	js.begun(epoch)
	return nil
}

// Ack acknowledges epoch for task with an incremental delta adding the
// segments. Keys the task's acks have not committed yet are committed by
// this ack (manifest.blobs), each with the size of its furthest segment
// end, so all segments of a key must lie within the extent its first ack
// gives it (an object is written once). No object bytes are uploaded: the
// store does not look at the object store when it commits an upload.
func (s *System) Ack(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	js, err := s.job(job)
	if err != nil {
		return err
	}
	ts, err := js.task(task)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	m, newSizes, err := ts.manifestFor(add)
	if err != nil {
		return fmt.Errorf("mssut: ack of %s/%s epoch %d: %w", job, task, epoch, err)
	}
	if _, err := c.Ack(ctx, job, js.gen, epoch, task, client.AckRequest{Manifest: m}); err != nil {
		return fmt.Errorf("mssut: ack of %s/%s epoch %d: %w", job, task, epoch, err)
	}
	for k, size := range newSizes {
		ts.committed[k] = size
	}
	return nil
}

// manifestFor builds the manifest part of an ack adding segs: the blobs
// to commit and the delta. nil when segs is empty (the manifest stays).
// The caller holds ts.mu.
func (ts *taskState) manifestFor(segs []sut.Segment) (*wire.ManifestAck, map[string]uint64, error) {
	if len(segs) == 0 {
		return nil, nil, nil
	}
	ends := map[string]uint64{}
	var order []string
	d := manifests.Delta{AddSegments: make([]manifests.Segment, 0, len(segs))}
	for _, sg := range segs {
		if sg.Offset < 0 || sg.Length <= 0 {
			return nil, nil, fmt.Errorf("segment of %s has offset %d and length %d", sg.Key, sg.Offset, sg.Length)
		}
		end := uint64(sg.Offset + sg.Length)
		if _, ok := ends[sg.Key]; !ok {
			order = append(order, sg.Key)
		}
		ends[sg.Key] = max(ends[sg.Key], end)
		d.AddSegments = append(d.AddSegments, manifests.Segment{
			Key: sg.Key, Offset: uint64(sg.Offset), Length: uint64(sg.Length), FirstSeq: sg.FirstSeq, LastSeq: sg.LastSeq,
		})
	}
	m := &wire.ManifestAck{Delta: &d}
	newSizes := map[string]uint64{}
	for _, k := range order {
		if size, ok := ts.committed[k]; ok {
			if ends[k] > size {
				return nil, nil, fmt.Errorf("blob %s was committed with %d bytes; a segment ends at %d", k, size, ends[k])
			}
			continue
		}
		m.Blobs = append(m.Blobs, wire.BlobCommit{Key: k, Size: ends[k]})
		newSizes[k] = ends[k]
	}
	if len(m.Blobs) > wire.MaxIntents {
		return nil, nil, fmt.Errorf("an ack commits at most %d blobs, this one %d", wire.MaxIntents, len(m.Blobs))
	}
	return m, newSizes, nil
}

// Keys returns n upload slots of the task from the store (POST
// /v1/jobs/{job}/uploads, at most wire.MaxIntents per request): keys held
// by upload intents that the task's next acks commit.
func (s *System) Keys(ctx context.Context, job, task string, n int) ([]string, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	js, err := s.job(job)
	if err != nil {
		return nil, err
	}
	slots, err := uploadSlots(ctx, c, job, js.gen, task, n)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(slots))
	for i, sl := range slots {
		keys[i] = sl.Key
	}
	return keys, nil
}

// uploadSlots asks for n slots, wire.MaxIntents per request.
func uploadSlots(ctx context.Context, c *client.Client, job string, gen uint64, task string, n int) ([]client.UploadSlot, error) {
	out := make([]client.UploadSlot, 0, n)
	for len(out) < n {
		count := min(n-len(out), wire.MaxIntents)
		slots, err := c.UploadSlots(ctx, job, gen, task, count)
		if err != nil {
			return nil, fmt.Errorf("mssut: upload slots for %s/%s: %w", job, task, err)
		}
		if len(slots) != count {
			return nil, fmt.Errorf("mssut: upload slots for %s/%s: asked for %d, got %d", job, task, count, len(slots))
		}
		out = append(out, slots...)
	}
	return out, nil
}

// ReadManifest plans the task's restore (GET
// /v1/jobs/{job}/tasks/{task}/restore), which answers the whole state
// manifest of the latest completed checkpoint, and returns its number of
// segments. Without stale the request goes to the leader (the store's
// default consistency: the leader answers after confirming its leadership
// with a quorum); with stale, to a member that was a follower when last
// looked at, which answers from its own state (consistency=stale).
func (s *System) ReadManifest(ctx context.Context, job, task string, stale bool) (int, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	if stale {
		if c, err = s.followerClient(ctx); err != nil {
			return 0, err
		}
	}
	r, err := c.Restore(ctx, job, task, client.RestoreOptions{})
	if err != nil {
		return 0, fmt.Errorf("mssut: restore plan of %s/%s (stale %v): %w", job, task, stale, err)
	}
	if m := r.StateManifest(); m != nil {
		return len(m.Segments), nil
	}
	return 0, nil
}

// followerClient returns the stale-read client of a running member that
// is not the leader the system last saw (the first such member in id
// order; the leader is looked up when none was seen yet or it is down).
func (s *System) followerClient(ctx context.Context) (*client.Client, error) {
	s.mu.Lock()
	leaderID := s.lastLeader
	s.mu.Unlock()
	if leaderID == "" || !s.isRunning(leaderID) {
		p, err := s.leader(ctx)
		if err != nil {
			return nil, err
		}
		leaderID = p.id
	}
	for _, p := range s.running() {
		if p.id != leaderID {
			return s.stale[p.id], nil
		}
	}
	return nil, fmt.Errorf("mssut: no running follower for a stale read")
}

func (s *System) isRunning(id string) bool {
	p, err := s.member(id)
	if err != nil {
		return false
	}
	_, ok := p.running()
	return ok
}

// Preload gives the job's only task a manifest of n segments: blobs of
// Options.SegmentsPerBlob segments of Options.SegmentBytes at consecutive
// offsets, committed and acknowledged in as few epochs as the store's
// limits allow (at most manifests.MaxDeltaRefs references and
// wire.MaxIntents blobs per ack, and a body within Options.MaxBodyBytes).
// It returns the next epoch to begin.
func (s *System) Preload(ctx context.Context, job, task string, n int) (uint64, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	js, err := s.job(job)
	if err != nil {
		return 0, err
	}
	if len(js.tasks) != 1 {
		return 0, fmt.Errorf("mssut: Preload of job %s: it has %d tasks, want 1", job, len(js.tasks))
	}
	ts, err := js.task(task)
	if err != nil {
		return 0, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	epoch := js.nextEpoch()
	p := &packer{budget: s.opts.MaxBodyBytes - bodyMargin}
	var seq uint64
	var keys []string
	segLen, perBlob := uint64(s.opts.SegmentBytes), s.opts.SegmentsPerBlob
	inBlob := perBlob // segments already in the current blob; perBlob: start a new one
	var key string
	for left := n; left > 0; {
		p.reset()
		for left > 0 {
			if inBlob == perBlob {
				if len(keys) == 0 {
					slots, err := uploadSlots(ctx, c, job, js.gen, task, min(wire.MaxIntents, (left+perBlob-1)/perBlob))
					if err != nil {
						return 0, err
					}
					for _, sl := range slots {
						keys = append(keys, sl.Key)
					}
				}
				blobSegs := min(perBlob, left)
				commit := wire.BlobCommit{Key: keys[0], Size: uint64(blobSegs) * segLen}
				if !p.addBlob(commit) {
					break
				}
				key, keys, inBlob = keys[0], keys[1:], 0
			}
			sg := manifests.Segment{Key: key, Offset: uint64(inBlob) * segLen, Length: segLen, FirstSeq: seq + 1, LastSeq: seq + 100}
			if !p.addSegment(sg) {
				break
			}
			seq += 100
			inBlob++
			left--
		}
		if len(p.segs) == 0 {
			return 0, fmt.Errorf("mssut: Preload: not even one segment fits in a body of %d bytes", s.opts.MaxBodyBytes)
		}
		if _, err := c.BeginEpoch(ctx, job, js.gen, epoch); err != nil {
			return 0, fmt.Errorf("mssut: Preload: begin epoch %d of %s: %w", epoch, job, err)
		}
		js.begun(epoch)
		m := &wire.ManifestAck{Blobs: p.blobs, Delta: &manifests.Delta{AddSegments: p.segs}}
		if _, err := c.Ack(ctx, job, js.gen, epoch, task, client.AckRequest{Manifest: m}); err != nil {
			return 0, fmt.Errorf("mssut: Preload: ack of epoch %d of %s (%d blobs, %d segments): %w", epoch, job, len(p.blobs), len(p.segs), err)
		}
		for _, b := range p.blobs {
			ts.committed[b.Key] = b.Size
		}
		epoch++
	}
	// The setup ends once the members are done with it: the leader looks
	// at the object of every blob an ack committed (a HEAD each, in the
	// background) and every member applies what it saw. After a preload
	// of 100,000 segments that took seconds, during the measured acks.
	if err := s.waitObservationQueueEmpty(ctx); err != nil {
		return 0, fmt.Errorf("mssut: Preload of %s: %w", job, err)
	}
	return epoch, nil
}

// waitObservationQueueEmpty waits until no member's state file holds a
// blob that waits to be observed (metastore_blobs_unobserved). The gauge
// counts as of the member's last commit of its state file, which may not
// hold the latest acks yet (group commits, a follower behind): a 0 counts
// only from a member whose file holds the leader's applied index as it
// was when the preload's last ack was answered. From then on only
// observations are applied, so a 0 stays 0.
func (s *System) waitObservationQueueEmpty(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	st, err := s.leaderStatus(ctx)
	if err != nil {
		return err
	}
	acked := float64(st.AppliedIndex)
	err = sut.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		for _, p := range s.running() {
			// The committed index first: the gauge read after it counts
			// at least that commit.
			committed, err := s.metricOf(ctx, p, "metastore_node_fsm_committed_index")
			if err != nil || committed < acked {
				return false, nil // a failed scrape is asked again
			}
			n, err := s.metricOf(ctx, p, "metastore_blobs_unobserved")
			if err != nil || n != 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the leader to observe the new blobs (applied index %d on every member's state file): %w", st.AppliedIndex, err)
	}
	return nil
}

// bodyMargin is room left in a request body beyond the blobs and segments
// packer counts: the generation and the JSON around the lists.
const bodyMargin = 1024

// packer fills one ack with blobs and segments within the store's limits:
// the encoded body (each element's JSON plus its comma), the references
// of a delta and the blobs of an ack.
type packer struct {
	budget int64
	size   int64
	blobs  []wire.BlobCommit
	segs   []manifests.Segment
}

func (p *packer) reset() {
	p.size, p.blobs, p.segs = 0, nil, nil
}

func (p *packer) fits(v any) (int64, bool) {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and numbers
	}
	n := int64(len(raw)) + 1
	return n, p.size+n <= p.budget
}

func (p *packer) addBlob(b wire.BlobCommit) bool {
	// A blob is only worth adding with room for its first segment.
	if len(p.blobs) >= wire.MaxIntents || len(p.segs) >= manifests.MaxDeltaRefs {
		return false
	}
	n, ok := p.fits(b)
	if !ok {
		return false
	}
	first := manifests.Segment{Key: b.Key, Offset: 0, Length: b.Size, FirstSeq: 1 << 40, LastSeq: 1 << 40}
	if m, _ := p.fits(first); p.size+n+m > p.budget {
		return false
	}
	p.size += n
	p.blobs = append(p.blobs, b)
	return true
}

func (p *packer) addSegment(sg manifests.Segment) bool {
	if len(p.segs) >= manifests.MaxDeltaRefs {
		return false
	}
	n, ok := p.fits(sg)
	if !ok {
		return false
	}
	p.size += n
	p.segs = append(p.segs, sg)
	return true
}
