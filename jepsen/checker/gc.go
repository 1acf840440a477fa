package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// interval is a time during which a blob key is certainly referenced (or
// held by a live intent), so the collector must not delete it and reads
// of it must find it.
type interval struct {
	from, to time.Time // to zero: until the end of the run
	why      string
}

func (iv interval) covers(a, b time.Time) bool {
	return !a.Before(iv.from) && (iv.to.IsZero() || !b.After(iv.to))
}

// intentMargin is taken off an upload lease's end: the lease is stamped
// by the leader's clock, on this machine too, but not at the instant the
// answer arrived.
const intentMargin = time.Second

// Protections computes, from the history alone, when each blob key was
// certainly protected from collection. Only facts the workload observed
// count; anything uncertain shortens an interval, never lengthens it, so
// a deletion found inside one is a real violation:
//
//   - intent: from the answer of the upload that got the key until the
//     lease's end less a margin, or until the first ack that commits the key
//     is invoked (the intent then turns into a live blob, protected below
//     only if the ack is answered ok);
//   - head: from the answer of an ok ack whose manifest holds the key (the
//     task's lineage head holds a reference, even if the epoch is aborted
//     later) until the task's next ack whose manifest lacks the key is
//     invoked, or a new attempt of the job is invoked (which detaches the
//     head), or the end of the run;
//   - pin: from the answer of an ok pin of an epoch to the invocation of its
//     unpin (or the end), for the keys of the epoch's manifests read after
//     the pin.
//
// skew is the largest amount by which the clocks of the members were set
// off the machine's during the run: a lease stamped by one leader's clock
// may be judged by another's, so an intent's end is taken that much
// earlier.
func Protections(ops []history.Op, skew time.Duration) map[string][]interval {
	out := map[string][]interval{}
	add := func(k string, iv interval) { out[k] = append(out[k], iv) }

	// Intents.
	firstCommit := map[string]time.Time{}
	for _, o := range ops {
		if o.Kind == history.KindAck {
			for _, k := range o.Commits {
				if t, ok := firstCommit[k]; !ok || o.Invoke.Before(t) {
					firstCommit[k] = o.Invoke
				}
			}
		}
	}
	for _, o := range ops {
		if o.Kind != history.KindUpload || o.Key == "" || o.Expires == nil || o.Complete.IsZero() {
			continue
		}
		end := o.Expires.Add(-intentMargin - skew)
		if t, ok := firstCommit[o.Key]; ok && t.Before(end) {
			end = t
		}
		if end.After(o.Complete) {
			add(o.Key, interval{o.Complete, end, fmt.Sprintf("upload intent of %s/%s (lease to %s)", o.Job, o.Task, o.Expires.Format("15:04:05.000"))})
		}
	}

	// Heads.
	attemptsByJob := map[string][]time.Time{}
	for _, o := range ops {
		if o.Kind == history.KindAttempt {
			attemptsByJob[o.Job] = append(attemptsByJob[o.Job], o.Invoke)
		}
	}
	type tk struct{ job, task string }
	acks := map[tk][]history.Op{}
	for _, o := range ops {
		if o.Kind == history.KindAck && o.HasManifest {
			acks[tk{o.Job, o.Task}] = append(acks[tk{o.Job, o.Task}], o)
		}
	}
	for key, list := range acks {
		sort.Slice(list, func(i, j int) bool { return list[i].Invoke.Before(list[j].Invoke) })
		for i, a := range list {
			if a.Outcome != history.OK {
				continue
			}
			for _, k := range a.Keys {
				var end time.Time
				for _, b := range list[i+1:] {
					if !slices.Contains(b.Keys, k) {
						end = b.Invoke
						break
					}
				}
				for _, t := range attemptsByJob[key.job] {
					if t.After(a.Complete) && (end.IsZero() || t.Before(end)) {
						end = t
					}
				}
				if end.IsZero() || end.After(a.Complete) {
					add(k, interval{a.Complete, end, fmt.Sprintf("manifest of %s/%s acked ok in epoch %d", key.job, key.task, a.Epoch)})
				}
			}
		}
	}

	// Pins.
	type je struct {
		job   string
		epoch uint64
	}
	keysOf := map[je][]string{}
	for _, o := range ops {
		if o.Kind == history.KindManifest && o.Outcome == history.OK {
			keysOf[je{o.Job, o.Epoch}] = append(keysOf[je{o.Job, o.Epoch}], o.Keys...)
		}
	}
	for _, o := range ops {
		if o.Kind != history.KindPin || o.Outcome != history.OK {
			continue
		}
		var end time.Time
		for _, u := range ops {
			if u.Kind == history.KindUnpin && u.Job == o.Job && u.Epoch == o.Epoch && u.Invoke.After(o.Complete) && (end.IsZero() || u.Invoke.Before(end)) {
				end = u.Invoke
			}
		}
		for _, k := range keysOf[je{o.Job, o.Epoch}] {
			add(k, interval{o.Complete, end, fmt.Sprintf("savepoint %s epoch %d", o.Job, o.Epoch)})
		}
	}
	return out
}

