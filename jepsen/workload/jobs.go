package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// jobRun is one job: a coordinator (attempts, begin, abort, await), an
// operator (pins, retention) and one worker per task, each with its own
// client.
type jobRun struct {
	w     *Workload
	idx   int
	name  string
	tasks []TaskSpec

	coord    *client.Client
	coordID  int
	oper     *client.Client
	operID   int
	gen      uint64
	attempts int
	next     uint64
	workers  []*worker
	pins     []uint64
	restart  bool
	retained int
}

func newJobRun(w *Workload, i int, name string) *jobRun {
	j := &jobRun{w: w, idx: i, name: name, tasks: Tasks(i), next: 1, retained: JobConfig().Retained}
	j.coord, j.coordID = w.newClient(nil)
	j.oper, j.operID = w.newClient(nil)
	// The job's workers run in one process with one client, as a worker
	// process running several tasks does; with one ack request in flight
	// at most, the acks of an epoch travel in batches (POST /v1/acks)
	// under every fault. Each worker keeps its own history client number.
	shared, _ := w.newClientWith(nil, 1)
	for _, t := range j.tasks {
		caps, err := wire.ParseCaps(t.Caps)
		if err != nil {
			panic(err)
		}
		wk := &worker{j: j, spec: t, caps: caps, reuses: map[string]int{}}
		wk.c, wk.cid = shared, w.clientID()
		j.workers = append(j.workers, wk)
	}
	return j
}

func (j *jobRun) invoke(cid int, kind history.Kind) *history.Op {
	return j.w.h.Invoke(&history.Op{Client: cid, Kind: kind, Job: j.name})
}

func (j *jobRun) run(ctx context.Context) {
	for ctx.Err() == nil {
		if j.gen == 0 || j.restart {
			if !j.startAttempt(ctx) {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
		}
		j.epoch(ctx)
	}
}

// startAttempt starts a new attempt (a restart of the job): a new
// generation, a zombie ack of the old one that must be fenced, and every
// worker restoring from the latest checkpoint.
func (j *jobRun) startAttempt(ctx context.Context) bool {
	w := j.w
	old := j.gen
	var tasks []wire.Task
	for _, wk := range j.workers {
		tasks = append(tasks, wire.Task{ID: wk.spec.ID, Caps: wk.caps})
	}
	j.attempts++
	aid := fmt.Sprintf("a%d", j.attempts)
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		op := j.invoke(j.coordID, history.KindAttempt)
		op.Note = aid
		octx, cancel := w.opCtx(ctx)
		att, err := j.coord.StartAttempt(octx, j.name, aid, tasks)
		cancel()
		if err == nil {
			op.Gen = att.Generation
		}
		w.h.Finish(op, err, true)
		if err == nil {
			j.gen = att.Generation
			break
		}
		if op.Outcome == history.Fail && !errors.Is(err, client.ErrUnavailable) {
			// Fenced or conflicting: this id is spent.
			j.attempts++
			aid = fmt.Sprintf("a%d", j.attempts)
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if j.gen == old {
		return false
	}
	if old != 0 && j.next > 1 {
		j.zombieAck(ctx, old)
	}
	var wg sync.WaitGroup
	for _, wk := range j.workers {
		wg.Add(1)
		go func() { defer wg.Done(); wk.reset(ctx, j.gen) }()
	}
	wg.Wait()
	j.restart = false
	for _, wk := range j.workers {
		if wk.broken {
			j.restart = true
		}
	}
	return !j.restart
}

// zombieAck sends an ack of the superseded generation: a zombie worker of
// the dead attempt. It must be fenced.
func (j *jobRun) zombieAck(ctx context.Context, old uint64) {
	wk := j.workers[0] // the source
	op := j.w.h.Invoke(&history.Op{Client: wk.cid, Kind: history.KindZombieAck, Job: j.name, Task: wk.spec.ID, Gen: old, Epoch: j.next - 1})
	op.Value = j.w.value(j.name, "/", wk.spec.ID, "/zombie/g", old, "/e", j.next-1)
	octx, cancel := j.w.opCtx(ctx)
	_, err := wk.c.Ack(octx, j.name, old, j.next-1, wk.spec.ID, client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindInput: []byte(op.Value)}})
	cancel()
	j.w.h.Finish(op, err, true)
}

