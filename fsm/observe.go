package fsm

import (
	"errors"
	"maps"

	"github.com/metastore/metastore/wire"
)

// Blob observations. An ack commits a blob with the size the worker
// declares, without asking the object store (that would put a round trip
// on every ack's path). Right after, the leader reads what the object store
// holds (a HEAD per new blob, gc.Collector.Observe) and proposes it here:
// the size and ETag are kept in the blob's record, and a size that differs
// from the declared one, or an object that is missing, flags the blob. The
// ETag is what `verify` later compares against, so a blob rewritten after
// its ack (a replayed upload URL) is reported even at the same size.

// BlobObservation is one entry of a blobs-observed command.
type BlobObservation struct {
	Key     string `json:"key"`
	Size    uint64 `json:"size"`
	ETag    string `json:"etag,omitempty"`
	Missing bool   `json:"missing,omitempty"`
}

// BlobsObserved is the payload of CmdBlobsObserved.
type BlobsObserved struct {
	Blobs []BlobObservation `json:"blobs"`
}

// ObservedResult is the answer to blobs-observed: the keys recorded, and
// those of them flagged (size differs from the declared one, or missing).
type ObservedResult struct {
	Observed []string `json:"observed"`
	Flagged  []string `json:"flagged"`
	// Declared is the size each flagged blob's ack declared, in the order
	// of Flagged.
	Declared []uint64 `json:"declared"`
}

// Validate checks the payload on its own.
func (p *BlobsObserved) Validate() error {
	if len(p.Blobs) == 0 || len(p.Blobs) > wire.MaxIntents {
		return ruleErr(wire.CodeInvalid, "blobs", "between 1 and %d blobs per observation", wire.MaxIntents)
	}
	for _, b := range p.Blobs {
		if err := wire.CheckText("blobs.etag", b.ETag); err != nil {
			return err
		}
	}
	return nil
}

// applyBlobsObserved records observations of live blobs still waiting for
// one (AwaitingObservation); a blob observed already, or no longer live,
// is left alone (a repeated or late proposal changes nothing).
func applyBlobsObserved(t *txn, c Command, p *BlobsObserved) (any, error) {
	out := &ObservedResult{Observed: []string{}, Flagged: []string{}, Declared: []uint64{}}
	for _, o := range p.Blobs {
		b, err := t.blob(o.Key)
		if err != nil {
			return nil, err
		}
		if b == nil || !b.AwaitingObservation {
			continue // observed already, or no longer live
		}
		b.AwaitingObservation = false
		b.Observed = &observation{Size: o.Size, ETag: o.ETag, Missing: o.Missing, At: c.Time}
		b.Flagged = o.Missing || o.Size != b.Size
		if err := t.putBlob(b); err != nil {
			return nil, err
		}
		out.Observed = append(out.Observed, o.Key)
		if b.Flagged {
			out.Flagged = append(out.Flagged, o.Key)
			out.Declared = append(out.Declared, b.Size)
		}
	}
	return out, nil
}

// UnobservedCount is the number of blobs waiting for the leader to look
// at their objects (Unobserved lists them), as of the file's last
// commit: it costs a lookup of the index in memory (unobserved.go).
func (f *FSM) UnobservedCount() (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return 0, errors.New("fsm: closed")
	}
	return f.unobserved.committed(), nil
}

// Unobserved lists up to max live blobs the leader has not observed yet,
// in key order, as of the latest applied entry: from the index in memory
// (unobserved.go) and a copy of the changes of the open transaction. The
// apply waits only for the copy. Should the transaction commit before
// the index is read, its changes are counted twice, which changes
// nothing.
func (f *FSM) Unobserved(max int) ([]string, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, errors.New("fsm: closed")
	}
	var open map[string]bool
	f.txMu.Lock()
	if f.wt != nil {
		open = maps.Clone(f.wt.awaiting)
	}
	f.txMu.Unlock()
	return f.unobserved.list(max, open), nil
}

// flaggedIn lists the flagged blobs among keys, in the order given.
func flaggedIn(t *txn, keys []string) ([]wire.FlaggedBlob, error) {
	var out []wire.FlaggedBlob
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		raw := t.get(bucketBlobs, []byte(k))
		if raw == nil {
			continue
		}
		b, err := decodeBlob([]byte(k), raw)
		if err != nil {
			return nil, err
		}
		if b.Flagged {
			out = append(out, wire.FlaggedBlob{Key: k, Declared: b.Size, Observed: wireObservation(b.Observed)})
		}
	}
	return out, nil
}
