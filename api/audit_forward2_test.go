package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
)

// TestForwardedRequestsCountedOnce: a follower marks what it forwards
// (X-Metastore-Forwarded-By), so the leader does not count its clients'
// requests against the follower's address: many clients of a follower,
// each well within --rate-limit, are not refused by the leader however
// many they are together. Found by a mutation audit: forwarding unmarked
// survived every API test.
func TestForwardedRequestsCountedOnce(t *testing.T) {
	ms := testmember.StartClusterWith(t, 3, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s: no refill during the test
		c.RateBurst = 3
	})
	leader := testmember.LeaderOf(ms)
	var follower *testmember.Member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	for i := range 10 {
		c := clientFrom(fmt.Sprintf("127.0.1.%d", i+1))
		req, err := http.NewRequest("PUT", follower.URL+fmt.Sprintf("/v1/jobs/j%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d's write through the follower: %d", i+1, resp.StatusCode)
		}
	}
}
