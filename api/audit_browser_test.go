package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestBrowserHostAndSiteEdges: the Host check takes a localhost name only
// as "localhost" or a name under ".localhost", and a member's advertised
// name only as that exact name, never a longer name ending with it (which
// another owner of the zone could rebind); a request a browser marks
// Sec-Fetch-Site: same-site, without an Origin (a page of another port
// or subdomain loading a URL), is refused as cross-origin
// (docs/openapi.json, "Browser safety"), and so is a cross-origin GET.
// Host names compare without case, a trailing dot or IPv6 brackets.
// Found by a mutation audit: the suffix checks loosened, same-site or
// cross-origin GETs let through, and names compared raw, survived every
// API test.
func TestBrowserHostAndSiteEdges(t *testing.T) {
	m := testmember.StartSingle(t)
	port := m.URL[strings.LastIndexByte(m.URL, ':'):]
	// A member advertising a name (the record a member of another host
	// writes when it joins).
	if _, _, err := m.Node.Propose(context.Background(), fsm.CmdMemberUpsert,
		&fsm.MemberUpsert{ID: "n2", RaftAddr: "raft1.example.test:7001", HTTPAddr: "db1.example.test:7000"}); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{
		"localhost" + port:            http.StatusOK,
		"LocalHost." + port:           http.StatusOK,
		"[::1]" + port:                http.StatusOK,
		"[::1]":                       http.StatusOK,
		"DB1.Example.Test" + port:     http.StatusOK,
		"raft1.example.test" + port:   http.StatusOK,
		"app.localhost" + port:        http.StatusOK,
		"db1.example.test" + port:     http.StatusOK,
		"notlocalhost" + port:         http.StatusMisdirectedRequest,
		"evildb1.example.test" + port: http.StatusMisdirectedRequest,
		"x.db1.example.test" + port:   http.StatusMisdirectedRequest,
	} {
		status, body := browserRequest(t, "GET", m.URL+"/v1/status", host, "", nil)
		if status != want {
			t.Errorf("Host %s: %d, want %d: %s", host, status, want, body)
		} else if want != http.StatusOK && errorCode(t, body) != string(wire.CodeHostNotAllowed) {
			t.Errorf("Host %s: %s", host, body)
		}
	}
	// A page of another origin reading with fetch: refused, GET or not.
	for _, p := range []string{"/v1/snapshot", "/v1/status"} {
		status, body := browserRequest(t, "GET", m.URL+p, "", "", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"})
		if status != http.StatusForbidden || errorCode(t, body) != string(wire.CodeCrossOrigin) {
			t.Errorf("cross-origin GET %s: %d %.200s", p, status, body)
		}
	}
	for _, site := range []string{"same-site", "cross-site"} {
		status, body := browserRequest(t, "GET", m.URL+"/v1/snapshot", "", "", map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors"})
		if status != http.StatusForbidden || errorCode(t, body) != string(wire.CodeCrossOrigin) {
			t.Errorf("Sec-Fetch-Site: %s without Origin: %d %s", site, status, body)
		}
	}
}

// TestBrowserMarkedBodiesNeedJSON: a body from a browser (any of Origin,
// Sec-Fetch-Site, Sec-Fetch-Mode) must be declared application/json,
// also when it is streamed without a Content-Length (chunked), and
// nothing is applied. Found by a mutation audit: a check ignoring
// Sec-Fetch-Mode, or skipping bodies of unknown length, survived every
// API test.
func TestBrowserMarkedBodiesNeedJSON(t *testing.T) {
	m := testmember.StartSingle(t)
	send := func(job string, chunked bool, headers map[string]string) (int, string) {
		t.Helper()
		body := `{}`
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd)
		}
		req, err := http.NewRequest("PUT", m.URL+"/v1/jobs/"+job, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for name, c := range map[string]struct {
		chunked bool
		headers map[string]string
	}{
		"Sec-Fetch-Mode only, no type":      {false, map[string]string{"Sec-Fetch-Mode": "cors"}},
		"Sec-Fetch-Mode only, form type":    {false, map[string]string{"Sec-Fetch-Mode": "cors", "Content-Type": "application/x-www-form-urlencoded"}},
		"same-origin streamed text/plain":   {true, map[string]string{"Origin": m.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": "text/plain"}},
		"unmarked streamed text/plain":      {true, map[string]string{"Content-Type": "text/plain"}},
		"same-origin streamed without type": {true, map[string]string{"Origin": m.URL, "Sec-Fetch-Site": "same-origin"}},
		"JSON with a malformed parameter":   {false, map[string]string{"Content-Type": "application/json; =x"}},
	} {
		status, body := send("refused", c.chunked, c.headers)
		if status != http.StatusUnsupportedMediaType || errorCode(t, body) != string(wire.CodeUnsupportedMediaType) {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
	expectError(t, do(t, "GET", m.URL+"/v1/jobs/refused", nil), http.StatusNotFound, wire.CodeNotFound, "")
	// Declared JSON (a +json type, parameters), streamed, from the
	// console: applied.
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		if status, body := send("streamed"+strconv.Itoa(i), true, map[string]string{"Origin": m.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": ct}); status != http.StatusOK {
			t.Fatalf("streamed %s from the console: %d %s", ct, status, body)
		}
	}
}

// TestSameOriginOverTLS: served over https, the store's own pages have
// an https origin: a same-origin write from one passes, and the same
// host's http origin (another origin) is refused. Found by a mutation
// audit: taking every request's own origin as http survived every API
// test (none served the API over TLS).
func TestSameOriginOverTLS(t *testing.T) {
	m := testmember.StartSingle(t)
	ts := httptest.NewUnstartedServer(m.Handler())
	ts.StartTLS()
	defer ts.Close()
	send := func(job, origin string) (int, string) {
		req, err := http.NewRequest("PUT", ts.URL+"/v1/jobs/"+job, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if status, body := send("tls", ts.URL); status != http.StatusOK {
		t.Fatalf("same-origin write over https: %d %s", status, body)
	}
	status, body := send("plain", "http://"+strings.TrimPrefix(ts.URL, "https://"))
	if status != http.StatusForbidden || errorCode(t, body) != string(wire.CodeCrossOrigin) {
		t.Fatalf("http origin on the https API: %d %s", status, body)
	}
}
