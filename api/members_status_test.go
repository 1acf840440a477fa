package api_test

import (
	"testing"

	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestMembersStatus: any member answers every member's own status; a
// stopped member is listed with the error.
func TestMembersStatus(t *testing.T) {
	ms := testmember.StartCluster(t, 3)
	var got struct {
		AskedBy string                    `json:"asked_by"`
		Members []wire.MemberStatusAnswer `json:"members"`
	}
	ok(t, "GET", ms[1].URL+"/v1/members/status", nil, &got)
	if got.AskedBy != "n2" || len(got.Members) != 3 {
		t.Fatalf("answer: %+v", got)
	}
	leader := testmember.LeaderOf(ms)
	for i, a := range got.Members {
		if a.Status == nil || a.Error != "" || a.Status.ID != ms[i].ID || a.ID != ms[i].ID {
			t.Fatalf("member %d: %+v", i, a)
		}
		if want := "follower"; ms[i] == leader {
			if a.Status.State != "leader" {
				t.Errorf("%s: state %s, want leader", a.ID, a.Status.State)
			}
		} else if a.Status.State != want || a.Status.LastContact == nil {
			t.Errorf("%s: state %s, last contact %v", a.ID, a.Status.State, a.Status.LastContact)
		}
	}
	// n3 stops: it is listed, with why its status is missing.
	stopped := ms[2]
	if stopped == leader {
		stopped = ms[0]
	}
	stopped.Stop()
	asker := ms[1]
	if asker == stopped {
		asker = ms[2]
	}
	got.Members = nil
	ok(t, "GET", asker.URL+"/v1/members/status", nil, &got)
	for _, a := range got.Members {
		if a.ID == stopped.ID {
			if a.Status != nil || a.Error == "" {
				t.Errorf("stopped %s: %+v", a.ID, a)
			}
		} else if a.Status == nil {
			t.Errorf("running %s: %+v", a.ID, a)
		}
	}
}
