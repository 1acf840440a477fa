package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestForwardedRequestNotForwardedAgain: a member that is not the leader
// answers a request already forwarded by a member (X-Metastore-Forwarded-By)
// with 503 not_leader, retryable, instead of forwarding it again: while
// leadership moves, two members could otherwise pass a request back and
// forth. Nothing is applied; without the header the same request is
// forwarded. Found by a mutation audit: dropping the check in
// Server.forward passed every API test.
func TestForwardedRequestNotForwardedAgain(t *testing.T) {
	ms := testmember.StartCluster(t, 3)
	leader := testmember.LeaderOf(ms)
	var follower *testmember.Member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	req, err := http.NewRequest("PUT", follower.URL+"/v1/jobs/twice", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderForwardedBy, leader.ID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header, body: raw}
	var e apiError
	r.decode(t, &e)
	if r.status != http.StatusServiceUnavailable || e.Error.Code != wire.CodeNotLeader || !e.Error.Retryable || r.header.Get("Retry-After") == "" {
		t.Fatalf("a forwarded write to a follower: %d %s", r.status, r.body)
	}
	expectError(t, do(t, "GET", leader.URL+"/v1/jobs/twice", nil), http.StatusNotFound, wire.CodeNotFound, "")
	ok(t, "PUT", follower.URL+"/v1/jobs/twice", nil, nil)
	ok(t, "GET", leader.URL+"/v1/jobs/twice", nil, nil)
}

// TestForwardedBodyOverTheLimit: a follower forwarding a body above
// --max-body-bytes answers 413 body_too_large, as the leader would, not
// an unknown outcome. Found by a mutation audit: forwardError without its
// MaxBytesError case survived every API test.
func TestForwardedBodyOverTheLimit(t *testing.T) {
	ms := testmember.StartClusterWith(t, 3, func(c *config.Config) { c.MaxBodyBytes = 64 << 10 })
	leader := testmember.LeaderOf(ms)
	var follower *testmember.Member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	body := `{"config":{"retained":1},"pad":"` + strings.Repeat("p", 100<<10) + `"}`
	r := do(t, "PUT", follower.URL+"/v1/jobs/big", body)
	expectError(t, r, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "")
	expectError(t, do(t, "GET", leader.URL+"/v1/jobs/big", nil), http.StatusNotFound, wire.CodeNotFound, "")
}
