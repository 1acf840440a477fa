package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
	"github.com/metastore/metastore/jepsen/workload"
)

// Acks checks, against the history and the final state:
//
//   - no lost acknowledged write: every ack answered ok is, at the end, in
//     an epoch the store still remembers, which holds an ack record of that
//     task with the content hash the ok answer gave, whatever the epoch's
//     state (pending, aborted, subsumed or completed); if that epoch is a
//     retained or pinned checkpoint the store holds exactly the acked
//     payload and manifest, and if it is pending in the job's current
//     generation the acked manifest (of an ok ack of that generation); an
//     ok ack may only have vanished with its epoch being aborted (by the
//     workload, by a newer attempt, by the completion of a later epoch) or
//     subsumed by retention. An ack or await that reported
//     the epoch completed must end completed or subsumed, never aborted.
//   - no value never written: every payload and manifest a retained or
//     pinned checkpoint holds, and every payload a read or restore
//     returned, is one a worker sent for that job, epoch and task in an
//     ack that may have taken effect (ok or unknown), an empty one too
//     unless the restored task has no inline kind; a restore without a
//     state manifest of an epoch whose every such ack sent one of blobs
//     lost it; blob bytes read back
//     equal what was uploaded, and a restore whose range read failed its
//     acked CRC32C on every attempt (workload.CodeChecksum) had a GET of
//     that blob corrupted by the S3 proxy during it; manifests of a completed epoch read twice
//     are equal.
//   - epochs strictly increasing: begins answered ok for a job increase in
//     real-time order; the final epochs' generations never decrease and
//     their completion times increase with the epoch number; a completed
//     epoch has every expected ack.
//   - no write from a fenced generation accepted: no begin, ack or abort
//     of generation g answered ok when invoked after an attempt of a newer
//     generation had been answered ok; zombie acks are never ok.
//
// clockSlack is how far apart two proposals' clocks may be stamped out
// of log order (concurrent proposals stamp before they are sequenced),
// with every member's clock right; twice Input.ClockSkew is added when
// the run set clocks off.
const clockSlack = 2 * time.Second

