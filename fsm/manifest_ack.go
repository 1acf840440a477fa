package fsm

import (
	"errors"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// The manifest part of a state ack, as the worker sends it, and its checks
// of form (before the state is consulted).

// ManifestAck is the manifest part of a state ack.
type ManifestAck struct {
	// Base names the checkpoint the task restored from, on the first ack of
	// an attempt; absent there, the task starts from an empty manifest.
	// Later acks of the attempt extend the previous ack and omit it.
	Base *BaseRef `json:"base,omitempty"`
	// Blobs commits uploads (held by intents) that this ack references.
	Blobs []BlobCommit `json:"blobs,omitempty"`
	// Delta is the change from the previous manifest (tasks with the
	// incremental flag); Full the whole manifest (tasks without it).
	Delta *manifests.Delta    `json:"delta,omitempty"`
	Full  *manifests.Manifest `json:"full,omitempty"`
}

// BaseRef names the checkpoint a task restored from.
type BaseRef struct {
	Job   string `json:"job"`
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
}

// BlobCommit turns an upload intent into a live blob.
type BlobCommit struct {
	Key      string `json:"key"`
	Size     uint64 `json:"size"`
	Checksum string `json:"checksum,omitempty"`
}

// Validate checks the manifest part on its own.
func (m *ManifestAck) Validate() error {
	if m.Delta != nil && m.Full != nil {
		return ruleErr(wire.CodeInvalid, "manifest", "send a delta or a full manifest, not both")
	}
	if m.Base != nil {
		if err := wire.CheckID("manifest.base.job", m.Base.Job); err != nil {
			return err
		}
		if err := wire.CheckID("manifest.base.task", m.Base.Task); err != nil {
			return err
		}
		if m.Base.Epoch == 0 {
			return ruleErr(wire.CodeInvalid, "manifest.base.epoch", "must be a positive integer")
		}
	}
	if len(m.Blobs) > wire.MaxIntents {
		return ruleErr(wire.CodeInvalid, "manifest.blobs", "at most %d blobs per ack", wire.MaxIntents)
	}
	seen := map[string]bool{}
	for _, b := range m.Blobs {
		if err := manifests.ValidateKey(b.Key); err != nil {
			return manifestErr("manifest.blobs", err)
		}
		if seen[b.Key] {
			return ruleErr(wire.CodeInvalid, "manifest.blobs", "blob %q committed twice", b.Key)
		}
		seen[b.Key] = true
		if err := wire.CheckText("manifest.blobs.checksum", b.Checksum); err != nil {
			return err
		}
	}
	if err := m.checkCRCs(); err != nil {
		return err
	}
	if err := m.delta().Validate(); err != nil {
		field := "manifest.delta"
		if m.Full != nil {
			field = "manifest.full"
		}
		return manifestErr(field, err)
	}
	return nil
}

// checkCRCs checks the shape of every declared CRC32C (8 lowercase hex
// digits, or absent), naming the field; the bytes are the client's to
// verify when it reads them back.
func (m *ManifestAck) checkCRCs() error {
	check := func(field string, ref manifests.Ref, v string) error {
		if manifests.ValidCRC32C(v) {
			return nil
		}
		return ruleErr(wire.CodeInvalid, field, "%s: a crc32c is 8 lowercase hex digits (CRC32C, Castagnoli, of the range's bytes), not %q", ref, v)
	}
	if d := m.Delta; d != nil {
		if d.Materialize != nil {
			for _, b := range d.Materialize.Bases {
				if err := check("manifest.delta.materialize.bases.crc32c", b.ID(), b.CRC32C); err != nil {
					return err
				}
			}
		}
		for _, s := range d.AddSegments {
			if err := check("manifest.delta.add_segments.crc32c", s.ID(), s.CRC32C); err != nil {
				return err
			}
		}
	}
	if f := m.Full; f != nil {
		for _, b := range f.Bases {
			if err := check("manifest.full.bases.crc32c", b.ID(), b.CRC32C); err != nil {
				return err
			}
		}
		for _, s := range f.Segments {
			if err := check("manifest.full.segments.crc32c", s.ID(), s.CRC32C); err != nil {
				return err
			}
		}
	}
	return nil
}

// delta is the delta the ack carries against an empty manifest when Full
// is set; see applyManifest for the diff against the current one.
func (m *ManifestAck) delta() manifests.Delta {
	switch {
	case m.Delta != nil:
		return *m.Delta
	case m.Full != nil:
		return manifests.Full(*m.Full)
	}
	return manifests.Delta{}
}

// manifestErr turns a manifests rule violation into a wire.RuleError naming the
// reference.
func manifestErr(field string, err error) error {
	var me *manifests.Error
	if !errors.As(err, &me) {
		return err
	}
	code := wire.CodeManifestMismatch
	if me.Code == manifests.CodeInvalid || me.Code == manifests.CodeDuplicate || me.Code == manifests.CodeOutOfRange {
		code = wire.CodeInvalid
	}
	msg := me.Message
	if me.Ref != "" {
		msg = me.Ref + ": " + msg
	}
	return &wire.RuleError{Code: code, Field: field, Message: msg}
}
