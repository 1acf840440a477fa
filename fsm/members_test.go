package fsm_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// checkMembers checks that Members lists exactly the ids want, and that
// it agrees with the members bucket of the file.
func checkMembers(t *testing.T, h *harness, when string, want ...string) {
	t.Helper()
	ms, err := h.f.Members()
	if err != nil {
		t.Fatalf("%s: Members: %v", when, err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.ID)
	}
	var inFile []string
	for id := range h.dump()["members"] {
		inFile = append(inFile, id)
	}
	slices.Sort(inFile)
	if !slices.Equal(got, want) || !slices.Equal(inFile, want) {
		t.Fatalf("%s: Members lists %v and the file holds %v, want %v", when, got, inFile, want)
	}
}

func upsertMember(id string) fsm.MemberUpsert {
	return fsm.MemberUpsert{ID: id, RaftAddr: id + ".example:7071", HTTPAddr: id + ".example:7070"}
}

// TestMembersNeverWait: Members answers from memory as of the last applied
// entry (member commands, refused ones, restores, reopening), and it does
// not wait while a restore holds the file, which every read of the file
// waits for.
func TestMembersNeverWait(t *testing.T) {
	h := newHarness(t)
	checkMembers(t, h, "new file")
	mustOK(t, h.mustApply(fsm.CmdMemberUpsert, upsertMember("m2")))
	mustOK(t, h.mustApply(fsm.CmdMemberUpsert, upsertMember("m1")))
	checkMembers(t, h, "after two upserts", "m1", "m2")
	mustOK(t, h.mustApply(fsm.CmdMemberRemove, fsm.MemberRemove{ID: "m1"}))
	checkMembers(t, h, "after a removal", "m2")
	h.reject(wire.ErrInvalid, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m4", RaftAddr: "not-an-address", HTTPAddr: "m4.example:7070"})
	checkMembers(t, h, "after a refused upsert", "m2")

	snap := snapshotOf(t, h.f)
	h.putJob("j", wire.JobConfig{}) // a batch without member commands
	mustOK(t, h.mustApply(fsm.CmdMemberUpsert, upsertMember("m3")))
	checkMembers(t, h, "after the snapshot", "m2", "m3")

	release := fsm.HoldFile(h.f)
	answered := make(chan []fsm.Member, 1)
	go func() {
		ms, _ := h.f.Members()
		answered <- ms
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case ms := <-answered:
		if len(ms) != 2 || ms[0].ID != "m2" || ms[1].ID != "m3" || ms[1].HTTPAddr != "m3.example:7070" {
			t.Errorf("Members while the file is held: %+v", ms)
		}
	case <-ctx.Done():
		t.Error("Members waited for the lock a restore holds")
	}
	release()
	if t.Failed() {
		return
	}

	if err := h.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, h, "after restoring the snapshot", "m2")
	h.reopen()
	checkMembers(t, h, "after reopening", "m2")
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.f.Members(); err == nil {
		t.Fatal("Members of a closed state machine: no error")
	}
}