func protectedDuring(ivs []interval, a, b time.Time) (interval, bool) {
	for _, iv := range ivs {
		if iv.covers(a, b) {
			return iv, true
		}
	}
	return interval{}, false
}

// GCSafety checks that no protected blob was deleted or answered as
// missing, that no upload key was handed out twice (upload ops answered
// the same slot key), and that every blob the final state references
// exists.
//
// Deletions come from the S3 proxy's log: every DELETE and every key of a
// DeleteObjects that reached the S3 server, whatever the answer the member
// saw. Missing blobs: GET and HEAD requests the server answered 404, and
// the workload's own blob reads answered not found (or "deleting", "gone")
// by the metastore. Each is a violation when it happened entirely inside
// a protection interval of its key (Protections). At the end, every key
// the live checkpoints certainly reference (LiveSet: a retained, pinned or
// pending checkpoint's manifest, a task's working manifest in its job's
// current attempt) must be in the bucket.
func GCSafety(in *Input) Verdict {
	start := time.Now()
	var p problems
	prot := Protections(in.Ops, in.ClockSkew)
	t0 := time.Time{}
	if len(in.Ops) > 0 {
		t0 = in.Ops[0].Invoke
	}
	var deletes, misses int
	for _, r := range in.S3 {
		end := r.Start.Add(r.Latency)
		switch {
		case (r.Op == s3proxy.OpDelete || r.Op == s3proxy.OpDeleteBatch) && r.Forwarded:
			keys := r.Keys
			if r.Op == s3proxy.OpDelete {
				keys = []string{r.Key}
			}
			for _, sk := range keys {
				k, ok := strings.CutPrefix(sk, in.S3Prefix)
				if !ok {
					continue
				}
				deletes++
				if iv, bad := protectedDuring(prot[k], r.Start, end); bad {
					p.addf("blob %s deleted by %s at %s while protected (%s, since %s)", k, r.Client, at(t0, r.Start), iv.why, at(t0, iv.from))
				}
			}
		case (r.Op == s3proxy.OpGet || r.Op == s3proxy.OpHead) && r.Upstream == 404:
			k, ok := strings.CutPrefix(r.Key, in.S3Prefix)
			if !ok {
				continue
			}
			misses++
			if iv, bad := protectedDuring(prot[k], r.Start, end); bad {
				p.addf("%s of referenced blob %s by %s answered 404 at %s (%s, since %s)", r.Op, k, r.Client, at(t0, r.Start), iv.why, at(t0, iv.from))
			}
		}
	}
	// Fresh keys: each upload slot's key is handed out once.
	slots := map[string]history.Op{}
	for _, o := range in.Ops {
		if o.Kind != history.KindUpload || o.Key == "" {
			continue
		}
		if first, ok := slots[o.Key]; ok {
			p.addf("upload key %s handed out twice: to %s/%s generation %d (upload at %s) and to %s/%s generation %d (upload at %s)", o.Key, first.Job, first.Task, first.Gen, at(t0, first.Invoke), o.Job, o.Task, o.Gen, at(t0, o.Invoke))
			continue
		}
		slots[o.Key] = o
	}
	for _, o := range in.Ops {
		if o.Kind != history.KindRestore || o.Key == "" || o.Outcome == history.OK {
			continue
		}
		if o.Code != "not_found" && o.Code != "conflict" {
			continue
		}
		if iv, bad := protectedDuring(prot[o.Key], o.Invoke, o.Complete); bad {
			p.addf("read of referenced blob %s (restore of %s/%s) failed %s at %s (%s, since %s): %s", o.Key, o.Job, o.Task, o.Code, at(t0, o.Invoke), iv.why, at(t0, iv.from), short(o.Error))
		}
	}

	// The end.
	var referenced int
	if in.Final != nil && in.Final.BucketErr == "" && in.Final.CollectErr == "" {
		bucket := map[string]bool{}
		for _, k := range in.Final.Bucket {
			bucket[k] = true
		}
		live := LiveSet(in.Ops, in.Final)
		for _, k := range sortedKeys(live) {
			if !live[k].Certain {
				continue // held only if an ack of unknown outcome took effect
			}
			referenced++
			if !bucket[k] {
				p.addf("blob %s referenced by %s is missing from the bucket at the end", k, live[k].Why)
			}
		}
	} else if in.Final != nil {
		p.addf("final state incomplete: %s%s", in.Final.CollectErr, in.Final.BucketErr)
	}
	return p.verdict("gc-safety", fmt.Sprintf("%d deletions and %d misses outside protection; %d referenced blobs present at the end", deletes, misses, referenced), start)
}

