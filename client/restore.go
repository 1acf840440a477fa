package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// RestoreOptions choose the checkpoint a task restores from. The zero value
// means the job's latest completed checkpoint of the same task.
type RestoreOptions struct {
	// Epoch names a completed, retained epoch; Pin a savepoint by name (not
	// both).
	Epoch uint64
	Pin   string
	// SourceJob and SourceTask map the restore onto another job's or
	// task's checkpoint (a resume point); empty means the same.
	SourceJob  string
	SourceTask string
}

// Restore is what a task restores: the store's plan (per kind: restored,
// nothing to recover, no prior state), the inline payloads, and the state
// manifest, read with OpenState.
type Restore struct {
	// Plan is the store's answer, as sent.
	Plan *wire.RestorePlan
	// Payloads holds the inline payloads by kind (restored kinds only).
	Payloads map[wire.Kind][]byte
	// grants are the signed read queries of the plan's blobs (auth on).
	grants map[string]string

	c *Client
}

// Restore plans the restore of task: one metastore request, no
// object-store request (OpenState reads the state's blobs).
func (c *Client) Restore(ctx context.Context, job, task string, opts RestoreOptions) (*Restore, error) {
	q := url.Values{}
	if opts.Epoch != 0 {
		q.Set("epoch", strconv.FormatUint(opts.Epoch, 10))
	}
	if opts.Pin != "" {
		q.Set("pin", opts.Pin)
	}
	if opts.SourceJob != "" {
		q.Set("source_job", opts.SourceJob)
	}
	if opts.SourceTask != "" {
		q.Set("source_task", opts.SourceTask)
	}
	var ans struct {
		wire.RestorePlan
		// ObjectGrants admit the reads of the plan's blobs (auth on).
		ObjectGrants map[string]string `json:"object_grants"`
	}
	if err := c.get(ctx, jobPath(job)+"/tasks/"+url.PathEscape(task)+"/restore", q, &ans); err != nil {
		return nil, err
	}
	plan := ans.RestorePlan
	r := &Restore{Plan: &plan, Payloads: map[wire.Kind][]byte{}, grants: ans.ObjectGrants, c: c}
	for k, kr := range plan.Kinds {
		if kr.Status == wire.RestoreRestored && kr.Payload != nil {
			r.Payloads[k] = kr.Payload
		}
	}
	return r, nil
}

// Status is the plan's answer for a kind: wire.RestoreRestored,
// wire.RestoreNothing or wire.RestoreNoPriorState.
func (r *Restore) Status(k wire.Kind) string {
	if kr, ok := r.Plan.Kinds[k]; ok {
		return kr.Status
	}
	return wire.RestoreNoPriorState
}

// Payload is the inline payload restored for a kind, nil if none.
func (r *Restore) Payload(k wire.Kind) []byte { return r.Payloads[k] }

// StateManifest is the restored state manifest, nil when the checkpoint
// holds none for the task.
func (r *Restore) StateManifest() *manifests.Manifest {
	kr, ok := r.Plan.Kinds[wire.KindState]
	if !ok || kr.Status != wire.RestoreRestored {
		return nil
	}
	return kr.Manifest
}

// Base names the checkpoint restored from, for the first ack of the new
// attempt (TaskState does this); nil when there is no state manifest to
// continue from.
func (r *Restore) Base() *wire.BaseRef {
	if r.StateManifest() == nil || r.Plan.Source.Epoch == 0 {
		return nil
	}
	return &wire.BaseRef{Job: r.Plan.Source.Job, Task: r.Plan.Source.Task, Epoch: r.Plan.Source.Epoch}
}

// Ranges lists the byte ranges OpenState reads, in its order: the bases as
// the manifest lists them, then the segments as the plan lists them, which
// is sequence order (the store sorts them so; see the restore operation in
// docs/openapi.json).
func (r *Restore) Ranges() []manifests.Segment {
	m := r.StateManifest()
	if m == nil {
		return nil
	}
	out := make([]manifests.Segment, 0, len(m.Bases)+len(m.Segments))
	for _, b := range m.Bases {
		out = append(out, manifests.Segment{Key: b.Key, Offset: b.Offset, Length: b.Length, CRC32C: b.CRC32C})
	}
	return append(out, m.Segments...)
}