func Acks(in *Input) Verdict {
	start := time.Now()
	var p problems
	t0 := time.Time{}
	if len(in.Ops) > 0 {
		t0 = in.Ops[0].Invoke
	}
	type slot struct {
		job   string
		epoch uint64
		task  string
	}
	// What was sent, by slot: every ack that may have taken effect.
	sent := map[slot][]history.Op{}
	for _, o := range in.Ops {
		if o.Kind == history.KindAck && o.Outcome != history.Fail {
			k := slot{o.Job, o.Epoch, o.Task}
			sent[k] = append(sent[k], o)
		}
	}
	valueSent := func(job string, epoch uint64, task, value string) bool {
		for _, o := range sent[slot{job, epoch, task}] {
			if o.Value == value {
				return true
			}
		}
		return false
	}
	manifestSent := func(job string, epoch uint64, task string, keys, refs []string) bool {
		for _, o := range sent[slot{job, epoch, task}] {
			if o.HasManifest && sameManifest(o.Keys, o.Refs, keys, refs) {
				return true
			}
		}
		return false
	}

	// Fencing.
	type att struct {
		gen uint64
		ret time.Time
	}
	attempts := map[string][]att{}
	for _, o := range in.Ops {
		if o.Kind == history.KindAttempt && o.Outcome == history.OK {
			attempts[o.Job] = append(attempts[o.Job], att{o.Gen, o.Complete})
		}
	}
	for _, o := range in.Ops {
		switch o.Kind {
		case history.KindZombieAck:
			if o.Outcome == history.OK {
				p.addf("zombie ack of fenced generation %d accepted: job %s epoch %d task %s at %s", o.Gen, o.Job, o.Epoch, o.Task, at(t0, o.Invoke))
			}
		case history.KindAck, history.KindBegin, history.KindAbort:
			if o.Outcome != history.OK {
				continue
			}
			for _, a := range attempts[o.Job] {
				if a.gen > o.Gen && a.ret.Before(o.Invoke) {
					p.addf("%s of generation %d accepted (job %s epoch %d task %s, invoked %s) after generation %d started (%s)", o.Kind, o.Gen, o.Job, o.Epoch, o.Task, at(t0, o.Invoke), a.gen, at(t0, a.ret))
					break
				}
			}
		}
	}

	// Begins increase in real time.
	for job, ops := range opsByJob(in.Ops) {
		var begins []history.Op
		for _, o := range ops {
			if o.Kind == history.KindBegin && o.Outcome == history.OK {
				begins = append(begins, o)
			}
		}
		for i, a := range begins {
			for _, b := range begins[i+1:] {
				if a.Complete.Before(b.Invoke) && b.Epoch <= a.Epoch && !(b.Epoch == a.Epoch && b.Gen == a.Gen) {
					p.addf("job %s: begin of epoch %d accepted after epoch %d was begun", job, b.Epoch, a.Epoch)
				}
			}
		}
	}

	// Reads and restores return values that were written; blob bytes.
	manifests := map[slot]history.Op{}
	for _, o := range in.Ops {
		switch {
		case o.Kind == history.KindRestore && o.Code == workload.CodeContent:
			p.addf("restore of job %s task %s read bytes that were never uploaded: %s", o.Job, o.Task, o.Error)
		case o.Kind == history.KindRestore && o.Code == workload.CodeChecksum:
			if !corruptedGet(in, o.Key, o.Invoke, o.Complete) {
				p.addf("restore of job %s task %s read bytes of blob %s whose CRC32C differs from the one acked, on every attempt, and the S3 proxy corrupted no GET of it during the restore: %s", o.Job, o.Task, o.Key, o.Error)
			}
		case (o.Kind == history.KindRead || o.Kind == history.KindRestore) && o.Outcome == history.OK && o.ReadEpoch > 0:
			// A read records the payload whenever it records an epoch, and
			// a restore the payload of the task's own main kind, so an
			// empty payload is one an ack must have sent too; exempt are
			// only restores of a task without an inline kind (map-0, never
			// acked) or one the workload does not know.
			if (o.Value != "" || o.Kind == history.KindRead || hasInlineKind(o.Task)) && !valueSent(o.Job, o.ReadEpoch, o.Task, o.Value) {
				p.addf("%s of job %s task %s returned epoch %d with payload %q, which no ack of that epoch sent", o.Kind, o.Job, o.Task, o.ReadEpoch, short(o.Value))
			}
			if o.HasManifest && !manifestSent(o.Job, o.ReadEpoch, o.Task, o.Keys, o.Refs) {
				p.addf("restore of job %s task %s returned epoch %d with a manifest of %d blobs no ack of that epoch sent", o.Job, o.Task, o.ReadEpoch, len(o.Keys))
			}
			// A restore without a manifest lost the acked one when every
			// ack of that slot that may have taken effect sent a manifest
			// of blobs (one of none restores as none).
			if o.Kind == history.KindRestore && !o.HasManifest {
				acks := sent[slot{o.Job, o.ReadEpoch, o.Task}]
				lost := len(acks) > 0
				for _, a := range acks {
					if !a.HasManifest || len(a.Keys) == 0 {
						lost = false
					}
				}
				if lost {
					p.addf("restore of job %s task %s returned epoch %d without a state manifest, but every ack of that epoch sent one of blobs", o.Job, o.Task, o.ReadEpoch)
				}
			}
		case o.Kind == history.KindManifest && o.Outcome == history.OK:
			k := slot{o.Job, o.Epoch, o.Task}
			if prev, ok := manifests[k]; ok && !sameManifest(prev.Keys, prev.Refs, o.Keys, o.Refs) {
				p.addf("the manifest of completed epoch %d of job %s task %s changed between two reads", o.Epoch, o.Job, o.Task)
			}
			manifests[k] = o
			if !manifestSent(o.Job, o.Epoch, o.Task, o.Keys, o.Refs) {
				p.addf("manifest read of job %s epoch %d task %s: %d blobs no ack of that epoch sent", o.Job, o.Epoch, o.Task, len(o.Keys))
			}
		}
	}

	if in.Final == nil || in.Final.CollectErr != "" {
		if in.Final != nil {
			p.addf("final state not collected: %s", in.Final.CollectErr)
		}
		return p.verdict("acks", "", start)
	}

	// The final state.
	var nAcks, nEpochs int
	for _, job := range sortedKeys(in.Final.Jobs) {
		jf := in.Final.Jobs[job]
		byEpoch := map[uint64]EpochFinal{}
		eps := append([]EpochFinal(nil), jf.Epochs...)
		sort.Slice(eps, func(i, k int) bool { return eps[i].Epoch < eps[k].Epoch })
		var prevGen uint64
		var prevDone *EpochFinal
		for i, e := range eps {
			byEpoch[e.Epoch] = e
			nEpochs++
			if e.Generation < prevGen {
				p.addf("job %s: epoch %d has generation %d, below the generation %d of an earlier epoch", job, e.Epoch, e.Generation, prevGen)
			}
			prevGen = max(prevGen, e.Generation)
			if e.CompletedAt != nil {
				if prevDone != nil && prevDone.CompletedAt != nil && e.CompletedAt.Before(prevDone.CompletedAt.Add(-clockSlack-2*in.ClockSkew)) {
					p.addf("job %s: epoch %d completed at %s, before the older epoch %d (%s)", job, e.Epoch, e.CompletedAt.Format(time.RFC3339Nano), prevDone.Epoch, prevDone.CompletedAt.Format(time.RFC3339Nano))
				}
				prevDone = &eps[i]
			}
			if (e.State == "completed") && e.Acked != e.Expected {
				p.addf("job %s: epoch %d completed with %d of %d expected acks", job, e.Epoch, e.Acked, e.Expected)
			}
			if e.Acked != len(e.Acks) {
				p.addf("job %s: epoch %d (%s) counts %d acks but holds %d ack records", job, e.Epoch, e.State, e.Acked, len(e.Acks))
			}
			if e.State == "pending" && e.Generation != jf.Generation {
				p.addf("job %s: epoch %d of superseded generation %d still pending (current %d)", job, e.Epoch, e.Generation, jf.Generation)
			}
			for task, tc := range e.Tasks {
				if e.State != "completed" {
					continue
				}
				if !valueSent(job, e.Epoch, task, tc.Value) {
					p.addf("job %s: checkpoint %d of task %s holds payload %q, which no ack of that epoch sent", job, e.Epoch, task, short(tc.Value))
				}
				if tc.HasManifest && !manifestSent(job, e.Epoch, task, tc.Keys, tc.Refs) {
					p.addf("job %s: checkpoint %d of task %s holds a manifest of %d blobs no ack of that epoch sent", job, e.Epoch, task, len(tc.Keys))
				}
			}
		}
		for _, o := range in.Ops {
			if o.Job != job {
				continue
			}
			switch {
			case o.Kind == history.KindBegin && o.Outcome == history.OK:
				if _, ok := byEpoch[o.Epoch]; !ok {
					p.addf("job %s: epoch %d was begun (ok at %s) but the store does not remember it", job, o.Epoch, at(t0, o.Complete))
				}
			case o.Kind == history.KindAwait && o.Outcome == history.OK && o.Completed:
				if e, ok := byEpoch[o.Epoch]; ok && e.State != "completed" && e.State != "subsumed" {
					p.addf("job %s: epoch %d was seen completed (await at %s) but ended %s", job, o.Epoch, at(t0, o.Complete), e.State)
				}
			case o.Kind == history.KindAck && o.Outcome == history.OK:
				nAcks++
				e, ok := byEpoch[o.Epoch]
				if !ok {
					p.addf("lost ack: job %s epoch %d task %s was acknowledged (ok at %s) but the store does not remember the epoch", job, o.Epoch, o.Task, at(t0, o.Complete))
					continue
				}
				// Whatever became of the epoch, the store keeps its ack
				// records until it forgets the epoch.
				rec, held := e.Acks[o.Task]
				switch {
				case !held:
					p.addf("lost ack: job %s epoch %d (%s) task %s was acknowledged ok at %s but the store holds no ack of it", job, o.Epoch, e.State, o.Task, at(t0, o.Complete))
				case o.Hash != "" && rec.Hash != o.Hash:
					p.addf("lost ack: job %s epoch %d (%s) task %s holds an ack of content %s, but content %s was acknowledged ok at %s", job, o.Epoch, e.State, o.Task, short(rec.Hash), short(o.Hash), at(t0, o.Complete))
				}
				if o.Completed && e.State != "completed" && e.State != "subsumed" {
					p.addf("lost completion: job %s epoch %d was completed by the ack of %s (ok at %s) but ended %s", job, o.Epoch, o.Task, at(t0, o.Complete), e.State)
				}
				if e.State == "pending" && e.Generation == jf.Generation && o.Gen == e.Generation && o.HasManifest {
					// The store's manifest of a pending epoch is the
					// acked one (read by the runner; not found skipped).
					tc, ok := e.Tasks[o.Task]
					switch {
					case !ok && len(o.Keys) > 0:
						p.addf("lost ack: job %s pending epoch %d holds no manifest of task %s, but one of %d blobs was acknowledged ok at %s", job, o.Epoch, o.Task, len(o.Keys), at(t0, o.Complete))
					case ok && (tc.HasManifest || len(o.Keys) > 0) && !sameManifest(tc.Keys, tc.Refs, o.Keys, o.Refs):
						p.addf("lost ack: job %s pending epoch %d holds a manifest of task %s of %d blobs, but one of %d blobs was acknowledged ok at %s", job, o.Epoch, o.Task, len(tc.Keys), len(o.Keys), at(t0, o.Complete))
					}
				}
				if e.State != "completed" {
					continue // pending, or legitimately aborted or subsumed
				}
				tc, ok := e.Tasks[o.Task]
				if !ok {
					p.addf("lost ack: job %s checkpoint %d lacks task %s, acknowledged ok at %s", job, o.Epoch, o.Task, at(t0, o.Complete))
					continue
				}
				if tc.Value != o.Value {
					p.addf("lost ack: job %s checkpoint %d task %s holds %q, but %q was acknowledged ok at %s", job, o.Epoch, o.Task, short(tc.Value), short(o.Value), at(t0, o.Complete))
				}
				// A checkpoint without a manifest lost an acked one of
				// blobs (an acked manifest of none restores as none).
				if o.HasManifest && (tc.HasManifest || len(o.Keys) > 0) && !sameManifest(tc.Keys, tc.Refs, o.Keys, o.Refs) {
					p.addf("lost ack: job %s checkpoint %d task %s holds a manifest of %d blobs, but one of %d blobs was acknowledged ok at %s", job, o.Epoch, o.Task, len(tc.Keys), len(o.Keys), at(t0, o.Complete))
				}
			}
		}
	}
	return p.verdict("acks", fmt.Sprintf("%d ok acks and %d final epochs consistent; no fenced write accepted", nAcks, nEpochs), start)
}

// hasInlineKind reports whether task is one of the workload's with an
// inline kind (workload.MainKind of its capabilities), whose restore
// records that kind's payload, empty or not.
func hasInlineKind(task string) bool {
	caps, ok := workload.TaskCaps(task)
	return ok && workload.MainKind(caps) != ""
}

// corruptedGet reports whether the S3 proxy flipped bytes of an answer to
// a GET of blob key that reached it between from and to (the s3-corrupt-get
// fault): the one legitimate reason a range read fails its CRC32C.
func corruptedGet(in *Input, key string, from, to time.Time) bool {
	if key == "" {
		return false
	}
	for _, r := range in.S3 {
		if r.Op == s3proxy.OpGet && r.Flipped > 0 && r.Key == in.S3Prefix+key && !r.Start.Before(from) && !r.Start.After(to) {
			return true
		}
	}
	return false
}
