package fsm

// The payloads of the hot commands in MessagePack (task-ack from version
// 3, intent-create from 3, blobs-observed from 2): every member decodes
// every ack and every blob's intent and observation, and JSON decoding was
// an eighth of the state machine's apply time. The encoding comes from these
// declarations through records_msgp.go's generator (payloads_msgp.go); the
// command types keep their exported Go form (TaskAck), which the API
// builds, and convert to and from these at Encode and decodePayload.
// Every slice and map keeps nil apart from empty (allownil), because an
// ack's content hash is the JSON of its decoded manifest, and JSON tells
// them apart: an ack retried after an upgrade hashes as it did when the
// older build stored it. Regenerate after changing a type here:
//
//	go generate ./fsm/

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file payloads.go -o payloads_msgp.go -tests=false -io=false -unexported

//msgp:tag json
//msgp:timezone utc

import (
	"fmt"
	"time"

	"github.com/metastore/metastore/manifests"
)

// binaryPayload is a command payload with a MessagePack form (a value or
// a pointer); binaryTarget decodes one.
type (
	binaryPayload interface{ marshalPayload() ([]byte, error) }
	binaryTarget  interface{ unmarshalPayload(raw []byte) error }
)

type ackPayload struct {
	Job        string            `json:"job"`
	Generation uint64            `json:"generation"`
	Epoch      uint64            `json:"epoch"`
	Task       string            `json:"task"`
	Payloads   map[string][]byte `json:"payloads,allownil"`
	Manifest   *manifestPayload  `json:"manifest"`
}

type manifestPayload struct {
	Base  *baseRefPayload      `json:"base"`
	Blobs []blobCommitPayload  `json:"blobs,allownil"`
	Delta *deltaPayload        `json:"delta"`
	Full  *fullManifestPayload `json:"full"`
}

type baseRefPayload struct {
	Job   string `json:"job"`
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
}

type blobCommitPayload struct {
	Key      string `json:"key"`
	Size     uint64 `json:"size"`
	Checksum string `json:"checksum"`
}

type deltaPayload struct {
	Materialize  *materializationPayload `json:"materialize"`
	DropSegments []refPayload            `json:"drop_segments,allownil"`
	AddSegments  []segmentPayload        `json:"add_segments,allownil"`
}

type materializationPayload struct {
	Bases          []basePayload `json:"bases,allownil"`
	TruncateBefore uint64        `json:"truncate_before"`
}

type fullManifestPayload struct {
	Bases    []basePayload    `json:"bases,allownil"`
	Segments []segmentPayload `json:"segments,allownil"`
}

type refPayload struct {
	Key    string `json:"key"`
	Offset uint64 `json:"offset"`
}

type segmentPayload struct {
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	Length   uint64 `json:"length"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	CRC32C   string `json:"crc32c"`
}

type basePayload struct {
	Key    string `json:"key"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	CRC32C string `json:"crc32c"`
}

type observedPayload struct {
	Blobs []observationPayload `json:"blobs,allownil"`
}

type observationPayload struct {
	Key     string `json:"key"`
	Size    uint64 `json:"size"`
	ETag    string `json:"etag"`
	Missing bool   `json:"missing"`
}

type intentPayload struct {
	Job        string    `json:"job"`
	Generation uint64    `json:"generation"`
	Task       string    `json:"task"`
	Keys       []string  `json:"keys,allownil"`
	LeaseUntil time.Time `json:"lease_until"`
	Batch      string    `json:"batch,omitempty"`
	Count      int       `json:"count,omitempty"`
}

// mapSlice converts a slice element by element, keeping nil apart from
// empty. For a field JSON omits when empty (omitempty), the caller passes
// empty as nil (omitEmpty): JSON decoded such a field to nil.
func mapSlice[S ~[]E, E, T any](s S, f func(E) T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, e := range s {
		out[i] = f(e)
	}
	return out
}

func omitEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func (p TaskAck) marshalPayload() ([]byte, error) {
	a := ackPayload{Job: p.Job, Generation: p.Generation, Epoch: p.Epoch, Task: p.Task}
	if len(p.Payloads) > 0 { // omitempty
		a.Payloads = make(map[string][]byte, len(p.Payloads))
		for k, v := range p.Payloads {
			a.Payloads[string(k)] = v
		}
	}
	if m := p.Manifest; m != nil {
		mp := &manifestPayload{Blobs: mapSlice(omitEmpty(m.Blobs), func(b BlobCommit) blobCommitPayload { return blobCommitPayload(b) })}
		if m.Base != nil {
			b := baseRefPayload(*m.Base)
			mp.Base = &b
		}
		if d := m.Delta; d != nil {
			mp.Delta = &deltaPayload{
				DropSegments: mapSlice(omitEmpty(d.DropSegments), func(r manifests.Ref) refPayload { return refPayload(r) }),
				AddSegments:  mapSlice(omitEmpty(d.AddSegments), func(s manifests.Segment) segmentPayload { return segmentPayload(s) }),
			}
			if mt := d.Materialize; mt != nil {
				mp.Delta.Materialize = &materializationPayload{Bases: mapSlice(mt.Bases, func(b manifests.Base) basePayload { return basePayload(b) }), TruncateBefore: mt.TruncateBefore}
			}
		}
		if f := m.Full; f != nil {
			mp.Full = &fullManifestPayload{
				Bases:    mapSlice(f.Bases, func(b manifests.Base) basePayload { return basePayload(b) }),
				Segments: mapSlice(f.Segments, func(s manifests.Segment) segmentPayload { return segmentPayload(s) }),
			}
		}
		a.Manifest = mp
	}
	return a.MarshalMsg(nil)
}

func (p *TaskAck) unmarshalPayload(raw []byte) error {
	var a ackPayload
	if err := unmarshalAll(&a, raw); err != nil {
		return err
	}
	*p = TaskAck{Job: a.Job, Generation: a.Generation, Epoch: a.Epoch, Task: a.Task}
	if a.Payloads != nil {
		p.Payloads = make(map[Kind][]byte, len(a.Payloads))
		for k, v := range a.Payloads {
			if v == nil {
				v = []byte{} // as JSON decodes "" (bbolt stores both alike)
			}
			p.Payloads[Kind(k)] = v
		}
	}
	if mp := a.Manifest; mp != nil {
		m := &ManifestAck{Blobs: mapSlice(mp.Blobs, func(b blobCommitPayload) BlobCommit { return BlobCommit(b) })}
		if mp.Base != nil {
			b := BaseRef(*mp.Base)
			m.Base = &b
		}
		if d := mp.Delta; d != nil {
			m.Delta = &manifests.Delta{
				DropSegments: mapSlice(d.DropSegments, func(r refPayload) manifests.Ref { return manifests.Ref(r) }),
				AddSegments:  mapSlice(d.AddSegments, func(s segmentPayload) manifests.Segment { return manifests.Segment(s) }),
			}
			if mt := d.Materialize; mt != nil {
				m.Delta.Materialize = &manifests.Materialization{Bases: mapSlice(mt.Bases, func(b basePayload) manifests.Base { return manifests.Base(b) }), TruncateBefore: mt.TruncateBefore}
			}
		}
		if f := mp.Full; f != nil {
			m.Full = &manifests.Manifest{
				Bases:    mapSlice(f.Bases, func(b basePayload) manifests.Base { return manifests.Base(b) }),
				Segments: mapSlice(f.Segments, func(s segmentPayload) manifests.Segment { return manifests.Segment(s) }),
			}
		}
		p.Manifest = m
	}
	return nil
}

func (p BlobsObserved) marshalPayload() ([]byte, error) {
	o := observedPayload{Blobs: mapSlice(p.Blobs, func(b BlobObservation) observationPayload { return observationPayload(b) })}
	return o.MarshalMsg(nil)
}

func (p *BlobsObserved) unmarshalPayload(raw []byte) error {
	var o observedPayload
	if err := unmarshalAll(&o, raw); err != nil {
		return err
	}
	*p = BlobsObserved{Blobs: mapSlice(o.Blobs, func(b observationPayload) BlobObservation { return BlobObservation(b) })}
	return nil
}

func (p IntentCreate) marshalPayload() ([]byte, error) {
	i := intentPayload(p)
	return i.MarshalMsg(nil)
}

func (p *IntentCreate) unmarshalPayload(raw []byte) error {
	var i intentPayload
	if err := unmarshalAll(&i, raw); err != nil {
		return err
	}
	*p = IntentCreate(i)
	return nil
}

// unmarshalAll decodes raw into v, which must take all of it.
func unmarshalAll(v interface {
	UnmarshalMsg([]byte) ([]byte, error)
}, raw []byte) error {
	rest, err := v.UnmarshalMsg(raw)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes after the payload", len(rest))
	}
	return nil
}