// Live says why a blob key is live at the end of a run (LiveSet).
type Live struct {
	// Why names the checkpoint or working manifest that references the
	// key.
	Why string
	// Certain: the store must hold the key, so gc-safety requires it in
	// the bucket. Otherwise the store may hold it: the key is in a
	// working manifest only if an ack whose outcome stayed unknown took
	// effect.
	Certain bool
}

// LiveSet is the set of blobs that live checkpoints reference at the end
// of a run, computed from the final state and the history, never from the
// store's reference counts. It is what the store promises to keep and all
// it may keep (fsm/DESIGN.md, "Releasing what no attempt extends";
// fsm.TestOnlyLiveCheckpointsHoldReferences): "the blobs with references
// are exactly those of pending, retained and pinned checkpoints plus the
// current attempts' working manifests". So:
//
//   - every key of a retained, pinned or pending checkpoint's manifest
//     (Final.Jobs: each task's restore of a completed epoch, the manifests
//     acknowledged so far in a pending one, as the store answers them and,
//     for a pending epoch of the job's current generation, as the ok acks
//     of that generation in the history sent them; and of Final.Others, the jobs
//     the workload did not create, such as a fault's garbage job). What
//     else a lineage holds
//     comes down to these: "a detached lineage is rolled back to its
//     newest live epoch and deleted with its last one", and a fork into
//     another job holds a savepoint's blobs through its own checkpoints'
//     manifests, which list them;
//   - the working manifest of each task in its job's current attempt (the
//     generation Final.Jobs reports): "within an attempt, a head keeps the
//     manifest of its task's last ack even when that epoch was aborted:
//     the next ack's delta applies to it". It is the manifest of the
//     task's last ok ack of that generation (an ack op's Keys are its
//     whole manifest). Nothing older counts: as an attempt starts "every
//     head lineage of the job is marked released and settled: rolled back
//     to its newest live epoch (what acks of aborted epochs added dies),
//     or deleted, head included, when no live epoch holds it (a task
//     removed from the topology or left without state whose checkpoints
//     were subsumed, an attempt abandoned before completing a
//     checkpoint ...)". So a task the current attempt removed or made
//     stateless, or one that has not acknowledged in it yet, has no working
//     manifest here, whatever it held before. The acks of the generation
//     whose outcome stayed unknown after the last ok one may each have
//     become the head: a key in every candidate is certain, a key in some
//     only possible. The jobs of Final.Others have no history, so no
//     working manifest counts for them beyond their checkpoints (the
//     garbage job of gc-crash-after-mark acknowledges only epochs that
//     complete).
//
// Pins add nothing beyond their epochs (a pinned epoch stays completed
// until unpinned, then retention subsumes it like any other).
func LiveSet(ops []history.Op, f *Final) map[string]Live {
	out := map[string]Live{}
	if f == nil {
		return out
	}
	for _, job := range append(sortedKeys(f.Jobs), sortedKeys(f.Others)...) {
		jf := f.Jobs[job]
		if jf == nil {
			jf = f.Others[job]
		}
		for _, e := range jf.Epochs {
			if e.State != "completed" && e.State != "pending" {
				continue
			}
			state := e.State
			if e.Pinned {
				state += ", pinned"
			}
			for _, task := range sortedKeys(e.Tasks) {
				for _, k := range e.Tasks[task].Keys {
					if _, ok := out[k]; !ok {
						out[k] = Live{fmt.Sprintf("%s checkpoint %d (%s) of %s", job, e.Epoch, state, task), true}
					}
				}
			}
		}
	}
	// A pending epoch of the current attempt: the manifest each task
	// acknowledged ok in it, from the history, whatever the store
	// answered when the final state was read (a manifest it lost must
	// not drop the keys from the set).
	for _, pa := range pendingAcks(ops, f) {
		for _, k := range pa.Keys {
			if cur, ok := out[k]; !ok || !cur.Certain {
				out[k] = Live{fmt.Sprintf("%s pending epoch %d's manifest of %s (acknowledged ok)", pa.Job, pa.Epoch, pa.Task), true}
			}
		}
	}
	for _, h := range workingManifests(ops, f) {
		n := map[string]int{}
		first := map[string]history.Op{}
		for _, c := range h.candidates {
			for _, k := range c.Keys {
				if _, ok := first[k]; !ok {
					first[k] = c
				}
			}
			for _, k := range uniq(c.Keys) {
				n[k]++
			}
		}
		for _, k := range sortedKeys(n) {
			certain := h.certain && n[k] == len(h.candidates)
			if cur, ok := out[k]; ok && (cur.Certain || !certain) {
				continue
			}
			c := first[k]
			why := fmt.Sprintf("the working manifest of %s/%s in generation %d (its last ok ack, epoch %d)", h.job, h.task, h.gen, c.Epoch)
			if c.Outcome != history.OK {
				why = fmt.Sprintf("the working manifest of %s/%s in generation %d if its ack of epoch %d (outcome %s) took effect", h.job, h.task, h.gen, c.Epoch, c.Outcome)
			}
			out[k] = Live{why, certain}
		}
	}
	return out
}

