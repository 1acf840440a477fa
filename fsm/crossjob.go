package fsm

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Cross-job references. A job reads another job's state only through a
// savepoint: a pinned, completed epoch of the other job (pinning is an
// operator's act, which publishes that checkpoint for forks). So:
//
//   - an ack's base names a checkpoint of its own job (any completed,
//     retained epoch) or a pinned epoch of another job;
//   - a manifest adds references to blobs its own job uploaded, or to
//     blobs of another job that the manifest it extends already holds
//     (inherited from the savepoint it forked from);
//   - a restore maps onto another job only from a pinned epoch (?pin=NAME,
//     or ?epoch=N of a pinned epoch).
//
// Every refusal of a reference to another job is one answer, built only
// from what the request named, whether or not that job, epoch, task or
// blob exists: a worker learns nothing about jobs it may not read.

// errForeignBase is the answer to a base in another job that is not a
// savepoint of it.
func errForeignBase(job string, base *BaseRef) *wire.RuleError {
	return ruleErr(wire.CodeNotFound, "manifest.base",
		"job %q has no savepoint at epoch %d with a manifest of task %q that job %q may fork from; another job's checkpoint is a base only when it is pinned (a savepoint)",
		base.Job, base.Epoch, base.Task, job)
}

// errForeignBlob is the answer to a reference to a blob this job may not
// reference.
func errForeignBlob(job, key string) *wire.RuleError {
	return ruleErr(wire.CodeNotFound, "manifest",
		"blob %q is not known to job %q: a manifest references blobs its own job uploaded, and another job's blobs only as the savepoint it forked from holds them",
		key, job)
}

// errForeignSource is the answer to a restore from another job that does
// not name a savepoint of it.
func errForeignSource(req RestoreRequest, srcJob string) *wire.RuleError {
	what := "(none named)"
	switch {
	case req.Pin != "":
		what = fmt.Sprintf("named %q", req.Pin)
	case req.Epoch != 0:
		what = fmt.Sprintf("at epoch %d", req.Epoch)
	}
	return ruleErr(wire.CodeNotFound, "source_job",
		"job %q has no savepoint %s that job %q may restore from; another job's checkpoint is restored only from a savepoint: ?pin=NAME, or ?epoch=N of a pinned epoch",
		srcJob, what, req.Job)
}

// checkForeignBase checks that base, in a job other than job, is a pinned
// completed epoch holding a manifest of the named task.
func checkForeignBase(t *txn, job string, base *BaseRef) error {
	e, err := t.epoch(base.Job, base.Epoch)
	if err != nil {
		return err
	}
	if e == nil || e.State != epochCompleted || !e.Pinned {
		return errForeignBase(job, base)
	}
	a, err := t.ack(base.Job, base.Epoch, base.Task)
	if err != nil {
		return err
	}
	if a == nil || a.Lineage == 0 {
		return errForeignBase(job, base)
	}
	return nil
}

// foreignKey reports whether a blob key lies outside job's part of the
// store: a key whose first segment is another job, or a blob another job
// uploaded.
func foreignKey(t *txn, job, key string) (bool, error) {
	read := t.blob // in a command: read once, for the commit after (blobCache)
	if t.blobs == nil {
		// A read outside commands (the API's early check) skips the upload
		// batches: an unused key of a batch has no record, and its first
		// segment is its job, like every key the store hands out.
		read = t.storedBlob
	}
	b, err := read(key)
	if err != nil {
		return false, err
	}
	if b != nil {
		return b.Job != job, nil
	}
	first, _, _ := strings.Cut(key, "/")
	return first != job, nil
}

