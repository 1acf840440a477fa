package fsm_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// maxEpoch is wire.MaxEpoch, written out so the test also builds against a
// state machine without the bound (and fails there).
const maxEpoch uint64 = 1<<63 - 1

// TestEpochAboveMaxRefused: an epoch above wire.MaxEpoch (2^63-1, the int64 the
// API documents) is refused naming the field, and the job can still begin
// epochs afterwards. Before the bound, 2^63 was accepted and no epoch could
// ever begin again.
func TestEpochAboveMaxRefused(t *testing.T) {
	for _, epoch := range []uint64{maxEpoch + 1, 1<<64 - 1} {
		h := newHarness(t)
		h.putJob("j", wire.JobConfig{})
		h.start("j", "a1", task(t, "t", "state"))
		re := h.reject(wire.ErrInvalid, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: epoch})
		if re.Field != "epoch" {
			t.Fatalf("epoch %d: refused naming %q, want epoch", epoch, re.Field)
		}
		h.begin("j", 1, 1)
		h.begin("j", 1, maxEpoch)
	}
}

// TestEpochBeginVersion1Replays: a version-1 begin of an epoch above
// wire.MaxEpoch, written before the bound, still applies when the log is
// replayed, so every member computes the state the others have.
func TestEpochBeginVersion1Replays(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
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

// TestMemberAddressesChecked: a member record whose addresses no member
// could dial is refused naming the field; a version-1 record (written
// before the check) still replays. Before, "not-an-addr" was recorded and
// the cluster was asked to add a voter there.
func TestMemberAddressesChecked(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ raft, http, field string }{
		{"not-an-addr", "127.0.0.1:2", "raft_addr"},
		{"127.0.0.1:0", "127.0.0.1:2", "raft_addr"},
		{"127.0.0.1:65536", "127.0.0.1:2", "raft_addr"},
		{"127.0.0.1:http", "127.0.0.1:2", "raft_addr"},
		{":7071", "127.0.0.1:2", "raft_addr"},
		{"0.0.0.0:7071", "127.0.0.1:2", "raft_addr"},
		{"bad_host:7071", "127.0.0.1:2", "raft_addr"},
		{"-x.example:7071", "127.0.0.1:2", "raft_addr"},
		{"1.2.3.999:7071", "127.0.0.1:2", "raft_addr"},
		{"127.0.0.1:7071", "127.0.0.1", "http_addr"},
		{"127.0.0.1:7071", "", "http_addr"},
	} {
		re := h.reject(wire.ErrInvalid, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "zz", RaftAddr: c.raft, HTTPAddr: c.http})
		if re.Field != c.field {
			t.Errorf("%s %s: refused naming %q, want %s", c.raft, c.http, re.Field, c.field)
		}
	}
	for _, addr := range []string{"127.0.0.1:7071", "[::1]:7071", "node-4.example.com:7071", "localhost:1", "n4:65535"} {
		mustOK(t, h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "ok", RaftAddr: addr, HTTPAddr: addr}))
	}
	data := h.encode(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "zz", RaftAddr: "not-an-addr", HTTPAddr: "127.0.0.1:2"})
	data[1] = 1 // the version-1 entry an older leader wrote
	if res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result); !ok || res.Err != nil {
		t.Fatalf("version-1 member record: %+v", res)
	}
	// Version 1 had checks of its own, which a replay still applies: an id,
	// and addresses of 1 to 256 bytes.
	long := strings.Repeat("a", 257)
	for _, c := range []struct {
		m     fsm.MemberUpsert
		field string
	}{
		{fsm.MemberUpsert{ID: "z z", RaftAddr: "r:1", HTTPAddr: "h:1"}, "id"},
		{fsm.MemberUpsert{ID: "zz", HTTPAddr: "h:1"}, "raft_addr"},
		{fsm.MemberUpsert{ID: "zz", RaftAddr: long, HTTPAddr: "h:1"}, "raft_addr"},
		{fsm.MemberUpsert{ID: "zz", RaftAddr: "r:1"}, "http_addr"},
		{fsm.MemberUpsert{ID: "zz", RaftAddr: "r:1", HTTPAddr: long}, "http_addr"},
	} {
		re := h.rejectVersion(wire.ErrInvalid, fsm.CmdMemberUpsert, 1, c.m)
		if re.Field != c.field {
			t.Errorf("version-1 %+v: refused naming %q, want %s", c.m, re.Field, c.field)
		}
	}
}
