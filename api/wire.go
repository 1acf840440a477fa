package api

import (
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// The state machine's records are its storage format; the API answers
// with the types of package wire. The functions here are the one place
// where one becomes the other, field by field, so a change of how fsm
// stores a record does not change an answer.

// answer converts the value of a state-machine call (a query or an applied
// command) to its wire form, keeping the index and the error.
func answer[T any](v T, idx uint64, err error) (any, uint64, error) {
	if err != nil {
		return nil, idx, err
	}
	return toWire(v), idx, nil
}

// toWire converts a record or query answer of package fsm to its wire
// type; a value of another type (a wire type already, a map built by a
// handler) is returned as it is.
func toWire(v any) any {
	switch v := v.(type) {
	case *fsm.Job:
		return wireJob(v)
	case []fsm.Job:
		return convertAll(v, func(j *fsm.Job) wire.Job { return *wireJob(j) })
	case *fsm.Attempt:
		a := wireAttempt(v)
		return &a
	case *fsm.AttemptDetail:
		if v == nil {
			return (*wire.AttemptDetail)(nil)
		}
		return &wire.AttemptDetail{Attempt: wireAttempt(&v.Attempt), TaskList: wireTasks(v.TaskList)}
	case *fsm.AttemptList:
		return wireAttemptList(v)
	case *fsm.Epoch:
		return wireEpoch(v)
	case []fsm.Epoch:
		return convertAll(v, func(e *fsm.Epoch) wire.Epoch { return *wireEpoch(e) })
	case *fsm.EpochDetail:
		return wireEpochDetail(v)
	case *fsm.AckResult:
		if v == nil {
			return (*wire.AckResult)(nil)
		}
		return &wire.AckResult{Ack: wireAck(v.Ack), Epoch: wireEpoch(v.Epoch), Completed: v.Completed}
	case *fsm.RestorePlan:
		return wireRestorePlan(v)
	case *fsm.Blob:
		return wireBlob(v)
	case *fsm.Token:
		return wireToken(v)
	case *fsm.JobTombstone:
		return wireJobDeletion(v)
	}
	return v
}

func wireJobDeletion(ts *fsm.JobTombstone) *wire.JobDeletion {
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

// convertAll converts every element of in; nil stays nil (JSON null), an
// empty slice stays empty ([]).
func convertAll[A, B any](in []A, f func(*A) B) []B {
	if in == nil {
		return nil
	}
	out := make([]B, len(in))
	for i := range in {
		out[i] = f(&in[i])
	}
	return out
}

func wireJobConfig(c fsm.JobConfig) wire.JobConfig {
	return wire.JobConfig{Retained: c.Retained, AckTimeout: c.AckTimeout, History: c.History}
}

func wireJob(j *fsm.Job) *wire.Job {
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

func wireTasks(ts []fsm.Task) []wire.Task {
	return convertAll(ts, func(t *fsm.Task) wire.Task { return wire.Task{ID: t.ID, Caps: t.Caps} })
}

func wireAttempt(a *fsm.Attempt) wire.Attempt {
	return wire.Attempt{
		Job: a.Job, Generation: a.Generation, AttemptID: a.AttemptID, StartedAt: a.StartedAt,
		Tasks: a.Tasks, Expected: a.Expected, ContentHash: a.ContentHash, RestoredFrom: a.RestoredFrom, Index: a.Index,
	}
}

func wireAttemptList(l *fsm.AttemptList) *wire.AttemptList {
	if l == nil {
		return nil
	}
	return &wire.AttemptList{Kept: l.Kept, Attempts: convertAll(l.Attempts, func(e *fsm.AttemptEntry) wire.AttemptEntry {
		return wire.AttemptEntry{Attempt: wireAttempt(&e.Attempt), TaskList: wireTasks(e.TaskList)}
	})}
}

func wireEpoch(e *fsm.Epoch) *wire.Epoch {
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

func wireAck(a *fsm.Ack) *wire.Ack {
	if a == nil {
		return nil
	}
	return &wire.Ack{Task: a.Task, At: a.At, Delay: a.Delay, Sizes: a.Sizes, ContentHash: a.ContentHash, Index: a.Index, Lineage: a.Lineage}
}

func wireEpochDetail(d *fsm.EpochDetail) *wire.EpochDetail {
	if d == nil {
		return nil
	}
	return &wire.EpochDetail{Epoch: *wireEpoch(&d.Epoch), Stragglers: d.Stragglers, Duration: d.Duration,
		Acks: convertAll(d.Acks, func(a *fsm.Ack) wire.Ack { return *wireAck(a) })}
}

func wireObservation(o *fsm.Observation) *wire.Observation {
	if o == nil {
		return nil
	}
	return &wire.Observation{Size: o.Size, ETag: o.ETag, Missing: o.Missing, At: o.At}
}

func wireRestorePlan(p *fsm.RestorePlan) *wire.RestorePlan {
	if p == nil {
		return nil
	}
	out := &wire.RestorePlan{
		Job: p.Job, Task: p.Task, Status: p.Status,
		Source:       wire.RestoreSource{Job: p.Source.Job, Task: p.Source.Task, Epoch: p.Source.Epoch, Generation: p.Source.Generation, Pin: p.Source.Pin},
		Capabilities: p.Capabilities, InlineBytes: p.InlineBytes,
		ObjectStoreReads: p.ObjectStoreReads, ObjectStoreBytes: p.ObjectStoreBytes,
	}
	if p.Kinds != nil {
		out.Kinds = make(map[wire.Kind]wire.KindRestore, len(p.Kinds))
		for k, kr := range p.Kinds {
			out.Kinds[k] = wire.KindRestore{Status: kr.Status, Payload: kr.Payload, Manifest: kr.Manifest, Bytes: kr.Bytes}
		}
	}
	out.FlaggedBlobs = convertAll(p.FlaggedBlobs, func(f *fsm.FlaggedBlob) wire.FlaggedBlob {
		return wire.FlaggedBlob{Key: f.Key, Declared: f.Declared, Observed: wireObservation(f.Observed)}
	})
	return out
}

func wireBlob(b *fsm.Blob) *wire.Blob {
	if b == nil {
		return nil
	}
	return &wire.Blob{
		Key: b.Key, Job: b.Job, Task: b.Task, Generation: b.Generation, State: wire.BlobState(b.State),
		Size: b.Size, Checksum: b.Checksum, Observed: wireObservation(b.Observed), Flagged: b.Flagged,
		Refs: b.Refs, LeaseUntil: b.LeaseUntil, CreatedAt: b.CreatedAt, UnreferencedAt: b.UnreferencedAt,
		DeletingAt: b.DeletingAt, GoneAt: b.GoneAt, ModifyIndex: b.ModifyIndex,
	}
}

// wireToken shows a token's record without its hash.
func wireToken(t *fsm.Token) *wire.Token {
	if t == nil {
		return nil
	}
	return &wire.Token{Accessor: t.Accessor, Role: wire.Role(t.Role), Job: t.Job, JobPrefix: t.JobPrefix,
		Description: t.Description, CreatedAt: t.CreatedAt, CreateIndex: t.CreateIndex}
}

func wireBackupInfo(b node.BackupInfo) wire.BackupInfo {
	return wire.BackupInfo{Format: b.Format, Version: b.Version, Index: b.Index, Term: b.Term,
		Created: b.Created, Size: b.Size, SHA256: b.SHA256, SchemaVersion: b.SchemaVersion}
}

// Requests into commands.

func fsmJobConfig(c wire.JobConfig) fsm.JobConfig {
	return fsm.JobConfig{Retained: c.Retained, AckTimeout: c.AckTimeout, History: c.History}
}

func fsmManifestAck(m *wire.ManifestAck) *fsm.ManifestAck {
	if m == nil {
		return nil
	}
	out := &fsm.ManifestAck{Delta: m.Delta, Full: m.Full}
	if m.Base != nil {
		out.Base = &fsm.BaseRef{Job: m.Base.Job, Task: m.Base.Task, Epoch: m.Base.Epoch}
	}
	out.Blobs = convertAll(m.Blobs, func(b *wire.BlobCommit) fsm.BlobCommit {
		return fsm.BlobCommit{Key: b.Key, Size: b.Size, Checksum: b.Checksum}
	})
	return out
}

// storeHealth converts what the store's Health knows into its answer (nil
// without one).
func (s *Server) storeHealth() *wire.BlobStoreHealth {
	if s.health == nil {
		return nil
	}
	h := s.health.Snapshot()
	out := &wire.BlobStoreHealth{
		Location:            s.store.String(),
		State:               wire.BlobStoreUnknown,
		Calls:               h.Calls,
		Failures:            h.Failures,
		ConsecutiveFailures: h.ConsecutiveFailures,
		LastSuccessOp:       h.LastSuccessOp,
		LastError:           h.LastError,
		LastErrorOp:         h.LastErrorOp,
	}
	if !h.LastSuccess.IsZero() {
		at := h.LastSuccess
		out.LastSuccess = &at
	}
	if !h.LastErrorAt.IsZero() {
		at := h.LastErrorAt
		out.LastErrorAt = &at
	}
	switch {
	case h.ConsecutiveFailures > 0:
		out.State = wire.BlobStoreFailing
	case h.Calls > 0:
		out.State = wire.BlobStoreOK
	}
	return out
}
