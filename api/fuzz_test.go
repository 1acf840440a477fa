package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/metastore/metastore/internal/testmember"
)

// fuzzRoutes are the routes whose request bodies the API decodes, with a
// path template: {id} is replaced by the fuzzed path segment. Membership
// changes, leadership transfer, GC runs and snapshot restores are left
// out: an accepted one would change the cluster rather than its data.
var fuzzRoutes = []struct{ method, path string }{
	{"PUT", "/v1/jobs/{id}"},
	{"POST", "/v1/jobs/{id}/attempts"},
	{"POST", "/v1/jobs/{id}/epochs"},
	{"PUT", "/v1/jobs/fz/epochs/2/acks/{id}"},
	{"PUT", "/v1/jobs/fz/epochs/{id}/acks/t0"},
	{"POST", "/v1/jobs/fz/epochs/{id}/abort"},
	{"PUT", "/v1/jobs/fz/epochs/{id}/pin"},
	{"DELETE", "/v1/jobs/fz/epochs/{id}/pin"},
	{"POST", "/v1/jobs/{id}/uploads"},
	{"PUT", "/v1/objects/{id}"},
	{"POST", "/v1/members"},
	{"GET", "/v1/jobs/fz/tasks/{id}/restore"},
}

// FuzzRequestBodies sends arbitrary bodies and path segments to every
// route that decodes a body, through the real handler of a real
// single-member store. No request may panic or fail with a 5xx other than
// a retryable one; every refusal is a 4xx JSON error with a code and a
// message, and changes no state. The member runs without the leader's
// background tasks: an epoch timing out between the two state reads (the
// default ack timeout is 10 minutes, inputs can set 100 ms) would look
// like a change made by a refused request.
func FuzzRequestBodies(f *testing.F) {
	m := testmember.StartSingleQuiet(f)
	h := m.Handler()
	send := func(method, target string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		req.RemoteAddr = "127.0.0.1:9"
		req.Host = "127.0.0.1" // httptest.NewRequest sends example.com, which the Host check refuses
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	setup := []struct{ method, path, body string }{
		{"PUT", "/v1/jobs/fz", `{"config":{"retained":2}}`},
		{"POST", "/v1/jobs/fz/attempts", `{"attempt_id":"a1","tasks":[{"id":"t0","capabilities":["state","incremental"]},{"id":"t1","capabilities":["input"]}]}`},
		{"POST", "/v1/jobs/fz/epochs", `{"generation":1,"epoch":1}`},
		{"PUT", "/v1/jobs/fz/epochs/1/acks/t1", `{"generation":1,"payloads":{"input":"eA=="}}`},
		{"PUT", "/v1/jobs/fz/epochs/1/acks/t0", `{"generation":1,"manifest":{"delta":{}}}`},
		{"POST", "/v1/jobs/fz/epochs", `{"generation":1,"epoch":2}`},
	}
	for _, s := range setup {
		if rec := send(s.method, s.path, []byte(s.body)); rec.Code != http.StatusOK {
			f.Fatalf("%s %s: %d %s", s.method, s.path, rec.Code, rec.Body)
		}
	}
	seeds := []struct {
		route int
		id    string
		body  string
	}{
		{0, "fz2", `{"config":{"retained":3,"ack_timeout":"30s","max_pending":4}}`},
		{1, "fz", `{"attempt_id":"a2","tasks":[{"id":"t0","capabilities":["state"]}]}`},
		{2, "fz", `{"generation":1,"epoch":3}`},
		{3, "t0", `{"generation":1,"manifest":{"delta":{"add_segments":[{"key":"fz/t0/x","offset":0,"length":1,"first_seq":1,"last_seq":1}]},"blobs":[{"key":"fz/t0/x","size":1}]}}`},
		{3, "t1", `{"generation":1,"payloads":{"input":"eQ=="}}`},
		{4, "2", `{"generation":1,"payloads":{"input":"eQ=="}}`},
		{5, "2", `{"generation":1,"reason":"fuzz"}`},
		{6, "1", `{"name":"sp"}`},
		{7, "1", ``},
		{8, "fz", `{"generation":1,"task":"t0","count":2}`},
		{9, "fz/t0/key", `data`},
		{10, "", `{"id":"n2","raft_addr":"","http_addr":"x"}`},
		{11, "t0", ``},
		{2, "fz", `{"generation":1,"epoch":18446744073709551616}`},
		{2, "fz", `{"generation":1,"generation":2,"epoch":3}`},
		{0, "fz", strings.Repeat("[", 1000)},
		{3, "t1", "{\"generation\":1,\"payloads\":{\"input\":\"\xff\"}}"},
	}
	for _, s := range seeds {
		f.Add(uint8(s.route), s.id, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route uint8, id string, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := strings.Replace(rt.path, "{id}", url.PathEscape(id), 1)
		if rt.path == "/v1/members" && !bytes.Contains(body, []byte(`"raft_addr":""`)) {
			// Only requests that cannot add a voter: a second voter that
			// never answers would take the single member's quorum away.
			return
		}
		if _, err := url.ParseRequestURI(target); err != nil {
			return
		}
		_, before, err := m.FSM.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		rec := send(rt.method, target, body)
		if rec.Code == http.StatusOK {
			return
		}
		var e struct {
			Error struct {
				Code      string `json:"code"`
				Message   string `json:"message"`
				Retryable bool   `json:"retryable"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s %s: status %d with a body that is not a JSON error: %q", rt.method, target, rec.Code, rec.Body)
		}
		if rec.Code >= 500 {
			if !e.Error.Retryable {
				t.Fatalf("%s %s: %d %s: %s", rt.method, target, rec.Code, e.Error.Code, e.Error.Message)
			}
			return // the outcome of a retryable failure is open
		}
		if rec.Code < 400 {
			t.Fatalf("%s %s: status %d", rt.method, target, rec.Code)
		}
		if _, after, err := m.FSM.StateHash(); err != nil || after != before {
			t.Fatalf("%s %s refused with %d %s but the state changed (%v)", rt.method, target, rec.Code, e.Error.Code, err)
		}
	})
}
