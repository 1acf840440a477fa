package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestHeaderLimitExact: a request line and headers of exactly
// --http-max-header-bytes, counted as they stand on the wire, are served;
// one byte more is 431 header_too_large, as JSON; far more is not read at
// all. Found by a mutation audit: the limit off by one, the Host line not
// counted, a repeated header counted once and the server's backstop
// raised survived every API test.
func TestHeaderLimitExact(t *testing.T) {
	m := testmember.StartSingleWith(t, hostileLimits)
	addr := strings.TrimPrefix(m.URL, "http://")
	limit := m.Cfg.MaxHeaderBytes
	raw := func(extra int) string {
		head := "GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Pad: \r\n"
		return strings.Replace(head, "X-Pad: ", "X-Pad: "+strings.Repeat("p", limit-len(head)+extra), 1) + "\r\n"
	}
	if n := len(raw(0)) - 2; n != limit {
		t.Fatalf("built %d bytes of headers, want %d", n, limit)
	}
	if status, _, body := sendRaw(t, addr, raw(0)); status != http.StatusOK {
		t.Fatalf("headers of exactly the limit: %d %s", status, body)
	}
	status, _, body := sendRaw(t, addr, raw(1))
	if status != http.StatusRequestHeaderFieldsTooLarge || errorCode(t, string(body)) != string(wire.CodeHeaderTooLarge) {
		t.Fatalf("headers one byte over the limit: %d %s", status, body)
	}
	// The query counts, as part of the request line.
	long := "GET /v1/status?pad=" + strings.Repeat("q", limit) + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
	status, _, body = sendRaw(t, addr, long)
	if status != http.StatusRequestHeaderFieldsTooLarge || errorCode(t, string(body)) != string(wire.CodeHeaderTooLarge) {
		t.Fatalf("a query past the limit: %d %s", status, body)
	}
	// A header repeated counts every time it appears.
	var rep strings.Builder
	rep.WriteString("GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n")
	for range 4 {
		rep.WriteString("X-Rep: " + strings.Repeat("r", limit/3) + "\r\n")
	}
	rep.WriteString("\r\n")
	status, _, body = sendRaw(t, addr, rep.String())
	if status != http.StatusRequestHeaderFieldsTooLarge || errorCode(t, string(body)) != string(wire.CodeHeaderTooLarge) {
		t.Fatalf("a header repeated past the limit: %d %s", status, body)
	}
	// Far above it (five times), the HTTP server stops reading them
	// (it holds at most four times the limit per connection) and answers
	// its own plain-text 431 (docs/openapi.json).
	status, header, body := sendRaw(t, addr, raw(4*limit))
	if status != http.StatusRequestHeaderFieldsTooLarge || strings.HasPrefix(header.Get("Content-Type"), "application/json") {
		t.Fatalf("headers five times the limit: %d %s %.200s", status, header.Get("Content-Type"), body)
	}
}