// pendingAcks returns the ok acks with a state manifest of every epoch
// that ends pending in its job's current generation (Final.Jobs), of that
// generation: the manifests the epoch's checkpoint-to-be holds.
func pendingAcks(ops []history.Op, f *Final) []history.Op {
	type je struct {
		job   string
		epoch uint64
	}
	pending := map[je]bool{}
	for job, jf := range f.Jobs {
		for _, e := range jf.Epochs {
			if e.State == "pending" && e.Generation == jf.Generation {
				pending[je{job, e.Epoch}] = true
			}
		}
	}
	var out []history.Op
	for _, o := range ops {
		if o.Kind == history.KindAck && o.Outcome == history.OK && o.HasManifest && pending[je{o.Job, o.Epoch}] && o.Gen == f.Jobs[o.Job].Generation {
			out = append(out, o)
		}
	}
	return out
}

// head is a task's working manifest in its job's current attempt: one of
// candidates, the acks that may have set it (each op's Keys is the whole
// manifest after it).
type head struct {
	job, task string
	gen       uint64
	// candidates are the task's last ok ack of the generation, if any,
	// then every later ack whose outcome is unknown.
	candidates []history.Op
	// certain: one of the candidates is the head (an ok ack of the
	// generation exists); otherwise the task may have none.
	certain bool
}

