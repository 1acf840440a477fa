package fsm

import (
	"slices"
	"time"
)

// Copies of the records of deferredBuckets, which the write transaction
// keeps decoded (txn.objs): each read takes a copy of the transaction's
// record instead of decoding its bytes again, and each put leaves a copy
// that is encoded once, when the bucket is written to the file (flush).
// A copy shares no memory with its original, so a caller may change a
// record it read, or one it put, without changing the transaction's; and
// it reads as the stored bytes would decode: times as records_msgp.go
// decodes them (UTC, no monotonic reading), nil and empty slices kept
// apart as the codec keeps them. TestRecordCopiesReadAsStored holds the
// copies to decodeRecord(encodeRecord(r)).

// storedTime is t as the record codec reads it back.
func storedTime(t time.Time) time.Time { return time.Unix(t.Unix(), int64(t.Nanosecond())).UTC() }

func storedTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	s := storedTime(*t)
	return &s
}

func (j *jobRecord) copyStored() *jobRecord {
	c := *j
	c.Pending = slices.Clone(j.Pending)
	c.Retained = slices.Clone(j.Retained)
	c.Ended = slices.Clone(j.Ended)
	c.CreatedAt = storedTime(j.CreatedAt)
	c.UpdatedAt = storedTime(j.UpdatedAt)
	return &c
}

func (e *epochRecord) copyStored() *epochRecord {
	c := *e
	c.BeganAt = storedTime(e.BeganAt)
	c.Deadline = storedTime(e.Deadline)
	c.CompletedAt = storedTimePtr(e.CompletedAt)
	c.EndedAt = storedTimePtr(e.EndedAt)
	return &c
}

func (l *lineageRecord) copyStored() *lineageRecord {
	c := *l
	c.Epochs = slices.Clone(l.Epochs)
	return &c
}

// copyOfRecord returns a copy of v, a record of a deferred bucket, as
// the transaction keeps it; false for a type it does not keep decoded.
func copyOfRecord(v any) (msgRecord, bool) {
	switch r := v.(type) {
	case *jobRecord:
		return r.copyStored(), true
	case *epochRecord:
		return r.copyStored(), true
	case *lineageRecord:
		return r.copyStored(), true
	}
	return nil, false
}

// readRecord sets dst, a pointer to a record, to a copy of the
// transaction's src of the same type; false if the types differ.
func readRecord(dst any, src msgRecord) bool {
	switch d := dst.(type) {
	case *jobRecord:
		return readInto(d, src)
	case *epochRecord:
		return readInto(d, src)
	case *lineageRecord:
		return readInto(d, src)
	}
	return false
}

// readInto sets *d to a copy of src when src is a record of d's type.
func readInto[T any, P interface {
	*T
	copyStored() *T
}](d P, src msgRecord) bool {
	s, ok := src.(P)
	if ok {
		*d = *s.copyStored()
	}
	return ok
}
