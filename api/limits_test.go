package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (127.0.0.0/8 is all loopback), so one test can be several
// clients as the server tells them apart.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
}

func get(t *testing.T, c *http.Client, url string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// TestRateLimitPerClient: a client flooding the member is answered 429
// rate_limited with a Retry-After while another client's requests keep
// succeeding; requests forwarded by a member (from a member's address) are
// not counted, the forwarding header from anywhere else is, and so is a
// request from a member's address without the header; the
// rejections are counted by reason.
func TestRateLimitPerClient(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s: a slow machine cannot refill the bucket between requests
		c.RateBurst = 5
	})
	flooder, worker, spoofer := clientFrom("127.0.0.2"), clientFrom("127.0.0.1"), clientFrom("127.0.0.3")
	url := m.URL + "/v1/jobs"

	limited := 0
	for i := 0; i < 40; i++ {
		status, header, body := get(t, flooder, url)
		if status == http.StatusOK {
			continue
		}
		if status != http.StatusTooManyRequests {
			t.Fatalf("flooder: status %d: %s", status, body)
		}
		limited++
		var e apiError
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != wire.CodeRateLimited || !e.Error.Retryable || e.Error.Message == "" {
			t.Fatalf("429 body %s is not a retryable rate_limited error", body)
		}
		if s, err := strconv.Atoi(header.Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("Retry-After %q", header.Get("Retry-After"))
		}
		// While the flooder is refused, the worker is served.
		if status, _, body := get(t, worker, url); status != http.StatusOK {
			t.Fatalf("worker refused while another client floods: %d %s", status, body)
		}
		if limited == 3 {
			break
		}
	}
	if limited < 3 {
		t.Fatalf("flooder limited %d times in 40 requests at 0.5/s with burst 5", limited)
	}

	// The forwarding header from an address that is no member's changes
	// nothing: the spoofer is limited like anyone.
	spoofLimited := false
	for i := 0; i < 20 && !spoofLimited; i++ {
		status, _, _ := get(t, spoofer, url, api.HeaderForwardedBy, "n9")
		spoofLimited = status == http.StatusTooManyRequests
	}
	if !spoofLimited {
		t.Fatal("a client sending the forwarding header from a non-member address is not limited")
	}
	// From the member's own address it marks a forwarded request: the
	// forwarding member counted it against its client already.
	for i := 0; i < 20; i++ {
		if status, _, body := get(t, worker, url, api.HeaderForwardedBy, "n2"); status != http.StatusOK {
			t.Fatalf("forwarded request %d refused: %d %s", i, status, body)
		}
	}
	// Without the header, a client at the member's own address (a
	// process on the member's host) is limited like anyone.
	workerLimited := false
	for i := 0; i < 20 && !workerLimited; i++ {
		status, _, _ := get(t, worker, url)
		workerLimited = status == http.StatusTooManyRequests
	}
	if !workerLimited {
		t.Fatal("a client at the member's address, without the forwarding header, is not limited")
	}
	// Probes are never limited.
	for i := 0; i < 20; i++ {
		if status, _, _ := get(t, flooder, m.URL+"/healthz"); status != http.StatusOK {
			t.Fatalf("healthz refused: %d", status)
		}
	}

	_, _, metrics := get(t, clientFrom("127.0.0.9"), m.URL+"/metrics")
	line := `metastore_http_rejections_total{reason="rate_limited"} `
	i := strings.Index(string(metrics), line)
	if i < 0 {
		t.Fatalf("no %s in /metrics", line)
	}
	n, _ := strconv.Atoi(strings.Fields(string(metrics[i+len(line):]))[0])
	if n < 4 {
		t.Fatalf("rate_limited rejections counted %d, want at least 4", n)
	}
}

