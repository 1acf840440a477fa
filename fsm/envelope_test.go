package fsm_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	at := time.Date(2031, 7, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	payload := fsm.EpochBegin{Job: "job-1", Generation: 3, Epoch: 42}
	data, err := fsm.Encode(fsm.CmdEpochBegin, at, payload)
	if err != nil {
		t.Fatal(err)
	}
	c, err := fsm.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != fsm.CmdEpochBegin || c.Version != 2 {
		t.Errorf("type %s version %d, want %s version 2", c.Type, c.Version, fsm.CmdEpochBegin)
	}
	if !c.Time.Equal(at) || c.Time.Location() != time.UTC {
		t.Errorf("time %v, want %v in UTC", c.Time, at)
	}
	var got fsm.EpochBegin
	if err := json.Unmarshal(c.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if got != payload {
		t.Errorf("payload %+v, want %+v", got, payload)
	}
	if s := fsm.CmdTaskAck.String(); s != "task-ack" {
		t.Errorf("CmdTaskAck.String() = %q", s)
	}
	if s := fsm.CommandType(250).String(); s != "unknown(250)" {
		t.Errorf("CommandType(250).String() = %q", s)
	}
}

func TestEncodeRejectsUnknownType(t *testing.T) {
	for _, typ := range []fsm.CommandType{fsm.CmdUnknown, 250} {
		if _, err := fsm.Encode(typ, t0, struct{}{}); !errors.Is(err, fsm.ErrUnknownCommand) {
			t.Errorf("Encode(%d): %v, want ErrUnknownCommand", typ, err)
		}
	}
}

// badEntries are log entries no build can apply.
func badEntries(t *testing.T) []struct {
	name string
	data []byte
	want error
} {
	valid, err := fsm.Encode(fsm.CmdJobPut, t0, fsm.JobPut{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	with := func(typ, version byte) []byte {
		d := append([]byte(nil), valid...)
		d[0], d[1] = typ, version
		return d
	}
	header := make([]byte, 10)
	header[0], header[1] = byte(fsm.CmdJobPut), 1
	binary.BigEndian.PutUint64(header[2:], uint64(t0.UnixNano()))
	return []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, fsm.ErrCorruptCommand},
		{"short", valid[:9], fsm.ErrCorruptCommand},
		{"type 0", with(0, 1), fsm.ErrUnknownCommand},
		{"unknown type", with(250, 1), fsm.ErrUnknownCommand},
		{"version 0", with(byte(fsm.CmdJobPut), 0), fsm.ErrUnknownCommand},
		{"version above registered", with(byte(fsm.CmdJobPut), 2), fsm.ErrUnknownCommand},
		{"version 255", with(byte(fsm.CmdTaskAck), 255), fsm.ErrUnknownCommand},
		// Decode accepts these; the payload decoder in Apply does not.
		{"payload not json", append(header[:10:10], "{not json"...), fsm.ErrCorruptCommand},
		{"payload empty", header, fsm.ErrCorruptCommand},
		{"payload wrong shape", append(header[:10:10], `{"job":42}`...), fsm.ErrCorruptCommand},
	}
}

func TestDecodeRejectsBadEnvelopes(t *testing.T) {
	for _, tc := range badEntries(t) {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fsm.Decode(tc.data)
			if strings.HasPrefix(tc.name, "payload") {
				if err != nil {
					t.Fatalf("Decode: %v; the envelope is valid", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestApplyPanicsOnBadEntry: an entry that cannot be applied stops the node
// (a panic) and writes nothing, not even the applied index, so the same
// entry is met again on restart instead of being skipped.
func TestApplyPanicsOnBadEntry(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	for _, tc := range badEntries(t) {
		h.run(t, tc.name, func(t *testing.T) {
			before, idx := h.dump(), h.f.AppliedIndex()
			bad := &raft.Log{Index: idx + 1, Term: 1, Type: raft.LogCommand, Data: tc.data}
			msg := panicOf(func() { h.f.Apply(bad) })
			if msg == "" {
				t.Fatal("Apply did not panic")
			}
			if !strings.Contains(msg, tc.want.Error()) {
				t.Errorf("panic %q does not name %q", msg, tc.want)
			}
			// A batch with good entries around the bad one writes none of them.
			good := h.encode(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m1", RaftAddr: "a:1", HTTPAddr: "a:2"})
			batch := []*raft.Log{
				{Index: idx + 1, Term: 1, Type: raft.LogCommand, Data: good},
				{Index: idx + 2, Term: 1, Type: raft.LogCommand, Data: tc.data},
				{Index: idx + 3, Term: 1, Type: raft.LogCommand, Data: good},
			}
			if msg := panicOf(func() { h.f.ApplyBatch(batch) }); msg == "" {
				t.Fatal("ApplyBatch did not panic")
			}
			if got := h.f.AppliedIndex(); got != idx {
				t.Errorf("applied index %d after a panic, want %d", got, idx)
			}
			if d := diffDumps(before, h.dump()); d != "" {
				t.Errorf("state changed by a failed entry:\n%s", d)
			}
		})
	}
	// The state machine is still usable.
	h.index = h.f.AppliedIndex()
	h.putJob("k", wire.JobConfig{})
}

func panicOf(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
			if msg == "" {
				msg = "(empty panic)"
			}
		}
	}()
	fn()
	return ""
}
