package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestRateLimitedCallsWaitRetryAfter: a member that rate-limits the client
// (one request per second) answers 429 with Retry-After; the client
// retries after that wait, not after its own few-millisecond backoff, so
// every call succeeds within three attempts.
func TestRateLimitedCallsWaitRetryAfter(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 1
		c.RateBurst = 1
	})
	c := proxiedClient(t, 3, m.URL)
	ctx := ctxT(t)
	before := c.Stats()
	for _, job := range []string{"r1", "r2", "r3"} {
		if _, err := c.PutJob(ctx, job, wire.JobConfig{}); err != nil {
			t.Fatalf("PutJob %s: %v", job, err)
		}
	}
	if d := c.Stats().Sub(before); d.Retries < 2 {
		t.Fatalf("%d retries for three calls at one request per second; the member did not limit the client", d.Retries)
	}
}

// TestRateLimitedIsADefiniteRefusal: a mutation answered 429 every time
// ends with a RetryError whose outcome is known (nothing was done), and
// the client honours Retry-After between the attempts.
func TestRateLimitedIsADefiniteRefusal(t *testing.T) {
	var calls atomic.Int64
	var first, last atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UnixNano()
		if calls.Add(1) == 1 {
			first.Store(now)
		}
		last.Store(now)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"code":"rate_limited","message":"slow down","retryable":true}}`))
	}))
	defer srv.Close()
	c := proxiedClient(t, 2, srv.URL)
	_, err := c.PutJob(ctxT(t), "j", wire.JobConfig{})
	var re *client.RetryError
	if !errors.As(err, &re) || re.Unknown {
		t.Fatalf("error %v (%T), want a RetryError with a known outcome", err, err)
	}
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("error %v does not match ErrUnavailable", err)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != wire.CodeRateLimited || ae.RetryAfter != time.Second {
		t.Fatalf("last error %+v, want rate_limited with RetryAfter 1s", ae)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	if gap := time.Duration(last.Load() - first.Load()); gap < time.Second {
		t.Fatalf("retried after %s, before the member's Retry-After of 1s", gap)
	}
}