func (j *jobRun) epoch(ctx context.Context) {
	w := j.w
	e := j.next
	j.next++
	gen := j.gen
	begun := false
	for try := 0; try < 4 && ctx.Err() == nil; try++ {
		op := j.invoke(j.coordID, history.KindBegin)
		op.Gen, op.Epoch = gen, e
		octx, cancel := w.opCtx(ctx)
		_, err := j.coord.BeginEpoch(octx, j.name, gen, e)
		cancel()
		w.h.Finish(op, err, true)
		if err == nil {
			begun = true
			break
		}
		if op.Outcome == history.Fail {
			if errors.Is(err, client.ErrFenced) {
				j.restart = true
			}
			if !errors.Is(err, client.ErrUnavailable) {
				return
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if !begun {
		return
	}
	if w.rnd.Float64() < w.cfg.AbortProb/2 {
		j.abort(ctx, gen, e)
	}
	var wg sync.WaitGroup
	for _, wk := range j.workers {
		if !wk.caps.Expected() {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); wk.ack(ctx, gen, e) }()
	}
	wg.Wait()
	if w.rnd.Float64() < w.cfg.AbortProb/2 {
		j.abort(ctx, gen, e)
	}
	completed := j.await(ctx, e)
	for _, wk := range j.workers {
		if wk.broken {
			j.restart = true
		}
	}
	if w.rnd.Float64() < w.cfg.RestartProb {
		j.restart = true
	}
	if completed {
		j.operate(ctx, e)
	}
}

func (j *jobRun) abort(ctx context.Context, gen, e uint64) {
	op := j.invoke(j.coordID, history.KindAbort)
	op.Gen, op.Epoch = gen, e
	octx, cancel := j.w.opCtx(ctx)
	ep, err := j.coord.AbortEpoch(octx, j.name, gen, e, "workload abort")
	cancel()
	if err == nil {
		op.State = string(ep.State)
	}
	j.w.h.Finish(op, err, true)
}

// await waits (bounded) for the epoch to complete or abort.
func (j *jobRun) await(ctx context.Context, e uint64) bool {
	op := j.invoke(j.coordID, history.KindAwait)
	op.Epoch = e
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	d, err := j.coord.AwaitEpoch(octx, j.name, e)
	cancel()
	if errors.Is(err, client.ErrEpochAborted) {
		op.State = string(wire.EpochAborted)
		err = nil
	} else if err == nil {
		op.State = string(d.State)
		op.Completed = true
	}
	j.w.h.Finish(op, err, false)
	return op.Completed
}

// operate is the operator: pins a completed epoch as a savepoint (and
// reads its manifests), unpins the oldest savepoint, changes retention.
func (j *jobRun) operate(ctx context.Context, e uint64) {
	w := j.w
	switch r := w.rnd.Float64(); {
	case r < w.cfg.PinProb && len(j.pins) < 2:
		op := j.invoke(j.operID, history.KindPin)
		op.Epoch = e
		octx, cancel := w.opCtx(ctx)
		_, err := j.oper.Pin(octx, j.name, e, fmt.Sprintf("sp-%d", e))
		cancel()
		w.h.Finish(op, err, true)
		if op.Outcome == history.Fail {
			return
		}
		j.pins = append(j.pins, e)
		if op.Outcome != history.OK {
			return
		}
		for _, wk := range j.workers {
			if !wk.caps.Has(wire.KindState) {
				continue
			}
			mop := j.invoke(j.operID, history.KindManifest)
			mop.Task, mop.Epoch, mop.HasManifest = wk.spec.ID, e, true
			octx, cancel := w.opCtx(ctx)
			m, err := j.oper.EpochManifest(octx, j.name, e, wk.spec.ID)
			cancel()
			if err == nil {
				mop.Keys, mop.Refs = manifestKeys(*m), history.ManifestRefs(*m)
			}
			w.h.Finish(mop, err, false)
		}
	case r < 2*w.cfg.PinProb && len(j.pins) > 0:
		p := j.pins[0]
		op := j.invoke(j.operID, history.KindUnpin)
		op.Epoch = p
		octx, cancel := w.opCtx(ctx)
		_, err := j.oper.Unpin(octx, j.name, p)
		cancel()
		w.h.Finish(op, err, true)
		if op.Outcome != history.Unknown {
			j.pins = j.pins[1:]
		}
	case r < 2*w.cfg.PinProb+0.02:
		// Retention moves between 1 and 3 checkpoints: lowering it
		// subsumes checkpoints at the next completion.
		cfg := JobConfig()
		cfg.Retained = 1 + w.rnd.IntN(3)
		op := j.invoke(j.operID, history.KindPutJob)
		op.Note = fmt.Sprintf("retained=%d", cfg.Retained)
		octx, cancel := w.opCtx(ctx)
		_, err := j.oper.PutJob(octx, j.name, cfg)
		cancel()
		w.h.Finish(op, err, true)
	}
}

// worker is one task of a job.
type worker struct {
	j    *jobRun
	spec TaskSpec
	caps wire.Caps
	c    *client.Client
	cid  int

	gen    uint64
	ts     *client.TaskState
	seq    uint64
	left   []leftBlob
	reused *manifests.Ref
	// lastReused is the last blob referenced again, at reusedAt.
	lastReused *manifests.Ref
	reusedAt   time.Time
	// reuses counts, per blob key, the times it was referenced again.
	reuses map[string]int
	// broken: the worker's state is uncertain (an ack whose outcome stayed
	// unknown, a refusal it cannot repair); the job restarts.
	broken bool
}

type leftBlob struct {
	key  string
	size uint64
	at   time.Time
	// after is how long past the grace period a worker waits before it
	// references the blob again, drawn once from [0, GC interval +
	// Config.ReuseWindow):
	// workers look often, and without it would nearly always take a
	// candidate before the collector's next cycle has listed it.
	after time.Duration
}

// reset starts the worker in a new attempt: it restores from the latest
// checkpoint (reading its state) and continues from there.
func (wk *worker) reset(ctx context.Context, gen uint64) {
	w := wk.j.w
	wk.gen, wk.broken, wk.ts, wk.left, wk.reused = gen, false, nil, nil, nil
	var r *client.Restore
	var err error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		if r, err = w.restore(ctx, wk.c, wk.cid, wk.j.name, wk.spec.ID, client.RestoreOptions{}); err == nil {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if err != nil || r == nil {
		wk.broken = true
		return
	}
	if !wk.caps.Has(wire.KindState) {
		return
	}
	if wk.ts, err = client.NewTaskState(r, wk.caps); err != nil {
		wk.broken = true
		return
	}
	wk.seq = 1
	if m := r.StateManifest(); m != nil {
		for _, sg := range m.Segments {
			wk.seq = max(wk.seq, sg.LastSeq+1)
		}
	}
}

func (wk *worker) payload(gen, e uint64, k wire.Kind) []byte {
	return []byte(wk.j.w.value(wk.j.name, "/", wk.spec.ID, "/g", gen, "/e", e, "/", k))
}

// ack acknowledges epoch e: inline payloads of its kinds and, for a state
// task, the manifest change of this epoch (a new changelog blob, now and
// then a materialization, a dropped segment or a blob referenced again).
func (wk *worker) ack(ctx context.Context, gen, e uint64) {
	if wk.broken || wk.gen != gen {
		return
	}
	w := wk.j.w
	payloads := map[wire.Kind][]byte{}
	for _, k := range wire.Kinds {
		if wk.caps.Has(k) {
			payloads[k] = wk.payload(gen, e, k)
		}
	}
	main := MainKind(wk.caps)
	if wk.ts != nil {
		wk.mutate(ctx, gen, e)
	}
	uncertain := false
	for try := 0; try < 6 && ctx.Err() == nil; try++ {
		op := &history.Op{Client: wk.cid, Kind: history.KindAck, Job: wk.j.name, Task: wk.spec.ID, Gen: gen, Epoch: e, Value: string(payloads[main])}
		if wk.reused != nil {
			op.Note = NoteReuse + wk.reused.Key
		}
		req := client.AckRequest{Payloads: payloads}
		if wk.ts != nil {
			req.Manifest = wk.ts.Manifest()
			op.HasManifest = true
			cur := wk.ts.Current()
			op.Keys, op.Refs = manifestKeys(cur), history.ManifestRefs(cur)
			if req.Manifest != nil {
				for _, b := range req.Manifest.Blobs {
					op.Commits = append(op.Commits, b.Key)
				}
			}
		}
		w.h.Invoke(op)
		octx, cancel := w.opCtx(ctx)
		res, err := wk.c.Ack(octx, wk.j.name, gen, e, wk.spec.ID, req)
		cancel()
		if err == nil {
			op.Completed = res.Completed
			if res.Ack != nil {
				op.Hash = res.Ack.ContentHash
			}
		}
		w.h.Finish(op, err, true)
		switch op.Outcome {
		case history.OK:
			if wk.ts != nil {
				prev := wk.ts.AckedManifest()
				wk.ts.Acked()
				wk.noteLeft(prev, wk.ts.AckedManifest())
			}
			wk.reused = nil
			return
		case history.Fail:
			// A blob referenced again may be deleting or gone; with
			// ReuseSameRef the store refuses the very reference that an
			// older checkpoint still holds as dropped (manifest_mismatch).
			if (errors.Is(err, client.ErrBlobDeleting) || errors.Is(err, wire.ErrManifestMismatch)) && !uncertain && wk.undoReuse() {
				continue
			}
			if (errors.Is(err, client.ErrEpochNotPending) || errors.Is(err, client.ErrFenced)) && !uncertain {
				// Nothing was stored: the pending delta goes with the
				// next epoch's ack.
				wk.reused = nil
				return
			}
			wk.broken = true
			return
		default:
			uncertain = true
			sleep(ctx, 100*time.Millisecond)
		}
	}
	wk.broken = true
}

// undoReuse removes a blob referenced again from the pending delta, after
// the store refused it as deleting or gone.
func (wk *worker) undoReuse() bool {
	if wk.reused == nil || wk.ts == nil || !wk.ts.Has(*wk.reused) {
		return false
	}
	err := wk.ts.DropSegment(*wk.reused)
	wk.reused = nil
	return err == nil
}

func (wk *worker) noteLeft(prev, next manifests.Manifest) {
	now := time.Now()
	nk := next.Blobs()
	for _, k := range prev.Blobs() {
		if !slices.Contains(nk, k) {
			if v, ok := wk.j.w.contents.Load(k); ok {
				after := time.Duration(wk.j.w.rnd.IntN(int((wk.j.w.cfg.GCInterval+wk.j.w.cfg.ReuseWindow)/time.Millisecond))) * time.Millisecond
				wk.left = append(wk.left, leftBlob{key: k, size: uint64(len(v.([]byte))), at: now, after: after})
			}
		}
	}
	// Long enough to hold blobs until retention and the grace period are
	// over (a task leaves several a second), not to grow without bound.
	if len(wk.left) > 1000 {
		wk.left = wk.left[len(wk.left)-1000:]
	}
}

// mutate changes the task's state for epoch e.
func (wk *worker) mutate(ctx context.Context, gen, e uint64) {
	w := wk.j.w
	ts := wk.ts
	if key, size, ok := wk.upload(ctx, gen, e); ok {
		if ts.AddBlob(key, size, "") == nil && ts.AddSegmentCRC(key, 0, size, wk.seq, wk.seq+9, w.crc(key, 0, size)) == nil {
			wk.seq += 10
		}
	}
	// A blob referenced again stays in the manifest for ReuseHold: no
	// materialization (it truncates the changelog) and no drop of it.
	holding := time.Since(wk.reusedAt) < w.cfg.ReuseHold
	switch r := w.rnd.Float64(); {
	case r < 0.15 && holding:
	case r < 0.15:
		if key, size, ok := wk.upload(ctx, gen, e); ok {
			if ts.AddBlob(key, size, "") == nil {
				_ = ts.Materialize([]manifests.Base{{Key: key, Offset: 0, Length: size, CRC32C: w.crc(key, 0, size)}}, wk.seq)
			}
		}
	case r < 0.35:
		cur := ts.Current()
		if len(cur.Segments) > 1 {
			id := cur.Segments[w.rnd.IntN(len(cur.Segments))].ID()
			if !holding || wk.lastReused == nil || id != *wk.lastReused {
				_ = ts.DropSegment(id)
			}
		}
	}
	if w.rnd.Float64() < w.cfg.ReuseProb {
		wk.reuse(ctx)
	}
}

// NoteReuse starts the note of an ack that references again a blob the
// store recorded as a GC candidate.
const NoteReuse = "references again a GC candidate: "

// reuse references again a blob that left the task's manifest: one the
// store records as a GC candidate now (live, no reference for at least
// the grace period), so the collector may be between listing it and
// deleting it. The mark's re-check must then keep it.
func (wk *worker) reuse(ctx context.Context) {
	w := wk.j.w
	// Up to five lookups among the blobs that left long enough ago, at
	// random: some stay referenced for long (a pinned savepoint's).
	var old []int
	for i, l := range wk.left {
		if time.Since(l.at) >= w.cfg.GCGrace {
			old = append(old, i)
		}
	}
	var gone []int
	defer func() {
		slices.Sort(gone)
		for _, i := range slices.Backward(gone) {
			wk.left = slices.Delete(wk.left, i, i+1)
		}
	}()
	for n := 0; n < 5 && len(old) > 0; n++ {
		pick := w.rnd.IntN(len(old))
		i := old[pick]
		old = slices.Delete(old, pick, pick+1)
		l := wk.left[i]
		rec, err := w.blobRecord(ctx, l.key)
		if err != nil {
			continue
		}
		if rec.State != wire.BlobLive {
			gone = append(gone, i) // deleting or gone: it will not come back
			continue
		}
		if rec.Refs > 0 || rec.UnreferencedAt == nil || time.Since(*rec.UnreferencedAt) < w.cfg.GCGrace+l.after {
			continue // still referenced by a retained checkpoint, or too young
		}
		// The same blob at a new offset, unless SameRef: the store then
		// sees the very segment it dropped come back.
		off := uint64(0)
		if !w.cfg.ReuseSameRef {
			wk.reuses[l.key]++
			off = uint64(wk.reuses[l.key])
		}
		ref := manifests.Ref{Key: l.key, Offset: off}
		gone = append(gone, i)
		if off >= l.size || wk.ts.Has(ref) {
			return
		}
		if wk.ts.AddSegmentCRC(l.key, off, l.size-off, wk.seq, wk.seq+9, w.crc(l.key, off, l.size-off)) == nil {
			wk.seq += 10
			wk.reused, wk.lastReused = &ref, &ref
			wk.reusedAt = time.Now()
		}
		return
	}
}

// BlobPath is the API path of blob key's record, each segment of the key
// escaped.
func BlobPath(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/blobs/" + strings.Join(parts, "/")
}

// blobRecord reads the store's record of blob key (a linearizable read,
// through any member; not recorded: it decides what to do, it checks
// nothing).
func (w *Workload) blobRecord(ctx context.Context, key string) (*wire.Blob, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	base := w.all[w.rnd.IntN(len(w.all))]
	req, err := http.NewRequestWithContext(ctx, "GET", base+BlobPath(key), nil)
	if err != nil {
		return nil, err
	}
	resp, err := w.probe.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/blobs/%s: %s", key, resp.Status)
	}
	var b wire.Blob
	return &b, json.NewDecoder(resp.Body).Decode(&b)
}

// CodeRepeatedKey is the history code of an upload whose slot key the
// store had already handed out (to this or another upload): the workload
// does not write it.
const CodeRepeatedKey = "repeated_key"

// upload uploads a new blob of unique content and returns its key.
func (wk *worker) upload(ctx context.Context, gen, e uint64) (string, uint64, bool) {
	w := wk.j.w
	size := uint64(256 + w.rnd.IntN(1024))
	op := w.h.Invoke(&history.Op{Client: wk.cid, Kind: history.KindUpload, Job: wk.j.name, Task: wk.spec.ID, Gen: gen, Epoch: e})
	octx, cancel := w.opCtx(ctx)
	defer cancel()
	slots, err := wk.c.UploadSlots(octx, wk.j.name, gen, wk.spec.ID, 1)
	if err != nil {
		w.h.Finish(op, err, true)
		return "", 0, false
	}
	slot := slots[0]
	op.Key = slot.Key
	exp := slot.ExpiresAt
	op.Expires = &exp
	content := makeContent(slot.Key, size)
	if _, dup := w.contents.LoadOrStore(slot.Key, content); dup {
		// The store handed out a key it had handed out before: keep the
		// first upload's content (a checkpoint may reference it) and do
		// not write over it; the checkers report the repeated key.
		w.h.FinishAs(op, history.Fail, CodeRepeatedKey, fmt.Errorf("upload slot key %s handed out before", slot.Key))
		return "", 0, false
	}
	err = wk.c.PutObject(octx, slot, bytes.NewReader(content), int64(size))
	w.h.Finish(op, err, true)
	return slot.Key, size, err == nil
}

// crc is the CRC32C that an ack declares for length bytes of blob key at
// off: of what the workload uploaded there.
func (w *Workload) crc(key string, off, length uint64) string {
	v, ok := w.contents.Load(key)
	if !ok || off+length > uint64(len(v.([]byte))) {
		panic(fmt.Sprintf("workload: crc of %s@%d+%d, which it did not upload", key, off, length))
	}
	return manifests.CRC32C(v.([]byte)[off : off+length])
}

// makeContent is the unique content of a blob: its key, repeated.
func makeContent(key string, size uint64) []byte {
	b := []byte(strings.Repeat(key+"|", int(size)/(len(key)+1)+1))
	return b[:size]
}
