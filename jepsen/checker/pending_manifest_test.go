package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
)

// TestPendingManifestLostByTheStore: agg-0 acknowledged epoch 3 ok with a
// manifest holding k1, then epoch 4 ok with one that dropped k1; both
// epochs are still pending at the end, so epoch 3's checkpoint-to-be holds
// k1 and the store must keep it (LiveSet: "every key of a ... pending
// checkpoint's manifest"). The store lost that manifest: its manifest read
// answered not found, which the runner skips (runner.go:660, `continue` on
// ErrNotFound), so Final holds no task of epoch 3, and the GC deleted k1.
// The ack record is still there, so acks passes; LiveSet takes pending
// epochs' manifests only from the store's answers, never from the ok acks
// the history holds, so gc-safety does not require k1 either (its head
// protection ended when the epoch 4 ack was invoked). Fails today.
//
// Proposed fix: LiveSet counts the Keys of every ok ack of an epoch that
// ends pending (its generation the job's current one) as certainly live,
// and Acks compares them with the collected pending manifest; the runner
// reports a not-found manifest of a task that holds an ack record in the
// pending epoch instead of skipping it.
func TestPendingManifestLostByTheStore(t *testing.T) {
	b := newHB()
	a3 := ack("j", 3, "agg-0", "v3", false)
	a3.HasManifest, a3.Keys = true, []string{"k1", "k2"}
	b.add(a3, 0, 10)
	a4 := ack("j", 4, "agg-0", "v4", false)
	a4.HasManifest, a4.Keys = true, []string{"k2", "k3"}
	b.add(a4, 20, 30)
	f := &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, Epochs: []EpochFinal{
		{Epoch: 3, Generation: 1, State: "pending", Expected: 2, Acked: 1,
			Tasks: map[string]TaskCheckpoint{}, // manifest read: not found, skipped
			Acks:  map[string]AckRecord{"agg-0": {}}},
		{Epoch: 4, Generation: 1, State: "pending", Expected: 2, Acked: 1,
			Tasks: map[string]TaskCheckpoint{"agg-0": {HasManifest: true, Keys: []string{"k2", "k3"}}},
			Acks:  map[string]AckRecord{"agg-0": {}}},
	}}}, Bucket: []string{"k2", "k3"}}
	// Control: with the manifest the store should have answered, k1's
	// absence is reported.
	f.Jobs["j"].Epochs[0].Tasks["agg-0"] = TaskCheckpoint{HasManifest: true, Keys: []string{"k1", "k2"}}
	if GCSafety(&Input{Ops: b.ops, Final: f}).OK {
		t.Fatal("control: a key of a pending manifest missing from the bucket accepted")
	}
	delete(f.Jobs["j"].Epochs[0].Tasks, "agg-0")
	in := &Input{Ops: b.ops, Final: f}
	if GCSafety(in).OK && Acks(in).OK {
		t.Fatalf("k1, in the manifest agg-0 acknowledged ok in epoch 3 (pending at the end), is gone from the bucket and gc-safety and acks passed")
	}
}

// TestPendingManifestChecks: acks compares the manifest the store holds
// for a pending epoch of the current generation with the one acked ok,
// and the live set requires the acked keys; what may legitimately differ
// passes: an ack of unknown outcome, an ok ack of no blobs whose manifest
// the store answered not found, an ok ack of an epoch that ends aborted.
func TestPendingManifestChecks(t *testing.T) {
	build := func(tasks map[string]TaskCheckpoint, acked ...string) *Input {
		b := newHB()
		a := ack("j", 3, "agg-0", "v3", false)
		a.HasManifest, a.Keys = true, acked
		b.add(a, 0, 10)
		f := &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, Epochs: []EpochFinal{
			{Epoch: 3, Generation: 1, State: "pending", Expected: 2, Acked: 1, Tasks: tasks, Acks: map[string]AckRecord{"agg-0": {}}},
		}}}, Bucket: []string{"k1", "k2"}}
		return &Input{Ops: b.ops, Final: f}
	}
	for _, c := range []struct {
		name   string
		in     *Input
		acksOK bool
	}{
		{"manifest as acked", build(map[string]TaskCheckpoint{"agg-0": {HasManifest: true, Keys: []string{"k2", "k1"}}}, "k1", "k2"), true},
		{"manifest lost", build(map[string]TaskCheckpoint{}, "k1", "k2"), false},
		{"manifest changed", build(map[string]TaskCheckpoint{"agg-0": {HasManifest: true, Keys: []string{"k1"}}}, "k1", "k2"), false},
		{"acked manifest of no blobs, none answered", build(map[string]TaskCheckpoint{}), true},
	} {
		if v := Acks(c.in); v.OK != c.acksOK {
			t.Errorf("%s: acks ok=%v, want %v: %s", c.name, v.OK, c.acksOK, v.Summary)
		}
		if v := GCSafety(c.in); !v.OK {
			t.Errorf("%s: gc-safety failed with every key in the bucket: %s", c.name, v.Summary)
		}
	}

	// The acked keys are certainly live while the epoch is pending in the
	// current generation, not when the ack's outcome is unknown or the
	// epoch ended aborted.
	in := build(map[string]TaskCheckpoint{}, "k1", "k2")
	in.Final.Bucket = []string{"k2"}
	if v := GCSafety(in); v.OK {
		t.Error("a key acked ok in a pending epoch missing from the bucket accepted")
	}
	in.Ops[0].Outcome = history.Unknown
	in.Ops[0].Hash = ""
	if v := GCSafety(in); !v.OK {
		t.Errorf("a key of an ack of unknown outcome required: %s", v.Summary)
	}
	in = build(map[string]TaskCheckpoint{}, "k1", "k2")
	in.Final.Bucket = nil
	in.Final.Jobs["j"].Epochs[0].State = "aborted"
	in.Final.Jobs["j"].Generation = 2
	if v := GCSafety(in); !v.OK {
		t.Errorf("a key of an ok ack of an aborted epoch of a superseded attempt required: %s", v.Summary)
	}
}