// OpenState returns a reader over the task's restored state: the bytes of
// the manifest's bases, then of its segments in sequence order. Each range
// is read lazily, with one ranged GET when the reader reaches it (and
// another for the rest of a range whose read broke off). A range that
// declares a CRC32C is read whole and verified before any of its bytes is
// returned, as ReadRange does: a mismatch is read again, then fails the
// read with a *ChecksumError (ErrChecksum).
//
// It makes no request at all when there is nothing to read, and then
// returns an error matching ErrNothingToRecover (the task had no state
// capability in the checkpoint) or ErrNoPriorState (the checkpoint does not
// know the task, or there is no checkpoint). A task that had state but
// acknowledged no manifest (its state was inline, see Payload) gets an
// empty reader.
func (r *Restore) OpenState(ctx context.Context) (io.ReadCloser, error) {
	switch r.Status(wire.KindState) {
	case wire.RestoreNothing:
		return nil, fmt.Errorf("client: state of task %q: %w", r.Plan.Task, ErrNothingToRecover)
	case wire.RestoreRestored:
	default:
		return nil, fmt.Errorf("client: state of task %q: %w", r.Plan.Task, ErrNoPriorState)
	}
	return &stateReader{ctx: ctx, c: r.c, ranges: r.Ranges(), grants: r.grants}, nil
}

// stateReader reads ranges one after the other.
type stateReader struct {
	ctx    context.Context
	c      *Client
	ranges []manifests.Segment
	grants map[string]string
	cur    io.ReadCloser
	left   uint64 // bytes of ranges[0] still to read
	opened bool   // ranges[0] was opened at least once
	breaks int    // reopenings of ranges[0]
	closed bool
}

func (s *stateReader) Read(p []byte) (int, error) {
	for {
		if s.closed {
			return 0, errors.New("client: read of a closed state reader")
		}
		if len(s.ranges) == 0 {
			return 0, io.EOF
		}
		rg := s.ranges[0]
		if !s.opened {
			if rg.CRC32C != "" {
				b, err := s.c.readRange(s.ctx, rg, s.grants[rg.Key])
				if err != nil {
					return 0, err
				}
				s.cur = io.NopCloser(bytes.NewReader(b))
			}
			s.opened, s.left, s.breaks = true, rg.Length, 0
		}
		if s.left == 0 {
			s.next()
			continue
		}
		if s.cur == nil {
			off := rg.Offset + (rg.Length - s.left)
			rc, err := s.c.readBlob(s.ctx, rg.Key, int64(off), int64(s.left), s.grants[rg.Key])
			if err != nil {
				return 0, fmt.Errorf("client: reading %s@%d: %w", rg.Key, off, err)
			}
			s.cur = rc
		}
		if len(p) == 0 {
			return 0, nil
		}
		if uint64(len(p)) > s.left {
			p = p[:s.left]
		}
		n, err := s.cur.Read(p)
		s.left -= uint64(n)
		switch {
		case err == nil || (errors.Is(err, io.EOF) && s.left == 0):
			if n > 0 {
				return n, nil
			}
			if err == nil {
				continue
			}
		case errors.Is(err, io.EOF):
			s.cur.Close()
			s.cur = nil
			return n, fmt.Errorf("client: %s@%d: the blob ended %d bytes before the range: %w", rg.Key, rg.Offset, s.left, io.ErrUnexpectedEOF)
		default:
			// The body broke off: read the rest of the range again.
			s.cur.Close()
			s.cur = nil
			s.breaks++
			if s.ctx.Err() != nil || s.breaks >= s.c.cfg.MaxAttempts {
				return n, fmt.Errorf("client: reading %s@%d: %w", rg.Key, rg.Offset, err)
			}
			if n > 0 {
				return n, nil
			}
		}
	}
}

func (s *stateReader) next() {
	if s.cur != nil {
		s.cur.Close()
		s.cur = nil
	}
	s.ranges = s.ranges[1:]
	s.opened = false
}

func (s *stateReader) Close() error {
	if s.cur != nil {
		s.cur.Close()
		s.cur = nil
	}
	s.closed = true
	return nil
}
