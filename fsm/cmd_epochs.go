package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/metastore/metastore/wire"
)

// EpochBegin opens an epoch.
type EpochBegin struct {
	Job        string `json:"job"`
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
}

// Validate checks a begin at the current version: the epoch is between 1
// and wire.MaxEpoch.
func (p *EpochBegin) Validate() error {
	if err := p.validateV1(); err != nil {
		return err
	}
	return checkEpochBound(p.Epoch)
}

// checkEpochBound refuses an epoch number above wire.MaxEpoch.
func checkEpochBound(epoch uint64) error {
	if epoch > wire.MaxEpoch {
		return ruleErr(wire.CodeInvalid, "epoch", "%d is above the largest epoch, %d (2^63-1)", epoch, uint64(wire.MaxEpoch))
	}
	return nil
}

// checkAt checks a begin of version v as that version did.
func (p *EpochBegin) checkAt(v uint8) error {
	if v < 2 {
		return p.validateV1()
	}
	return p.Validate()
}

// validateV1 is the check of version 1 entries: any positive epoch.
func (p *EpochBegin) validateV1() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if p.Generation == 0 {
		return ruleErr(wire.CodeInvalid, "generation", "required (the generation of the current attempt)")
	}
	if p.Epoch == 0 {
		return ruleErr(wire.CodeInvalid, "epoch", "must be a positive integer")
	}
	return nil
}

// TaskAck is one task's acknowledgement of an epoch, with its inline
// payloads by kind.
type TaskAck struct {
	Job        string          `json:"job"`
	Generation uint64          `json:"generation"`
	Epoch      uint64          `json:"epoch"`
	Task       string          `json:"task"`
	Payloads   map[Kind][]byte `json:"payloads,omitempty"`
	// Manifest is the task's state manifest (blobs in the object store),
	// as a delta or whole.
	Manifest *ManifestAck `json:"manifest,omitempty"`
}

func (p *TaskAck) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if err := wire.CheckID("task", p.Task); err != nil {
		return err
	}
	if p.Generation == 0 {
		return ruleErr(wire.CodeInvalid, "generation", "required (the generation of the current attempt)")
	}
	if p.Epoch == 0 {
		return ruleErr(wire.CodeInvalid, "epoch", "must be a positive integer")
	}
	for k, v := range p.Payloads {
		if !slices.Contains(wire.Kinds, k) {
			return ruleErr(wire.CodeInvalid, "payloads", "unknown kind %q (want input, state or output)", k)
		}
		if len(v) > wire.MaxInlinePayload {
			return ruleErr(wire.CodePayloadTooLarge, "payloads."+string(k), "%d bytes is above the inline limit of %d; store larger state in the object store", len(v), wire.MaxInlinePayload)
		}
	}
	if p.Manifest != nil {
		return p.Manifest.Validate()
	}
	return nil
}

// ackResult is the answer to an ack: the epoch after it, and whether this
// ack completed it (wire.AckResult shows it).
type ackResult struct {
	Ack       *ackRecord   `json:"ack"`
	Epoch     *epochRecord `json:"epoch"`
	Completed bool         `json:"completed_by_this_ack"`
}

// EpochAbort aborts a pending epoch.
type EpochAbort struct {
	Job        string `json:"job"`
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
	Reason     string `json:"reason,omitempty"`
}

func (p *EpochAbort) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if p.Generation == 0 {
		return ruleErr(wire.CodeInvalid, "generation", "required (the generation of the current attempt)")
	}
	if p.Epoch == 0 {
		return ruleErr(wire.CodeInvalid, "epoch", "must be a positive integer")
	}
	return wire.CheckText("reason", p.Reason)
}

// EpochPin pins a completed epoch as a savepoint; EpochUnpin releases it.
type EpochPin struct {
	Job   string `json:"job"`
	Epoch uint64 `json:"epoch"`
	Name  string `json:"name,omitempty"`
}

func (p *EpochPin) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if p.Epoch == 0 {
		return ruleErr(wire.CodeInvalid, "epoch", "must be a positive integer")
	}
	if p.Name != "" {
		return wire.CheckID("name", p.Name)
	}
	return nil
}

// EpochRef names one epoch of one job.
type EpochRef struct {
	Job   string `json:"job"`
	Epoch uint64 `json:"epoch"`
}

// EpochsTimeout aborts epochs whose ack deadline has passed, as seen by the
// proposer's clock stamped in the command.
type EpochsTimeout struct {
	Epochs []EpochRef `json:"epochs"`
}