// workingManifests finds, for each task of each job, what its working
// manifest in the job's current attempt (Final.Jobs' generation) may be:
// the acks of that generation with a state manifest that may have taken
// effect, from the last ok one. A worker's acks are sequential and, after
// an unknown outcome, it only retries the same ack (then an ok answer is
// that same ack) or stops: so acks of unknown outcome before the last ok
// one cannot have set the head.
func workingManifests(ops []history.Op, f *Final) []head {
	type tk struct{ job, task string }
	acks := map[tk][]history.Op{}
	for _, o := range ops {
		if o.Kind != history.KindAck || !o.HasManifest || o.Outcome == history.Fail {
			continue
		}
		if jf := f.Jobs[o.Job]; jf == nil || o.Gen != jf.Generation {
			continue
		}
		acks[tk{o.Job, o.Task}] = append(acks[tk{o.Job, o.Task}], o)
	}
	keys := make([]tk, 0, len(acks))
	for k := range acks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].job < keys[j].job || keys[i].job == keys[j].job && keys[i].task < keys[j].task
	})
	var out []head
	for _, k := range keys {
		list := acks[k]
		sort.SliceStable(list, func(i, j int) bool { return list[i].Invoke.Before(list[j].Invoke) })
		last := -1
		for i, a := range list {
			if a.Outcome == history.OK {
				last = i
			}
		}
		h := head{job: k.job, task: k.task, gen: f.Jobs[k.job].Generation, certain: last >= 0}
		h.candidates = list[max(last, 0):]
		out = append(out, h)
	}
	return out
}

