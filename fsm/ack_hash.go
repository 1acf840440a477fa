package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// An ack's content hash (TaskAck.contentHash) tells a retried ack from a
// different one for the same task and epoch. It is stored in the ack's
// record and compared when the ack comes again, possibly to a member of a
// later build: its value is part of the format. It digests each inline
// payload, kinds in order, then the JSON of the manifest as
// encoding/json writes it. The JSON is written here, field by field
// (appendManifestJSON), because json.Marshal's reflection was a twentieth
// of a follower's CPU at 64 acking workers; TestManifestJSONMatchesMarshal
// compares the two on random manifests with every field set, so a field
// added to a manifest type without being written here fails it.

// hashBufs holds the buffers contentHash writes the manifest's JSON into.
var hashBufs = sync.Pool{New: func() any { return new([]byte) }}

// contentHash identifies the ack's content, so a retried ack is recognised
// and a different ack for the same slot is a conflict.
func (p *TaskAck) contentHash() string {
	h := sha256.New()
	// hdr is the "name:length:" that precedes each part digested.
	var hdr []byte
	part := func(name string, v []byte) {
		hdr = append(strconv.AppendInt(append(append(hdr[:0], name...), ':'), int64(len(v)), 10), ':')
		h.Write(hdr)
		h.Write(v)
	}
	for _, k := range sortedKinds(p.Payloads) {
		part(string(k), p.Payloads[k])
	}
	if p.Manifest != nil {
		buf := hashBufs.Get().(*[]byte)
		*buf = appendManifestJSON((*buf)[:0], p.Manifest)
		part("manifest", *buf)
		hashBufs.Put(buf)
	}
	return hexSum(h)
}

// hexSum is h's SHA-256 in lower-case hex: two allocations (the sum,
// which escapes through the interface, and the string) where
// hex.EncodeToString(h.Sum(nil)) made three.
func hexSum(h hash.Hash) string {
	var sum [sha256.Size]byte
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], h.Sum(sum[:0]))
	return string(digits[:])
}

// appendManifestJSON appends m as json.Marshal writes it: fields in
// declaration order, omitempty fields left out when empty, nil slices
// without omitempty as null.
func appendManifestJSON(b []byte, m *ManifestAck) []byte {
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(append(append(b, '"'), name...), `":`...)
	}
	if m.Base != nil {
		field("base")
		b = append(b, `{"job":`...)
		b = wire.AppendJSONString(b, m.Base.Job)
		b = append(b, `,"task":`...)
		b = wire.AppendJSONString(b, m.Base.Task)
		b = append(b, `,"epoch":`...)
		b = strconv.AppendUint(b, m.Base.Epoch, 10)
		b = append(b, '}')
	}
	if len(m.Blobs) > 0 {
		field("blobs")
		b = append(b, '[')
		for i, c := range m.Blobs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = wire.AppendJSONString(b, c.Key)
			b = append(b, `,"size":`...)
			b = strconv.AppendUint(b, c.Size, 10)
			if c.Checksum != "" {
				b = append(b, `,"checksum":`...)
				b = wire.AppendJSONString(b, c.Checksum)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if d := m.Delta; d != nil {
		field("delta")
		b = append(b, '{')
		inner := true
		sep := func() {
			if !inner {
				b = append(b, ',')
			}
			inner = false
		}
		if d.Materialize != nil {
			sep()
			b = append(b, `"materialize":{"bases":`...)
			b = appendBasesJSON(b, d.Materialize.Bases)
			b = append(b, `,"truncate_before":`...)
			b = strconv.AppendUint(b, d.Materialize.TruncateBefore, 10)
			b = append(b, '}')
		}
		if len(d.DropSegments) > 0 {
			sep()
			b = append(b, `"drop_segments":[`...)
			for i, r := range d.DropSegments {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"key":`...)
				b = wire.AppendJSONString(b, r.Key)
				b = append(b, `,"offset":`...)
				b = strconv.AppendUint(b, r.Offset, 10)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		if len(d.AddSegments) > 0 {
			sep()
			b = append(b, `"add_segments":`...)
			b = appendSegmentsJSON(b, d.AddSegments)
		}
		b = append(b, '}')
	}
	if m.Full != nil {
		field("full")
		b = append(b, `{"bases":`...)
		b = appendBasesJSON(b, m.Full.Bases)
		b = append(b, `,"segments":`...)
		b = appendSegmentsJSON(b, m.Full.Segments)
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendBasesJSON(b []byte, bases []manifests.Base) []byte {
	if bases == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, x := range bases {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = wire.AppendJSONString(b, x.Key)
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, x.Offset, 10)
		b = append(b, `,"length":`...)
		b = strconv.AppendUint(b, x.Length, 10)
		if x.CRC32C != "" {
			b = append(b, `,"crc32c":`...)
			b = wire.AppendJSONString(b, x.CRC32C)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendSegmentsJSON(b []byte, segs []manifests.Segment) []byte {
	if segs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range segs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = wire.AppendJSONString(b, s.Key)
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, s.Offset, 10)
		b = append(b, `,"length":`...)
		b = strconv.AppendUint(b, s.Length, 10)
		b = append(b, `,"first_seq":`...)
		b = strconv.AppendUint(b, s.FirstSeq, 10)
		b = append(b, `,"last_seq":`...)
		b = strconv.AppendUint(b, s.LastSeq, 10)
		if s.CRC32C != "" {
			b = append(b, `,"crc32c":`...)
			b = wire.AppendJSONString(b, s.CRC32C)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
