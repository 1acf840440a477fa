package api

import (
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// The state machine answers with the types of package wire (its records
// are private to it, fsm/views.go); the functions here convert what else
// the API shows (a backup's description, the object store's health) and
// turn request bodies into command payloads.

// answer returns the value of a state-machine call (a query or an applied
// command) with its index, or the error without a value.
func answer[T any](v T, idx uint64, err error) (any, uint64, error) {
	if err != nil {
		return nil, idx, err
	}
	return v, idx, nil
}

func wireBackupInfo(b node.BackupInfo) wire.BackupInfo {
	return wire.BackupInfo{Format: b.Format, Version: b.Version, Index: b.Index, Term: b.Term,
		Created: b.Created, Size: b.Size, SHA256: b.SHA256, SchemaVersion: b.SchemaVersion}
}

// Requests into commands.

func fsmManifestAck(m *wire.ManifestAck) *fsm.ManifestAck {
	if m == nil {
		return nil
	}
	out := &fsm.ManifestAck{Delta: m.Delta, Full: m.Full}
	if m.Base != nil {
		out.Base = &fsm.BaseRef{Job: m.Base.Job, Task: m.Base.Task, Epoch: m.Base.Epoch}
	}
	if m.Blobs != nil {
		out.Blobs = make([]fsm.BlobCommit, len(m.Blobs))
		for i, b := range m.Blobs {
			out.Blobs[i] = fsm.BlobCommit{Key: b.Key, Size: b.Size, Checksum: b.Checksum}
		}
	}
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