func uniq(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

// GCLiveness checks that, after the cluster was healed and quiet for the
// grace period and ran two GC cycles, the bucket holds only the blobs that
// live checkpoints reference (LiveSet), young uploads and garbage inside
// its grace period (invariant 3 and the cost model's "the object store
// holds exactly the blobs that live checkpoints reference, plus uploads
// inside their lease and garbage inside its grace").
//
// It judges against the live set computed from the final state and the
// history, not against the store's reference counts: a reference held by
// a lineage that no live checkpoint needs (a task removed by a topology
// change, an abandoned attempt, acks of aborted epochs, a subsumed
// checkpoint) keeps the count above zero forever, and a check of counts
// calls that leaked blob referenced (issue 16). Every object must be:
//
//   - in the live set, certainly; or possibly (an ack whose outcome stayed
//     unknown) while the store still counts a reference to it;
//   - an upload intent, or an expired one, whose lease ended less than the
//     grace period before the final cycles began (not collectable yet);
//   - a blob unreferenced by a leader whose clock was ahead, by at most
//     the skew injected, less than the grace period before the final
//     cycles in that leader's time.
//
// Anything else is a leak: a blob recorded live with references that no
// live checkpoint holds, one with none, one left deleting, one recorded
// gone or expired, an object without a record. Its message gives the
// store's record (state, references, who uploaded it) and the last ack
// whose manifest held it, with that epoch's state at the end.
func GCLiveness(in *Input) Verdict {
	start := time.Now()
	var p problems
	f := in.Final
	switch {
	case f == nil:
		p.addf("no final state")
	case f.BucketErr != "":
		p.addf("bucket not listed: %s", f.BucketErr)
	case f.CollectErr != "":
		p.addf("final state incomplete, so the live set is unknown: %s", f.CollectErr)
	}
	if p.total > 0 {
		return p.verdict("gc-liveness", "", start)
	}
	live := LiveSet(in.Ops, f)
	var last map[string]history.Op // built at the first leak
	young, held, maybe := 0, 0, 0
	for _, k := range f.Bucket {
		l, isLive := live[k]
		if isLive && l.Certain {
			held++
			continue
		}
		r, ok := f.Records[k]
		switch {
		case !ok:
			p.addf("leak: object %s is in no live checkpoint and its record was not read", k)
			continue
		case r.Err != "":
			p.addf("leak: object %s is in no live checkpoint and has no usable record (%s)", k, r.Err)
			continue
		case isLive && r.State == "live" && r.Refs > 0:
			// Held by the working manifest an ack of unknown outcome set.
			maybe++
			continue
		case (r.State == "intent" || r.State == "expired") && r.LeaseUntil != nil && r.LeaseUntil.Add(f.Grace).After(f.GCStart):
			// An upload whose lease ended less than the grace period
			// before the final cycles: not collectable by them yet.
			young++
			continue
		case r.State == "live" && r.Refs == 0 && r.UnreferencedAt != nil && r.UnreferencedAt.Add(f.Grace).After(f.GCStart) &&
			r.UnreferencedAt.Before(f.GCStart.Add(in.ClockSkew)):
			// Unreferenced by a leader whose clock was ahead (by at
			// most the skew injected): its grace period is not over in
			// the store's time. Without skew the quiet period before the
			// final cycles rules this out.
			young++
			continue
		}
		if last == nil {
			last = lastHolders(in.Ops)
		}
		what := fmt.Sprintf("recorded %s with %d references", r.State, r.Refs)
		if r.State == "live" && r.Refs > 0 {
			what = fmt.Sprintf("recorded live with %d reference(s), but no live checkpoint references it", r.Refs)
		}
		p.addf("leak: object %s is still in the bucket after the final GC cycles, %s (%s)", k, what, leakContext(k, r, last, f))
	}
	return p.verdict("gc-liveness", fmt.Sprintf("%d objects in the bucket: %d in live checkpoints, %d possibly in a working manifest (an ack of unknown outcome), %d young uploads or garbage inside its grace; GC runs %v",
		len(f.Bucket), held, maybe, young, f.GCRuns), start)
}

// lastHolders indexes, by blob key, the last ack (by invocation) whose
// manifest held the key and that may have taken effect.
func lastHolders(ops []history.Op) map[string]history.Op {
	out := map[string]history.Op{}
	for _, o := range ops {
		if o.Kind != history.KindAck || !o.HasManifest || o.Outcome == history.Fail {
			continue
		}
		for _, k := range o.Keys {
			if cur, ok := out[k]; !ok || !o.Invoke.Before(cur.Invoke) {
				out[k] = o
			}
		}
	}
	return out
}

// leakContext says what the final state and the history tell about a
// leaked key: who uploaded it, the last ack whose manifest held it, the
// state of that ack's epoch at the end and the job's current attempt.
func leakContext(k string, r BlobRecord, last map[string]history.Op, f *Final) string {
	var parts []string
	if r.Job != "" {
		parts = append(parts, fmt.Sprintf("uploaded by %s/%s in generation %d", r.Job, r.Task, r.Generation))
	}
	a, ok := last[k]
	if !ok {
		parts = append(parts, "in no manifest an ack sent")
		return strings.Join(parts, "; ")
	}
	state := "not remembered"
	jf := f.Jobs[a.Job]
	if jf != nil {
		for _, e := range jf.Epochs {
			if e.Epoch == a.Epoch {
				state = e.State
				if e.Pinned {
					state += ", pinned"
				}
			}
		}
	}
	s := fmt.Sprintf("last in the manifest of the ack of %s/%s epoch %d in generation %d (%s), that epoch %s at the end", a.Job, a.Task, a.Epoch, a.Gen, a.Outcome, state)
	if jf != nil {
		s += fmt.Sprintf(", the job's current attempt generation %d", jf.Generation)
		if a.Gen == jf.Generation {
			s += " (a later ack of the task dropped it)"
		} else {
			s += fmt.Sprintf(" (no working manifest of %s from generation %d counts)", a.Task, a.Gen)
		}
	}
	return strings.Join(append(parts, s), "; ")
}