func applyEpochBegin(t *txn, c Command, p *EpochBegin) (any, error) {
	j, err := writableJob(t, p.Job)
	if err != nil {
		return nil, err
	}
	if err := checkGeneration(j, p.Generation); err != nil {
		return nil, err
	}
	if e, err := t.epoch(p.Job, p.Epoch); err != nil {
		return nil, err
	} else if e != nil && e.Generation == p.Generation {
		return e, nil // a retried begin
	}
	if p.Epoch <= j.LastEpoch {
		return nil, ruleErr(wire.CodeEpochNotIncreasing, "epoch", "epoch %d is not above the last begun epoch %d", p.Epoch, j.LastEpoch)
	}
	if len(j.Pending) >= wire.MaxPendingEpochs {
		return nil, ruleErr(wire.CodeTooManyPending, "epoch", "job %q already has %d pending epochs", p.Job, len(j.Pending))
	}
	a, err := t.attemptRef(p.Job, p.Generation)
	if err != nil {
		return nil, err
	}
	e := &epochRecord{
		Job: p.Job, Epoch: p.Epoch, Generation: p.Generation, State: epochPending,
		BeganAt: c.Time, Deadline: c.Time.Add(time.Duration(j.Config.AckTimeout)),
		Expected: a.Expected, CreateIndex: t.index, ModifyIndex: t.index,
	}
	j.LastEpoch = p.Epoch
	j.UpdatedAt = c.Time
	j.ModifyIndex = t.index
	if e.Expected == 0 {
		// No task checkpoints anything: the epoch is complete as it begins.
		if err := completeEpoch(t, j, e, c.Time); err != nil {
			return nil, err
		}
	} else {
		j.Pending = append(j.Pending, p.Epoch)
		if err := t.put(bucketDeadlines, deadlineKey(e.Deadline.UnixNano(), p.Job, p.Epoch), nil); err != nil {
			return nil, err
		}
		if err := t.putEpoch(e); err != nil {
			return nil, err
		}
	}
	return e, t.putJob(j)
}

func applyEpochAbort(t *txn, c Command, p *EpochAbort) (any, error) {
	j, err := writableJob(t, p.Job)
	if err != nil {
		return nil, err
	}
	if err := checkGeneration(j, p.Generation); err != nil {
		return nil, err
	}
	e, err := mustEpoch(t, j, p.Epoch)
	if err != nil {
		return nil, err
	}
	switch e.State {
	case epochAborted:
		return e, nil // a retried abort, or one that lost a race with a timeout
	case epochPending:
	default:
		return nil, ruleErr(wire.CodeEpochNotPending, "epoch", "epoch %d is %s and cannot be aborted", p.Epoch, e.State)
	}
	reason := p.Reason
	if reason == "" {
		reason = "aborted on request"
	}
	if err := abortEpoch(t, j, p.Epoch, c.Time, reason); err != nil {
		return nil, err
	}
	if err := trimHistory(t, j); err != nil {
		return nil, err
	}
	if err := t.putJob(j); err != nil {
		return nil, err
	}
	return t.epoch(p.Job, p.Epoch)
}

func applyEpochPin(t *txn, c Command, p *EpochPin) (any, error) {
	j, err := writableJob(t, p.Job)
	if err != nil {
		return nil, err
	}
	e, err := mustEpoch(t, j, p.Epoch)
	if err != nil {
		return nil, err
	}
	if e.State != epochCompleted {
		return nil, ruleErr(wire.CodeEpochNotCompleted, "epoch", "epoch %d is %s; only a completed, retained epoch can be pinned", p.Epoch, e.State)
	}
	if e.Pinned {
		if e.PinName != p.Name {
			return nil, ruleErr(wire.CodeConflict, "name", "epoch %d is already pinned as %q", p.Epoch, e.PinName)
		}
		return e, nil
	}
	if p.Name != "" {
		for _, n := range j.Retained {
			other, err := t.epochRef(p.Job, n)
			if err != nil {
				return nil, err
			}
			if other.Pinned && other.PinName == p.Name {
				return nil, ruleErr(wire.CodeConflict, "name", "savepoint name %q already pins epoch %d", p.Name, n)
			}
		}
	}
	e.Pinned = true
	e.PinName = p.Name
	e.ModifyIndex = t.index
	return e, t.putEpoch(e)
}

func applyEpochUnpin(t *txn, c Command, p *EpochPin) (any, error) {
	j, err := writableJob(t, p.Job)
	if err != nil {
		return nil, err
	}
	e, err := mustEpoch(t, j, p.Epoch)
	if err != nil {
		return nil, err
	}
	if !e.Pinned {
		return e, nil
	}
	e.Pinned = false
	e.PinName = ""
	e.ModifyIndex = t.index
	if err := t.putEpoch(e); err != nil {
		return nil, err
	}
	j.UpdatedAt = c.Time
	j.ModifyIndex = t.index
	if err := applyRetention(t, j, c.Time); err != nil {
		return nil, err
	}
	if err := trimHistory(t, j); err != nil {
		return nil, err
	}
	if err := pruneAttempts(t, j); err != nil {
		return nil, err
	}
	if err := t.putJob(j); err != nil {
		return nil, err
	}
	return t.epoch(p.Job, p.Epoch)
}

func applyEpochsTimeout(t *txn, c Command, p *EpochsTimeout) (any, error) {
	aborted := []EpochRef{}
	for _, ref := range p.Epochs {
		j, err := t.job(ref.Job)
		if err != nil {
			return nil, err
		}
		if j == nil {
			continue
		}
		e, err := t.epoch(ref.Job, ref.Epoch)
		if err != nil {
			return nil, err
		}
		// Checked against the proposer's time: the epoch may have completed
		// or been aborted since the leader looked.
		if e == nil || e.State != epochPending || c.Time.Before(e.Deadline) {
			continue
		}
		reason := fmt.Sprintf("ack timeout after %s: %d of %d tasks acknowledged", time.Duration(j.Config.AckTimeout), e.Acked, e.Expected)
		if err := abortEpoch(t, j, ref.Epoch, c.Time, reason); err != nil {
			return nil, err
		}
		if err := trimHistory(t, j); err != nil {
			return nil, err
		}
		if err := t.putJob(j); err != nil {
			return nil, err
		}
		aborted = append(aborted, ref)
	}
	return aborted, nil
}
