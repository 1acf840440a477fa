package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
)

// maxEpoch is fsm.MaxEpoch, written out so the test also builds against a
// state machine without the bound (and fails there).
const maxEpoch uint64 = 1<<63 - 1

// TestEpochAboveMaxRefused: an epoch above MaxEpoch (2^63-1, the int64 the
// API documents) is refused naming the field, and the job can still begin
// epochs afterwards. Before the bound, 2^63 was accepted and no epoch could
// ever begin again.
func TestEpochAboveMaxRefused(t *testing.T) {
	for _, epoch := range []uint64{maxEpoch + 1, 1<<64 - 1} {
		h := newHarness(t)
		h.putJob("j", fsm.JobConfig{})
		h.start("j", "a1", task(t, "t", "state"))
		re := h.reject(fsm.ErrInvalid, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: epoch})
		if re.Field != "epoch" {
			t.Fatalf("epoch %d: refused naming %q, want epoch", epoch, re.Field)
		}
		h.begin("j", 1, 1)
		h.begin("j", 1, maxEpoch)
	}
}

// TestEpochBeginVersion1Replays: a version-1 begin of an epoch above
// MaxEpoch, written before the bound, still applies when the log is
// replayed, so every member computes the state the others have.
func TestEpochBeginVersion1Replays(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", fsm.JobConfig{})
	h.start("j", "a1", task(t, "t", "state"))
	data := h.encode(fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: maxEpoch + 1})
	data[1] = 1 // the version-1 entry an older leader wrote
	res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result)
	if !ok || res.Err != nil {
		t.Fatalf("version-1 begin of epoch 2^63: %+v", res)
	}
	if j := h.job("j"); j.LastEpoch != maxEpoch+1 {
		t.Fatalf("last epoch %d after the version-1 begin", j.LastEpoch)
	}
}

