package fsm_test

import (
	"bytes"
	"errors"
	"regexp"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// A batch entry applies its commands in order, each with its own result,
// and leaves exactly the state the same commands leave as separate
// entries: a rule violation in one changes nothing and does not stop the
// others.
func TestBatchEntryAppliesLikeSeparateEntries(t *testing.T) {
	single, batched := newHarness(t), newHarness(t)
	for _, h := range []*harness{single, batched} {
		h.putJob("j", wire.JobConfig{})
		h.start("j", "a1", task(t, "t1", "input"), task(t, "t2", "input"))
	}
	cmds := []struct {
		typ     fsm.CommandType
		payload any
		rule    error // the rule violation expected, or nil
	}{
		{fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 2}, nil},
		{fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 1}, wire.ErrEpochNotIncreasing},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 2, Task: "t1", Payloads: map[fsm.Kind][]byte{wire.KindInput: []byte("o=1")}}, nil},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 7, Epoch: 2, Task: "t2", Payloads: map[fsm.Kind][]byte{wire.KindInput: []byte("o=2")}}, wire.ErrInvalid},
		{fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 2, Task: "t2", Payloads: map[fsm.Kind][]byte{wire.KindInput: []byte("o=2")}}, nil},
	}
	var raw [][]byte
	for _, c := range cmds {
		res := single.mustApply(c.typ, c.payload)
		if c.rule != nil {
			mustRule(t, res, c.rule)
		} else {
			mustOK(t, res)
		}
		raw = append(raw, batched.encode(c.typ, c.payload))
	}
	entry, err := fsm.EncodeBatch(batched.now, raw)
	if err != nil {
		t.Fatal(err)
	}
	resp := batched.f.Apply(batched.nextLog(entry))
	res, ok := resp.(*fsm.Result)
	if !ok || res.Err != nil {
		t.Fatalf("batch entry: %T %+v", resp, resp)
	}
	results, ok := res.Value.(fsm.BatchResults)
	if !ok || len(results) != len(cmds) {
		t.Fatalf("batch value %T with %d results, want %d", res.Value, len(results), len(cmds))
	}
	for i, c := range cmds {
		if results[i].Index != batched.index {
			t.Errorf("result %d has index %d, want the entry's %d", i, results[i].Index, batched.index)
		}
		if c.rule != nil {
			mustRule(t, results[i], c.rule)
		} else {
			mustOK(t, results[i])
		}
	}
	if e := batched.epoch("j", 2); e.State != wire.EpochCompleted {
		t.Fatalf("epoch 2 after the batch: %s, want completed", e.State)
	}
	// The same state, but for the Raft indexes records carry (the batch's
	// commands share one entry's).
	if d := diffDumps(withoutIndexes(single.dump()), withoutIndexes(batched.dump())); d != "" {
		t.Fatalf("state after separate entries vs after one batch entry:\n%s", d)
	}
	// A restart replays nothing twice.
	before := batched.hash()
	batched.reopen()
	if after := batched.hash(); after != before {
		t.Fatalf("after reopen: %s, before %s", after, before)
	}
}

var indexFields = regexp.MustCompile(`"(index|create_index|modify_index)":[0-9]+`)

func withoutIndexes(d fsm.Dump) fsm.Dump {
	out := fsm.Dump{}
	for bucket, kv := range d {
		if bucket == "meta" {
			continue
		}
		out[bucket] = map[string]string{}
		for k, v := range kv {
			out[bucket][k] = indexFields.ReplaceAllString(v, `"$1":0`)
		}
	}
	return out
}

func TestBatchEncoding(t *testing.T) {
	h := newHarness(t)
	a := h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "a"})
	b := h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "b"})
	entry, err := fsm.EncodeBatch(h.now, [][]byte{a, b})
	if err != nil {
		t.Fatal(err)
	}
	c, err := fsm.Decode(entry)
	if err != nil || c.Type != fsm.CmdBatch {
		t.Fatalf("decode: %v %v", c.Type, err)
	}
	got, err := fsm.DecodeBatch(c)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("DecodeBatch: %q %v", got, err)
	}
	if _, err := fsm.EncodeBatch(h.now, nil); err == nil {
		t.Fatal("an empty batch was encoded")
	}
	if _, err := fsm.EncodeBatch(h.now, [][]byte{entry}); err == nil {
		t.Fatal("a batch inside a batch was encoded")
	}
	// Truncated or padded payloads are corrupt, never silently shortened.
	for name, bad := range map[string][]byte{
		"truncated": entry[:len(entry)-3],
		"padded":    append(append([]byte{}, entry...), 0),
		"no count":  entry[:10],
	} {
		c, err := fsm.Decode(bad)
		if err != nil {
			t.Fatalf("%s: envelope: %v", name, err)
		}
		if _, err := fsm.DecodeBatch(c); !errors.Is(err, fsm.ErrCorruptCommand) {
			t.Errorf("%s: DecodeBatch %v, want ErrCorruptCommand", name, err)
		}
	}
}