// inherited reports whether the manifest of view holds a reference to key.
func inherited(t *txn, view lineageView, key string) (bool, error) {
	if view.lid == 0 {
		return false, nil
	}
	for _, kind := range []byte{kindBase, kindSegment} {
		prefix := append(append(u64(view.lid), kind), append([]byte(key), 0)...)
		found := false
		err := t.scan(bucketRecords, prefix, func(k, v []byte) (bool, error) {
			if !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
				return true, nil
			}
			var r record
			if err := decodeRecord(v, &r); err != nil {
				return false, err
			}
			if view.present(&r) {
				found = true
				return false, nil
			}
			return true, nil
		})
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// checkForeignBlobs refuses a manifest change that adds a reference to, or
// commits, a blob outside the job's part of the store that the manifest it
// extends does not already hold.
//
// view gives the manifest the change extends; it is only asked for when a
// key is foreign, which most acks have none of.
func checkForeignBlobs(t *txn, job string, view func() (lineageView, error), c manifests.Change, commits []BlobCommit) error {
	seen := map[string]bool{}
	check := func(key string) error {
		if seen[key] {
			return nil
		}
		seen[key] = true
		foreign, err := foreignKey(t, job, key)
		if err != nil || !foreign {
			return err
		}
		v, err := view()
		if err != nil {
			return err
		}
		ok, err := inherited(t, v, key)
		if err != nil {
			return err
		}
		if !ok {
			return errForeignBlob(job, key)
		}
		return nil
	}
	for _, bc := range commits {
		if err := check(bc.Key); err != nil {
			return err
		}
	}
	for _, b := range c.AddBases {
		if err := check(b.Key); err != nil {
			return err
		}
	}
	for _, s := range c.AddSegments {
		if err := check(s.Key); err != nil {
			return err
		}
	}
	return nil
}

// CheckCrossJob checks an ack's references to other jobs against the
// current state, as the state machine will when it applies the ack: the
// API's early answer, identical to the one apply gives. Every other rule is
// left to apply.
//
// It reads the last committed state (viewCommitted: no commit on the ack's
// path); a refusal is confirmed on the latest applied state before it is
// answered, so a reference made valid by an entry not yet committed (a pin
// just applied) is not refused early.
//
// An ack that names only its own job (no base in another job, every blob
// key under the job's prefix: what every ack of a worker that does not
// fork names) is passed without a read. A blob under a job's prefix is
// that job's: the leader makes every upload key under the prefix of the
// job it is for (upload_batches.go, upload_slots.go, api/blobs.go), and
// apply reads each record anyway (foreignKey), so the early check's read
// of them, a read transaction and a seek per key on every ack, answered
// nothing apply does not.
func (f *FSM) CheckCrossJob(p *TaskAck) error {
	if p.Manifest == nil || ownKeysOnly(p) {
		return nil
	}
	if err := f.checkCrossJob(f.viewCommitted, p); err == nil {
		return nil
	}
	return f.checkCrossJob(f.view, p)
}

// ownKeysOnly reports whether an ack's manifest names no base in another
// job and no blob key outside its job's prefix.
func ownKeysOnly(p *TaskAck) bool {
	m := p.Manifest
	if m.Base != nil && m.Base.Job != p.Job {
		return false
	}
	prefix := p.Job + "/"
	for _, b := range m.Blobs {
		if !strings.HasPrefix(b.Key, prefix) {
			return false
		}
	}
	c := addedRefs(m)
	for _, b := range c.AddBases {
		if !strings.HasPrefix(b.Key, prefix) {
			return false
		}
	}
	for _, s := range c.AddSegments {
		if !strings.HasPrefix(s.Key, prefix) {
			return false
		}
	}
	return true
}

// addedRefs is what an ack's manifest adds: its delta's segments and
// materialized bases, or its full manifest.
func addedRefs(m *ManifestAck) manifests.Change {
	var c manifests.Change
	if d := m.Delta; d != nil {
		c.AddSegments = d.AddSegments
		if d.Materialize != nil {
			c.AddBases = d.Materialize.Bases
		}
	}
	if full := m.Full; full != nil {
		c.AddBases, c.AddSegments = full.Bases, full.Segments
	}
	return c
}

func (f *FSM) checkCrossJob(view func(func(t *txn) error) (uint64, error), p *TaskAck) error {
	m := p.Manifest
	_, err := view(func(t *txn) error {
		if m.Base != nil && m.Base.Job != p.Job {
			if err := checkForeignBase(t, p.Job, m.Base); err != nil {
				return err
			}
		}
		// The manifest the ack extends, read only for a foreign key.
		extends := func() (lineageView, error) {
			view := lineageView{t: t}
			if m.Base != nil {
				if a, err := t.ack(m.Base.Job, m.Base.Epoch, m.Base.Task); err != nil {
					return view, err
				} else if a != nil {
					view.lid, view.at = a.Lineage, m.Base.Epoch
				}
			} else if hid, err := t.head(p.Job, p.Task); err != nil {
				return view, err
			} else if l, err := t.lineage(hid); err != nil {
				return view, err
			} else if l != nil && l.Generation == p.Generation {
				view.lid = l.ID
			}
			return view, nil
		}
		return checkForeignBlobs(t, p.Job, extends, addedRefs(m), m.Blobs)
	})
	return err
}