// TestInFlightLimitPerClient: with --rate-max-inflight 1, a client with a
// blocking query in progress is refused a second request, another client
// is not, and the first is admitted again once its query ends.
func TestInFlightLimitPerClient(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.MaxInFlight = 1 })
	ok(t, "PUT", m.URL+"/v1/jobs/f", map[string]any{"config": map[string]any{}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/f/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{{"id": "s", "capabilities": []string{"input"}}}}, nil)
	r := ok(t, "POST", m.URL+"/v1/jobs/f/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)

	busy, other := clientFrom("127.0.0.5"), clientFrom("127.0.0.6")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		status int
		index  uint64
	}
	done := make(chan answer, 1)
	// hold starts a blocking query on the epoch past index. A write the
	// test does not make (the member's own record after its election) can
	// end it at once: then it is started again past the new index.
	hold := func(index uint64) {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/jobs/f/epochs/1?index=%d&wait=1m", m.URL, index), nil)
			resp, err := busy.Do(req)
			if err != nil {
				done <- answer{}
				return
			}
			resp.Body.Close()
			idx, _ := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
			done <- answer{resp.StatusCode, idx}
		}()
	}
	index := r.index()
	hold(index)
	waitFor(t, 10*time.Second, "the blocking query to hold the client's slot", func() bool {
		select {
		case a := <-done:
			switch a.status {
			case http.StatusOK:
				index = a.index
			case http.StatusTooManyRequests:
				// This loop's own probe held the slot when it arrived.
			default:
				t.Fatalf("blocking query: status %d", a.status)
			}
			hold(index)
			return false
		default:
		}
		status, _, _ := get(t, busy, m.URL+"/v1/jobs/f")
		return status == http.StatusTooManyRequests
	})
	if status, _, body := get(t, other, m.URL+"/v1/jobs/f"); status != http.StatusOK {
		t.Fatalf("another client refused: %d %s", status, body)
	}
	// The ack ends the blocking query, which frees the slot.
	ok(t, "PUT", m.URL+"/v1/jobs/f/epochs/1/acks/s", map[string]any{"generation": 1, "payloads": map[string][]byte{"input": []byte("x")}}, nil)
	if a := <-done; a.status != http.StatusOK {
		t.Fatalf("blocking query: status %d", a.status)
	}
	if status, _, body := get(t, busy, m.URL+"/v1/jobs/f"); status != http.StatusOK {
		t.Fatalf("client refused after its query ended: %d %s", status, body)
	}
}

// TestSlowClientsDoNotStarve: clients that never finish their headers or
// their bodies are cut by the server's timeouts while other clients are
// served throughout, and a blocking query outlives the body timeout.
func TestSlowClientsDoNotStarve(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.ReadHeaderTimeout = time.Second
		c.BodyTimeout = time.Second
	})
	addr := m.Cfg.HTTPAddr
	ok(t, "PUT", m.URL+"/v1/jobs/s", map[string]any{"config": map[string]any{}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/s/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{{"id": "s", "capabilities": []string{"input"}}}}, nil)
	r := ok(t, "POST", m.URL+"/v1/jobs/s/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)
	before := stateHash(t, m)

	const slow = 30
	type outcome struct {
		kind   string
		answer string
		err    error
	}
	results := make(chan outcome, 2*slow)
	var conns []net.Conn
	var mu sync.Mutex
	start := func(kind, partial string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		conns = append(conns, conn)
		mu.Unlock()
		if _, err := io.WriteString(conn, partial); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			line, err := bufio.NewReader(conn).ReadString('\n')
			results <- outcome{kind, line, err}
		}()
	}
	for i := 0; i < slow; i++ {
		start("headers", "POST /v1/jobs/s/epochs HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
		start("body", "POST /v1/jobs/s/epochs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 200\r\n\r\n{\"generation\":1,")
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	// Others are served while the slow clients hold their connections.
	for i := 0; i < 20; i++ {
		ok(t, "GET", m.URL+"/v1/jobs/s", nil, nil)
	}
	// A blocking query with a wait longer than the body timeout answers
	// at the end of its wait, not cut by the read deadline.
	t0 := time.Now()
	ok(t, "GET", fmt.Sprintf("%s/v1/jobs/s/epochs/1?index=%d&wait=2500ms", m.URL, r.index()), nil, nil)
	if waited := time.Since(t0); waited < 2400*time.Millisecond {
		t.Fatalf("blocking query answered after %s, before its 2.5s wait", waited)
	}

	for i := 0; i < 2*slow; i++ {
		o := <-results
		if ne, ok := o.err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: a slow client was not cut within 20s", o.kind)
		}
		switch o.kind {
		case "headers":
			if o.answer != "" && !strings.HasPrefix(o.answer, "HTTP/1.1 408") {
				t.Fatalf("client that never finished its headers got %q", o.answer)
			}
		case "body":
			if !strings.HasPrefix(o.answer, "HTTP/1.1 408") {
				t.Fatalf("client that never finished its body got %q (%v), want a 408", o.answer, o.err)
			}
		}
	}
	if after := stateHash(t, m); after != before {
		t.Fatal("slow clients changed the state")
	}
	ok(t, "POST", m.URL+"/v1/jobs/s/epochs", map[string]any{"generation": 1, "epoch": 2}, nil)
}

