package fsm

import "github.com/metastore/metastore/wire"

// What the state machine shows outside. Its records (records.go,
// model.go, auth.go, jobdelete.go) are its storage format and are not
// exported; its reads and the values of its commands answer with the types
// of package wire, converted here field by field, so a change of how a
// record is stored does not change an answer.

// shown converts the value a command handler returns to what the
// command's Result carries: a record or an internal answer becomes its
// wire type; any other value (counts, keys, flags, BatchResults) is
// returned as it is.
func shown(v any) any {
	switch v := v.(type) {
	case *jobRecord:
		return wireJob(v)
	case *attemptRecord:
		a := wireAttempt(v)
		return &a
	case *epochRecord:
		return wireEpoch(v)
	case *ackResult:
		return wireAckResult(v)
	case *blobRecord:
		return wireBlob(v)
	case []*blobRecord:
		out := make([]*wire.Blob, len(v))
		for i, b := range v {
			out[i] = wireBlob(b)
		}
		return out
	case *tokenRecord:
		return wireToken(v)
	case *jobTombstone:
		return wireJobDeletion(v)
	case *memberRecord:
		m := wireMember(v)
		return &m
	}
	return v
}

func wireJobConfig(c jobConfig) wire.JobConfig {
	return wire.JobConfig{Retained: c.Retained, AckTimeout: c.AckTimeout, History: c.History}
}

func wireJob(j *jobRecord) *wire.Job {
	if j == nil {
		return nil
	}
	return &wire.Job{
		ID: j.ID, Config: wireJobConfig(j.Config), Generation: j.Generation, AttemptID: j.AttemptID,
		LastEpoch: j.LastEpoch, LatestCompleted: j.LatestCompleted,
		Pending: j.Pending, Retained: j.Retained, Ended: j.Ended,
		RestoredAttempts: j.RestoredAttempts, RestoresCountedFrom: j.RestoresCountedFrom, GenerationBase: j.GenerationBase,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex,
	}
}

func wireTask(t *taskRecord) wire.Task { return wire.Task{ID: t.ID, Caps: t.Caps} }

func wireAttempt(a *attemptRecord) wire.Attempt {
	return wire.Attempt{
		Job: a.Job, Generation: a.Generation, AttemptID: a.AttemptID, StartedAt: a.StartedAt,
		Tasks: a.Tasks, Expected: a.Expected, ContentHash: a.ContentHash, RestoredFrom: a.RestoredFrom, Index: a.Index,
	}
}

func wireEpoch(e *epochRecord) *wire.Epoch {
	if e == nil {
		return nil
	}
	return &wire.Epoch{
		Job: e.Job, Epoch: e.Epoch, Generation: e.Generation, State: wire.EpochState(e.State),
		BeganAt: e.BeganAt, Deadline: e.Deadline, CompletedAt: e.CompletedAt, EndedAt: e.EndedAt, Reason: e.Reason,
		Expected: e.Expected, Acked: e.Acked, PayloadBytes: e.PayloadBytes, Pinned: e.Pinned, PinName: e.PinName,
		CreateIndex: e.CreateIndex, ModifyIndex: e.ModifyIndex,
	}
}

func wireAck(a *ackRecord) *wire.Ack {
	if a == nil {
		return nil
	}
	return &wire.Ack{Task: a.Task, At: a.At, Delay: a.Delay, Sizes: a.Sizes, ContentHash: a.ContentHash, Index: a.Index, Lineage: a.Lineage}
}

func wireAckResult(r *ackResult) *wire.AckResult {
	if r == nil {
		return nil
	}
	return &wire.AckResult{Ack: wireAck(r.Ack), Epoch: wireEpoch(r.Epoch), Completed: r.Completed}
}

func wireObservation(o *observation) *wire.Observation {
	if o == nil {
		return nil
	}
	return &wire.Observation{Size: o.Size, ETag: o.ETag, Missing: o.Missing, At: o.At}
}

func wireBlob(b *blobRecord) *wire.Blob {
	if b == nil {
		return nil
	}
	return &wire.Blob{
		Key: b.Key, Job: b.Job, Task: b.Task, Generation: b.Generation, State: wire.BlobState(b.State),
		Size: b.Size, Checksum: b.Checksum, Observed: wireObservation(b.Observed), AwaitingObservation: b.AwaitingObservation, Flagged: b.Flagged,
		Refs: b.Refs, LeaseUntil: b.LeaseUntil, CreatedAt: b.CreatedAt, UnreferencedAt: b.UnreferencedAt,
		DeletingAt: b.DeletingAt, GoneAt: b.GoneAt, ModifyIndex: b.ModifyIndex,
	}
}

// wireToken shows a token's record without its hash.
func wireToken(t *tokenRecord) *wire.Token {
	if t == nil {
		return nil
	}
	return &wire.Token{Accessor: t.Accessor, Role: t.Role, Job: t.Job, JobPrefix: t.JobPrefix,
		Description: t.Description, CreatedAt: t.CreatedAt, CreateIndex: t.CreateIndex}
}

func wireJobDeletion(ts *jobTombstone) *wire.JobDeletion {
	if ts == nil {
		return nil
	}
	pins := make([]wire.PinRef, 0, len(ts.Pins))
	for _, p := range ts.Pins {
		pins = append(pins, wire.PinRef{Epoch: p.Epoch, Name: p.Name})
	}
	return &wire.JobDeletion{Job: ts.Job, Generation: ts.Generation, LastEpoch: ts.LastEpoch, Forced: ts.Forced, PinsReleased: pins,
		LineagesReleased: ts.Lineages, IntentsExpired: ts.Intents, DeletedAt: ts.DeletedAt, Index: ts.Index}
}

// Member is a cluster member's addresses, as the member records hold them
// (Members; the value of a member-upsert command). The API has no type of
// its own for it: the node reads it to find members and the leader.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

func wireMember(m *memberRecord) Member {
	return Member{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr}
}
