package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
)

// TestClientLimitsForgetIdleClients: a client is tracked while it has
// requests in flight or tokens to win back, and forgotten after, so the
// table does not grow with every address ever seen.
func TestClientLimitsForgetIdleClients(t *testing.T) {
	l := config.DefaultHTTPLimits()
	l.RateLimit, l.RateBurst = 10, 5
	c := newClientLimits(l)
	now := time.Unix(1_000_000, 0)
	var held func()
	for i := 0; i < 10000; i++ {
		release, _, reason := c.admit(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
		if reason != "" {
			t.Fatalf("client %d refused on its first request: %s", i, reason)
		}
		if i == 0 {
			held = release // one request stays in flight
		} else {
			release()
		}
	}
	if n := c.size(); n != 10000 {
		t.Fatalf("tracking %d clients, want 10000", n)
	}
	// Each client spent one token of five; at 10/s it has them back after
	// 100ms. The next sweep forgets all but the one with a request in flight.
	later := now.Add(sweepEvery)
	release, _, _ := c.admit("10.9.9.9", later)
	release()
	if n := c.size(); n != 2 {
		t.Fatalf("tracking %d clients after the sweep, want 2 (one in flight, one new)", n)
	}
	held()

	// A client that spent its burst is refused until a token is back, and
	// told how long that is.
	for i := 0; i < 5; i++ {
		r, _, reason := c.admit("10.8.8.8", later)
		if reason != "" {
			t.Fatalf("request %d within the burst refused: %s", i, reason)
		}
		r()
	}
	_, after, reason := c.admit("10.8.8.8", later)
	if reason != rejectRate || after <= 0 || after > 100*time.Millisecond {
		t.Fatalf("over the burst: reason %q retry after %s, want rate_limited within 100ms", reason, after)
	}
	if r, _, reason := c.admit("10.8.8.8", later.Add(100*time.Millisecond)); reason != "" {
		t.Fatalf("refused after a token came back: %s", reason)
	} else {
		r()
	}
}

// TestClientLimitsOnByDefault: the default store rate-limits every client
// (issue 13: one worker token flooded the store), at a rate no real
// worker reaches; 0 turns the limits off.
func TestClientLimitsOnByDefault(t *testing.T) {
	c := newClientLimits(config.DefaultHTTPLimits())
	if c == nil || c.rate != config.DefaultRateLimit || c.burst != config.DefaultRateBurst {
		t.Fatalf("default client limits %+v, want %d/s burst %d", c, config.DefaultRateLimit, config.DefaultRateBurst)
	}
	off := config.DefaultHTTPLimits()
	off.RateLimit = 0
	if c := newClientLimits(off); c != nil {
		t.Fatal("--rate-limit 0 (and no --rate-max-inflight) still tracks clients")
	}
}
