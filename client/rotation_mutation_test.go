package client_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// The tests of this file pin the client's choice of member (client.go:
// rotate, answered, learn) against fake members on loopback.

// TestUnavailableMemberIsPassed: a member answering 502, 503 or 504 is
// left for the next endpoint at once, which the client then prefers.
func TestUnavailableMemberIsPassed(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		var a, b atomic.Int32
		sa := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
			a.Add(1)
			refuse(w, status, wire.CodeUnavailable, true)
		})
		sb := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
			b.Add(1)
			answer(w, http.StatusOK, wire.Job{ID: "j"})
		})
		c := proxiedClient(t, 2, sa.URL, sb.URL)
		if j, err := c.Job(ctxT(t), "j"); err != nil || j.ID != "j" {
			t.Errorf("%d from the first endpoint: %+v %v; want the second's answer", status, j, err)
		}
		if a.Load() != 1 || b.Load() != 1 || c.Endpoints()[0] != sb.URL {
			t.Errorf("%d: %d and %d requests, preferred %s; want 1, 1 and %s", status, a.Load(), b.Load(), c.Endpoints()[0], sb.URL)
		}
	}
}

// TestUnreachableMemberPassedOver: an endpoint that refused a connection
// is passed over by the calls that follow (for a while), so it does not
// use up their attempts; one that answered 503 is not.
func TestUnreachableMemberPassedOver(t *testing.T) {
	l, dead := freeAddr(t)
	l.Close()
	var failB, failC atomic.Int32
	var hitsB, hitsC atomic.Int32
	member := func(fail, hits *atomic.Int32) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			if fail.Add(-1) >= 0 {
				refuse(w, http.StatusServiceUnavailable, wire.CodeUnavailable, true)
				return
			}
			answer(w, http.StatusOK, wire.Job{ID: "j"})
		}
	}
	sb := fakeMember(t, member(&failB, &hitsB))
	sc := fakeMember(t, member(&failC, &hitsC))
	// The dead endpoint stays passed over for 2*BackoffMax: two minutes.
	c, err := client.New(client.Config{Endpoints: []string{"http://" + dead, sb.URL, sc.URL}, MaxAttempts: 2,
		BackoffBase: time.Millisecond, BackoffMax: time.Minute, RequestTimeout: 10 * time.Second, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	call := func(what, want string) {
		t.Helper()
		if _, err := c.Job(ctx, "j"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := c.Endpoints()[0]; got != want {
			t.Fatalf("%s: preferred %s, want %s", what, got, want)
		}
	}
	call("dead first endpoint", sb.URL)
	failB.Store(1)
	call("second endpoint answers 503", sc.URL) // C answered after B's 503
	failC.Store(1)
	// C's 503: the next endpoint is the dead one, passed over for B.
	call("third endpoint answers 503", sb.URL)
	if hitsB.Load() != 3 || hitsC.Load() != 2 {
		t.Errorf("B saw %d requests, C %d; want 3 and 2", hitsB.Load(), hitsC.Load())
	}
}

// statusOf is a member's status listing members (id -> base URL), voters
// but for those in nonvoting.
func statusOf(self, leader string, members map[string]string, none ...string) wire.Status {
	st := wire.Status{ID: self, State: "follower", LeaderID: leader}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := "voter"
		if slices.Contains(none, id) {
			s = "none"
		}
		st.Members = append(st.Members, wire.MemberStatus{ID: id, HTTPAddr: strings.TrimPrefix(members[id], "http://"), Suffrage: s, Leader: id == leader})
	}
	return st
}

// TestDisabledDiscoveryKeepsToEndpoints: with DisableDiscovery the client
// learns the leader among its own endpoints only, never adds the members a
// status lists, and never reads the members on its own.
func TestDisabledDiscoveryKeepsToEndpoints(t *testing.T) {
	var statusA, hitsC atomic.Int32
	var members map[string]string
	var mu sync.Mutex
	serve := func(self string, status *atomic.Int32) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			ms := members
			mu.Unlock()
			if r.URL.Path == "/v1/status" {
				if status != nil {
					status.Add(1)
				}
				answer(w, http.StatusOK, statusOf(self, "n2", ms))
				return
			}
			w.Header().Set(client.HeaderServedBy, "n2") // forwarded to the leader
			answer(w, http.StatusOK, wire.Job{ID: "j"})
		}
	}
	sa := fakeMember(t, serve("n1", &statusA))
	sb := fakeMember(t, serve("n2", nil))
	sc := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		hitsC.Add(1)
		answer(w, http.StatusOK, wire.Job{ID: "j"})
	})
	mu.Lock()
	members = map[string]string{"n1": sa.URL, "n2": sb.URL, "n3": sc.URL}
	mu.Unlock()
	ctx := ctxT(t)

	// An answer forwarded to the leader: the client stays with the
	// endpoint that answered and does not read the members.
	c := proxiedClient(t, 2, sa.URL, sb.URL)
	if _, err := c.Job(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{sa.URL, sb.URL}) || statusA.Load() != 0 {
		t.Fatalf("after a forwarded answer: endpoints %v, %d status reads; want %v and none", got, statusA.Load(), []string{sa.URL, sb.URL})
	}
	// Status names the leader, one of the endpoints: preferred; the
	// member outside them is not added.
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{sb.URL, sa.URL}) {
		t.Fatalf("after Status: endpoints %v, want %v", got, []string{sb.URL, sa.URL})
	}
	if _, err := c.Job(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if hitsC.Load() != 0 {
		t.Fatalf("the member outside the endpoints got %d requests", hitsC.Load())
	}
}

// TestDiscoveryLearnsMembersAndLeader: with discovery, Status adds the
// members it lists (but a record without a server in the configuration,
// suffrage none) and prefers the leader.
func TestDiscoveryLearnsMembersAndLeader(t *testing.T) {
	var members map[string]string
	var mu sync.Mutex
	sa := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ms := members
		mu.Unlock()
		answer(w, http.StatusOK, statusOf("n1", "n2", ms, "n3"))
	})
	sb := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { answer(w, http.StatusOK, wire.Job{ID: "j"}) })
	l, gone := freeAddr(t)
	l.Close()
	mu.Lock()
	members = map[string]string{"n1": sa.URL, "n2": sb.URL, "n3": "http://" + gone}
	mu.Unlock()
	c := newClient(t, sa.URL)
	if _, err := c.Status(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{sb.URL, sa.URL}) {
		t.Fatalf("endpoints %v, want the leader then the member asked: %v", got, []string{sb.URL, sa.URL})
	}
}