// TestRouteDeadlines: the transfer routes get the transfer timeout for
// their bodies and the long routes MaxWait on top of the write timeout,
// although both are set after the router matched them (limit sets the
// ordinary ones first). An upload whose body comes in two halves further
// apart than the body timeout is stored; a blocking query that waits longer
// than the write timeout is answered. (TestHostileRequests: an ordinary
// route's slow body is refused.)
func TestRouteDeadlines(t *testing.T) {
	const ordinary = 300 * time.Millisecond
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.BodyTimeout, c.WriteTimeout, c.TransferTimeout = ordinary, ordinary, 30*time.Second
	})
	j := createJob(t, m.URL, "d", []taskSpec{{ID: "agg", Caps: []string{"state"}}})
	var ua uploadsAnswer
	ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": 1}, &ua)

	// slowBody sends half, then the rest 3 body timeouts later.
	slowBody := func(body string) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, body[:len(body)/2])
			<-time.After(3 * ordinary) // pacing the client, not waiting for the server
			_, _ = io.WriteString(pw, body[len(body)/2:])
			pw.Close()
		}()
		return pr
	}
	send := func(method, url, body string) (int, string, error) {
		req, err := http.NewRequest(method, url, slowBody(body))
		if err != nil {
			return 0, "", err
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), nil
	}
	if status, raw, err := send("PUT", ua.Uploads[0].URL, strings.Repeat("x", 1000)); err != nil || status != http.StatusOK {
		t.Fatalf("a slow upload on a transfer route: %d %s %v", status, raw, err)
	}

	// A blocking query on the job that nothing changes: it answers after
	// its wait, past the write timeout.
	var jb struct {
		ModifyIndex uint64 `json:"modify_index"`
	}
	r := ok(t, "GET", j.base, nil, &jb)
	index := r.header.Get("X-Metastore-Index")
	start := time.Now()
	resp := do(t, "GET", j.base+"?index="+index+"&wait=1s", nil)
	if resp.status != http.StatusOK || time.Since(start) < 3*ordinary {
		t.Fatalf("blocking query: %d after %v: %s", resp.status, time.Since(start), resp.body)
	}
}

// TestAnswersIndentedForPeople: answers are compact for programs and
// indented for curl, wget, browsers and ?pretty.
func TestAnswersIndentedForPeople(t *testing.T) {
	m := startSingle(t)
	get := func(ua, query string) string {
		req, err := http.NewRequest("GET", m.URL+"/v1/status"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ua != "" {
			req.Header.Set("User-Agent", ua)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	for _, c := range []struct {
		ua, query string
		indented  bool
	}{
		{"", "", false}, {"metastore-client", "", false}, {"curl/8.5.0", "", true}, {"Wget/1.21", "", true},
		{"Mozilla/5.0 (X11)", "", true}, {"", "?pretty", true}, {"", "?pretty=1", true}, {"curl/8.5.0", "?pretty=false", false},
	} {
		body := get(c.ua, c.query)
		if got := strings.Contains(body, "\n  \""); got != c.indented || !json.Valid([]byte(body)) {
			t.Errorf("User-Agent %q, query %q: indented %v, want %v: %.80s", c.ua, c.query, got, c.indented, body)
		}
	}
}
