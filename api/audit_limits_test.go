package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
)

// TestAckBatchAboveTheBurst: a batch of more acks than the client's
// burst is charged the whole burst, not refused for ever (a bucket never
// holds more than its burst); the client's next request is then over its
// rate. Found by a mutation audit: charging the batch uncapped survived
// every API test.
func TestAckBatchAboveTheBurst(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s
		c.RateBurst = 5
	})
	c := clientFrom("127.0.0.5")
	var acks []any
	for i := range 8 {
		acks = append(acks, batchItem("nojob", 1, fmt.Sprintf("t%d", i), 1, nil))
	}
	body, _ := json.Marshal(map[string]any{"acks": acks})
	req, _ := http.NewRequest("POST", m.URL+"/v1/acks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a batch of 8 acks with a burst of 5: %d", resp.StatusCode)
	}
	if status, _, body := get(t, c, m.URL+"/v1/jobs"); status != http.StatusTooManyRequests {
		t.Fatalf("the request after the batch: %d %s", status, body)
	}
}

// TestRateLimitAcrossConnections: a client is its address, not its
// connection: one that opens a new connection for every request is
// limited as one that keeps its connection. Found by a mutation audit:
// keying the limit by the remote address with its port survived every
// API test (their clients keep their connections alive).
func TestRateLimitAcrossConnections(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s
		c.RateBurst = 3
	})
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.6")}, Timeout: 5 * time.Second}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 30 * time.Second}
	limited := 0
	for range 8 {
		if status, _, _ := get(t, c, m.URL+"/v1/jobs"); status == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 4 {
		t.Fatalf("8 requests on 8 connections with a burst of 3: %d refused", limited)
	}
}

// TestAckBatchOfTwoCountsTwice: a batch of two acks counts as two
// requests: with a burst of 3, the second such batch is over the rate.
// Found by a mutation audit: charging batches of two as one request
// survived every API test (their batches were larger).
func TestAckBatchOfTwoCountsTwice(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s
		c.RateBurst = 3
	})
	c := clientFrom("127.0.0.7")
	body, _ := json.Marshal(map[string]any{"acks": []any{batchItem("nojob", 1, "a", 1, nil), batchItem("nojob", 1, "b", 1, nil)}})
	post := func() int {
		req, _ := http.NewRequest("POST", m.URL+"/v1/acks", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post(); s != http.StatusOK {
		t.Fatalf("first batch of 2 with a burst of 3: %d", s)
	}
	if s := post(); s != http.StatusTooManyRequests {
		t.Fatalf("second batch of 2 with 1 token left: %d, want 429", s)
	}
}

// TestRetryAfterAtLeastOneSecond: a client over a fast rate waits less
// than a second for its next token, and is told Retry-After: 1, never 0
// (which asks for an immediate retry). Found by a mutation audit:
// rounding the wait down survived every API test (their rates were
// slower than one a second).
func TestRetryAfterAtLeastOneSecond(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 20
		c.RateBurst = 1
	})
	c := clientFrom("127.0.0.8")
	for range 200 {
		status, header, body := get(t, c, m.URL+"/v1/jobs")
		if status != http.StatusTooManyRequests {
			continue
		}
		if header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q on a wait under a second: %s", header.Get("Retry-After"), body)
		}
		return
	}
	t.Skip("no request was refused: this machine is slower than 20 requests a second")
}
