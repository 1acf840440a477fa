package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// hostileLimits are small server limits, so that the table can cross each
// of them quickly.
func hostileLimits(c *config.Config) {
	c.ReadHeaderTimeout = 500 * time.Millisecond
	c.BodyTimeout = 500 * time.Millisecond
	c.MaxHeaderBytes = 8 << 10
}

// rawRequest builds an HTTP/1.1 request by hand, so that the table can
// send what no well-behaved client would.
func rawRequest(method, path, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n", method, path)
	hasLength := false
	for _, h := range headers {
		b.WriteString(h + "\r\n")
		lower := strings.ToLower(h)
		if strings.HasPrefix(lower, "content-length:") || strings.HasPrefix(lower, "transfer-encoding:") {
			hasLength = true
		}
	}
	if !hasLength && body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// sendRaw writes raw on a new connection and reads the answer. A
// connection closed without an answer gives status 0.
func sendRaw(t *testing.T, addr, raw string) (int, http.Header, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(conn, raw) }() // the server may answer before it read everything
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no answer and no close within 20s: %v", err)
		}
		return 0, nil, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// TestHostileRequests sends malformed and malicious requests over a real
// connection to a member served by the binary's http.Server settings
// (api.NewHTTPServer). Each is answered with the expected 4xx and, where
// the API answers (not the Go HTTP server), a JSON error naming the
// problem; none changes the state; and the member serves normally after.
// TestBadInput covers the ordinary validation errors of each route.
func TestHostileRequests(t *testing.T) {
	m := testmember.StartSingleWith(t, hostileLimits)
	addr := m.Cfg.HTTPAddr
	ok(t, "PUT", m.URL+"/v1/jobs/hj", map[string]any{"config": map[string]any{"retained": 2}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/hj/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{
		{"id": "t0", "capabilities": []string{"state", "incremental"}}, {"id": "t1", "capabilities": []string{"input"}}}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/hj/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)

	const (
		json400 = "invalid_json"
		arg400  = "invalid_argument"
	)
	deepArrays := strings.Repeat("[", 100000)
	deepObjects := strings.Repeat(`{"a":`, 100000)
	nested40 := `{"generation":1,"epoch":2,"reason":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`
	bigBody := `{"generation":1,"reason":"` + strings.Repeat("x", 1100<<10) + `"}`
	longID := strings.Repeat("j", 129)
	longKey := "hj/t0/" + strings.Repeat("k", 600)
	cases := []struct {
		name   string
		raw    string
		status int
		// code is the API's error code; "" when the Go HTTP server answers
		// before any handler (its answers are plain text).
		code  wire.Code
		field string
	}{
		// Bodies that are not the JSON they should be.
		{"truncated json", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,"epo`), 400, json400, ""},
		{"100k nested arrays", rawRequest("POST", "/v1/jobs/hj/epochs", deepArrays), 400, json400, ""},
		{"100k nested objects", rawRequest("POST", "/v1/jobs/hj/epochs", deepObjects), 400, json400, ""},
		{"deep nesting inside a valid body", rawRequest("POST", "/v1/jobs/hj/epochs/1/abort", nested40), 400, json400, ""},
		{"number 1e400", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1e400,"epoch":2}`), 400, json400, "generation"},
		{"epoch 2^64", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,"epoch":18446744073709551616}`), 400, json400, "epoch"},
		{"negative generation", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":-1,"epoch":2}`), 400, json400, "generation"},
		{"fractional epoch", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,"epoch":2.5}`), 400, json400, "epoch"},
		{"epoch as a string", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,"epoch":"2"}`), 400, json400, "epoch"},
		{"tasks as an object", rawRequest("POST", "/v1/jobs/hj/attempts", `{"attempt_id":"a2","tasks":{"id":"t0"}}`), 400, json400, "tasks"},
		{"body is an array", rawRequest("POST", "/v1/jobs/hj/epochs", `[{"generation":1,"epoch":2}]`), 400, json400, ""},
		{"body is a string", rawRequest("PUT", "/v1/jobs/hj", `"retained"`), 400, json400, ""},
		{"duplicate key", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,"epoch":2,"epoch":3}`), 400, json400, "epoch"},
		{"duplicate nested key", rawRequest("PUT", "/v1/jobs/hj", `{"config":{"retained":1,"retained":9}}`), 400, json400, "config.retained"},
		{"unknown nested field", rawRequest("PUT", "/v1/jobs/hj", `{"config":{"retaind":1}}`), 400, "unknown_field", "retaind"},
		{"invalid UTF-8 in a string", rawRequest("POST", "/v1/jobs/hj/epochs/1/abort", "{\"generation\":1,\"reason\":\"\xff\xfe\"}"), 400, json400, ""},
		{"overlong UTF-8 in a string", rawRequest("POST", "/v1/jobs/hj/epochs/1/abort", "{\"generation\":1,\"reason\":\"\xc0\xaf\"}"), 400, json400, ""},
		{"byte order mark", rawRequest("POST", "/v1/jobs/hj/epochs", "\xef\xbb\xbf{\"generation\":1,\"epoch\":2}"), 400, json400, ""},
		{"NUL outside strings", rawRequest("POST", "/v1/jobs/hj/epochs", "{\"generation\":1,\x00\"epoch\":2}"), 400, json400, ""},
		{"escaped NUL in an id", rawRequest("POST", "/v1/jobs/hj/attempts", `{"attempt_id":"a\u0000b","tasks":[{"id":"t0","capabilities":[]}]}`), 400, arg400, "attempt_id"},
		{"RTL override in a task id", rawRequest("POST", "/v1/jobs/hj/attempts", `{"attempt_id":"a2","tasks":[{"id":"t\u202e0","capabilities":[]}]}`), 400, arg400, "tasks[].id"},
		{"form body", rawRequest("POST", "/v1/jobs/hj/epochs", "generation=1&epoch=2", "Content-Type: application/x-www-form-urlencoded"), 400, json400, ""},
		{"gzip body the API does not decode", rawRequest("POST", "/v1/jobs/hj/epochs", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", "Content-Encoding: gzip"), 400, json400, ""},

		// Ids in paths.
		{"NUL in a job id", rawRequest("GET", "/v1/jobs/h%00j", ""), 400, arg400, "job"},
		{"RTL override in a job id", rawRequest("GET", "/v1/jobs/%E2%80%AEjh", ""), 400, arg400, "job"},
		{"homoglyph job id", rawRequest("GET", "/v1/jobs/h%D1%98", ""), 400, arg400, "job"},
		{"overlong UTF-8 in a job id", rawRequest("GET", "/v1/jobs/%C0%AE%C0%AE", ""), 400, arg400, "job"},
		{"invalid UTF-8 in a job id", rawRequest("GET", "/v1/jobs/hj%FF", ""), 400, arg400, "job"},
		{"encoded slash in a job id", rawRequest("GET", "/v1/jobs/hj%2Fx", ""), 400, arg400, "job"},
		{"dot-dot job id", rawRequest("GET", "/v1/jobs/..", ""), 400, arg400, "job"},
		{"129-byte job id", rawRequest("PUT", "/v1/jobs/"+longID, `{}`), 400, arg400, "job"},
		{"encoded dot-dot task id", rawRequest("PUT", "/v1/jobs/hj/epochs/1/acks/.%2E", `{"generation":1}`), 400, arg400, "task"},
		{"negative epoch in a path", rawRequest("GET", "/v1/jobs/hj/epochs/-1", ""), 400, arg400, "epoch"},
		{"epoch 2^64 in a path", rawRequest("GET", "/v1/jobs/hj/epochs/18446744073709551616", ""), 400, arg400, "epoch"},
		{"index 2^64 in a query", rawRequest("GET", "/v1/jobs/hj/epochs/1?index=18446744073709551616", ""), 400, arg400, "index"},
		{"negative wait", rawRequest("GET", "/v1/jobs/hj/epochs/1?index=1&wait=-1s", ""), 400, arg400, "wait"},

		// Blob keys.
		{"dot-dot blob key", rawRequest("GET", "/v1/blobs/../../etc/passwd", ""), 400, arg400, "key"},
		{"encoded dot-dot object key", rawRequest("PUT", "/v1/objects/hj%2F..%2F..%2Fetc%2Fpasswd", "x"), 400, arg400, "key"},
		{"absolute object key", rawRequest("PUT", "/v1/objects//etc/passwd", "x"), 400, arg400, "key"},
		{"backslashes in an object key", rawRequest("PUT", "/v1/objects/hj%5C..%5Cx", "x"), 400, arg400, "key"},
		{"NUL in an object key", rawRequest("GET", "/v1/objects/hj/t0/a%00b", ""), 400, arg400, "key"},
		{"dot segment in a blob key", rawRequest("GET", "/v1/blobs/hj/./t0", ""), 400, arg400, "key"},
		{"600-byte object key", rawRequest("PUT", "/v1/objects/"+longKey, "x"), 400, arg400, "key"},
		{"object upload without an intent", rawRequest("PUT", "/v1/objects/hj/t0/never-planned", "x"), 404, "not_found", ""},
		{"upload count 2^64", rawRequest("POST", "/v1/jobs/hj/uploads", `{"generation":1,"count":18446744073709551616}`), 400, json400, "count"},
		{"negative upload count", rawRequest("POST", "/v1/jobs/hj/uploads", `{"generation":1,"count":-1}`), 400, arg400, "count"},

		// Limits of size and time, and of the protocol.
		{"headers over MaxHeaderBytes", rawRequest("GET", "/v1/status", "", "X-Pad: "+strings.Repeat("p", 20<<10)), 431, "", ""},
		{"request line over MaxHeaderBytes", rawRequest("GET", "/v1/jobs/"+strings.Repeat("j", 20<<10), ""), 431, "", ""},
		{"body over the limit", rawRequest("POST", "/v1/jobs/hj/epochs/1/abort", bigBody), 413, "body_too_large", ""},
		{"chunked body over the limit", rawRequest("POST", "/v1/jobs/hj/epochs/1/abort", chunked(bigBody), "Transfer-Encoding: chunked"), 413, "body_too_large", ""},
		{"body never finished", rawRequest("POST", "/v1/jobs/hj/epochs", `{"generation":1,`, "Content-Length: 500"), 408, "request_timeout", ""},
		{"Content-Length and Transfer-Encoding", rawRequest("POST", "/v1/jobs/hj/epochs", "0\r\n\r\n", "Content-Length: 5", "Transfer-Encoding: chunked"), 400, "", ""},
		{"bad Content-Length", rawRequest("POST", "/v1/jobs/hj/epochs", "", "Content-Length: -5"), 400, "", ""},
		{"no Host header", "GET /v1/status HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "", ""},
		{"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "", ""},
		{"PATCH a job", rawRequest("PATCH", "/v1/jobs/hj", `{}`), 405, "method_not_allowed", ""},
		{"TRACE", rawRequest("TRACE", "/v1/status", ""), 405, "method_not_allowed", ""},
		{"made-up method", rawRequest("FROB", "/v1/jobs/hj/epochs", ""), 405, "method_not_allowed", ""},
	}
	if len(cases) < 40 {
		t.Fatalf("%d cases; the table promises at least 40", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateHash(t, m)
			status, header, body := sendRaw(t, addr, tc.raw)
			if status != tc.status {
				t.Fatalf("status %d (%q), want %d", status, truncate(body), tc.status)
			}
			if tc.code != "" {
				if ct := header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
				var e apiError
				if err := json.Unmarshal(body, &e); err != nil {
					t.Fatalf("body %q is not a JSON error: %v", truncate(body), err)
				}
				if e.Error.Code != tc.code || e.Error.Message == "" || (tc.field != "" && e.Error.Field != tc.field) {
					t.Fatalf("error %+v, want code %s field %q with a message", e.Error, tc.code, tc.field)
				}
			}
			if after := stateHash(t, m); after != before {
				t.Fatal("a refused request changed the state")
			}
		})
	}

	// A client that never finishes its headers is cut by the header
	// timeout: the connection is closed without an answer.
	t.Run("headers never finished", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		rest, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the server kept a connection whose headers never ended")
		}
		if len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 408") {
			t.Fatalf("answer %q to unfinished headers", truncate(rest))
		}
		t.Logf("closed after %s", time.Since(start).Round(time.Millisecond))
	})

	// The member still serves.
	var st struct {
		Leader bool `json:"leader"`
	}
	ok(t, "GET", m.URL+"/v1/jobs/hj", nil, nil)
	ok(t, "GET", m.URL+"/v1/status", nil, &st)
	ok(t, "POST", m.URL+"/v1/jobs/hj/epochs", map[string]any{"generation": 1, "epoch": 2}, nil)
}

func chunked(body string) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(len(body), 4096)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
