package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/metastore/metastore/internal/testmember"
)

// TestOpenAPIErrorAnswers sends every operation of the document requests
// it must refuse (no token; bad path variables, queries and bodies; unknown
// resources; rule violations) and validates each answer against the
// document with kin-openapi, like TestOpenAPIResponseBodies does for the
// successes: the status must be documented for the operation and the body
// must be the Error schema. Every operation but /healthz and /readyz must
// have had an error answer validated. The answers outside any operation
// (405 for a method a path does not serve, 431 for oversized headers) are
// checked against the Error schema too.
func TestOpenAPIErrorAnswers(t *testing.T) {
	doc, ops := loadOpenAPIDoc(t)
	m, op := startAuthSingle(t, nil)
	r := &bodyRecorder{t: t, doc: doc, ops: ops, base: m.URL, token: op, seen: map[string][]int{}}

	// Without a token every route but the probes answers 401.
	r.token = ""
	for _, id := range sortedOps(ops) {
		ref := ops[id]
		if id == "healthz" || id == "readyz" {
			continue
		}
		target := strings.NewReplacer("{job}", "j", "{task}", "t", "{epoch}", "1", "{generation}", "1",
			"{id}", "n9", "{key}", "j/t/k", "{accessor}", "0123456789abcdef").Replace(ref.path)
		var body []byte
		if ref.method == http.MethodPost || ref.method == http.MethodPut {
			body = []byte(`{}`)
		}
		if resp := r.call(id, target, body); resp.status != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d %s", id, resp.status, resp.body)
		}
	}
	r.token = op

	const job = "errs"
	jb := "/v1/jobs/" + job
	r.ok("jobs.put", jb, map[string]any{"config": map[string]any{"retained": 1}}, nil)
	r.ok("attempts.start", jb+"/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{
		{"id": "src", "capabilities": []string{"input"}}, {"id": "map", "capabilities": []string{}}}}, nil)
	r.ok("epochs.begin", jb+"/epochs", map[string]any{"generation": 1, "epoch": 5}, nil)
	var st struct {
		Members []struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
		} `json:"members"`
	}
	r.ok("status", "/v1/status", nil, &st)
	closed := testmember.FreePort(t)

	cases := []struct {
		id, target, body string
		status           int
	}{
		{"members.add", "/v1/members", `{"id": "zz", "raft_addr": "not-an-addr", "http_addr": "127.0.0.1:2"}`, 400},
		{"members.add", "/v1/members", `[{"id": "zz"}]`, 400},
		{"members.add", "/v1/members", `{"id": "zz", "raft_addr": "` + closed + `", "http_addr": "127.0.0.1:2"}`, 409},
		{"members.add", "/v1/members", `{"id": "zz", "raft_addr": "` + st.Members[0].RaftAddr + `", "http_addr": "127.0.0.1:2"}`, 409},
		{"members.remove", "/v1/members/n9", "", 404},
		{"members.remove", "/v1/members/bad%20id", "", 400},
		{"leader.transfer", "/v1/leader/transfer", `{}`, 409},
		{"jobs.list", "/v1/jobs?consistency=strong", "", 400},
		{"jobs.list", "/v1/jobs?index=x", "", 400},
		{"jobs.put", jb, `{"config": {"retained": "two"}}`, 400},
		{"jobs.put", jb, `{"config": {}, "extra": 1}`, 400},
		{"jobs.get", "/v1/jobs/nope", "", 404},
		{"jobs.delete", "/v1/jobs/nope", "", 404},
		{"jobs.delete", jb + "?force=maybe", "", 400},
		{"jobs.get", jb + "?consistency=strong", "", 400},
		{"attempts.start", jb + "/attempts", `{"attempt_id": "a2", "tasks": [{"id": "x"}]}`, 400},
		{"attempts.start", "/v1/jobs/nope/attempts", `{"attempt_id": "a1", "tasks": [{"id": "x", "capabilities": []}]}`, 404},
		{"attempts.start", jb + "/attempts", `{"attempt_id": "a1", "tasks": [{"id": "other", "capabilities": []}]}`, 409},
		{"attempts.get", jb + "/attempts/9", "", 404},
		{"attempts.get", jb + "/attempts/x", "", 400},
		{"epochs.begin", jb + "/epochs", `{"generation": 1, "epoch": 9223372036854775808}`, 400},
		{"epochs.begin", jb + "/epochs", `{"generation": 1, "epoch": 18446744073709551616}`, 400},
		{"epochs.begin", jb + "/epochs", `{"generation": 1, "epoch": 3}`, 409},
		{"epochs.begin", "/v1/jobs/nope/epochs", `{"generation": 1, "epoch": 1}`, 404},
		{"epochs.list", jb + "/epochs?state=odd", "", 400},
		{"epochs.list", "/v1/jobs/nope/epochs", "", 404},
		{"epochs.get", jb + "/epochs/9223372036854775808", "", 400},
		{"epochs.get", jb + "/epochs/77", "", 404},
		{"epochs.ack", jb + "/epochs/5/acks/map", `{"generation": 1}`, 409},
		{"epochs.ack", jb + "/epochs/5/acks/ghost", `{"generation": 1}`, 409},
		{"epochs.ack", jb + "/epochs/5/acks/src", `{"generation": 1, "payloads": {"weird": ""}}`, 400},
		{"epochs.ack", jb + "/epochs/77/acks/src", `{"generation": 1}`, 404},
		{"epochs.abort", jb + "/epochs/77/abort", `{"generation": 1}`, 404},
		{"epochs.abort", jb + "/epochs/x/abort", `{"generation": 1}`, 400},
		{"epochs.pin", jb + "/epochs/5/pin", `{"name": "p"}`, 409},
		{"epochs.pin", jb + "/epochs/5/pin", `{"name": "bad name"}`, 400},
		{"epochs.unpin", jb + "/epochs/77/pin", "", 404},
		{"tasks.restore", jb + "/tasks/src/restore?epoch=1&pin=p", "", 400},
		{"tasks.restore", "/v1/jobs/nope/tasks/src/restore", "", 404},
		{"epochs.manifest", jb + "/epochs/77/manifests/src", "", 404},
		{"epochs.manifest", jb + "/epochs/x/manifests/src", "", 400},
		{"jobs.verify", "/v1/jobs/nope/verify", "", 404},
		{"uploads.create", jb + "/uploads", `{"generation": 1, "task": "src", "count": -1}`, 400},
		{"uploads.create", "/v1/jobs/nope/uploads", `{"generation": 1, "task": "src", "count": 1}`, 404},
		{"objects.put", "/v1/objects/errs/src/never-planned", `x`, 404},
		{"objects.get", "/v1/objects/errs/src/none", "", 404},
		{"blobs.get", "/v1/blobs/errs/src/none", "", 404},
		{"blobs.get", "/v1/blobs/../etc", "", 400},
		{"blobs.stats", "/v1/blobs?consistency=strong", "", 400},
		{"fsck", "/v1/fsck?consistency=strong", "", 400},
		{"gc.status", "/v1/gc?consistency=strong", "", 400},
		{"gc.run", "/v1/gc/run?dry_run=maybe", "", 400},
		{"snapshot.save", "/v1/snapshot?consistency=strong", "", 400},
		{"snapshot.restore", "/v1/snapshot", `not a backup`, 400},
		{"tokens.create", "/v1/tokens", `{"role": "king"}`, 400},
		{"tokens.list", "/v1/tokens?consistency=strong", "", 400},
		{"tokens.revoke", "/v1/tokens/0123456789abcdef", "", 404},
		{"state.hash", "/v1/state/hash", "", 200},
		{"members.status", "/v1/members/status", "", 200},
		{"members.list", "/v1/members", "", 200},
	}
	for _, c := range cases {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		if resp := r.call(c.id, c.target, body); resp.status != c.status {
			t.Errorf("%s %s %s: %d, want %d: %s", c.id, c.target, c.body, resp.status, c.status, resp.body)
		}
	}
	// A worker token on operator routes: 403.
	var created struct {
		Secret string `json:"secret"`
	}
	r.ok("tokens.create", "/v1/tokens", map[string]any{"role": "worker", "job": job}, &created)
	r.token = created.Secret
	for _, c := range []struct{ id, target string }{{"fsck", "/v1/fsck"}, {"metrics", "/metrics"}, {"state.hash", "/v1/state/hash"}, {"blobs.stats", "/v1/blobs"}} {
		if resp := r.call(c.id, c.target, nil); resp.status != http.StatusForbidden {
			t.Errorf("%s with a worker token: %d %s", c.id, resp.status, resp.body)
		}
	}
	r.token = op

	var missing []string
	for _, id := range sortedOps(ops) {
		if id == "healthz" || id == "readyz" {
			continue
		}
		refused := false
		for _, s := range r.seen[id] {
			refused = refused || s >= 400
		}
		if !refused {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("operations without a validated error answer: %v", missing)
	}

	// Answers outside any operation are Error bodies too.
	errSchema := doc.Components.Schemas["Error"].Value
	checkError := func(what string, resp response, status int) {
		t.Helper()
		if resp.status != status {
			t.Errorf("%s: %d, want %d: %s", what, resp.status, status, resp.body)
			return
		}
		var v any
		if err := json.Unmarshal(resp.body, &v); err != nil {
			t.Errorf("%s: the answer is not JSON: %q", what, resp.body)
			return
		}
		if err := errSchema.VisitJSON(v); err != nil {
			t.Errorf("%s: the answer is not an Error: %v\n%s", what, err, resp.body)
		}
	}
	resp := doTok(t, "PATCH", m.URL+jb, op, nil)
	checkError("PATCH on a job", resp, http.StatusMethodNotAllowed)
	if resp.header.Get("Allow") != "GET, PUT, DELETE" {
		t.Errorf("405 Allow %q", resp.header.Get("Allow"))
	}
	req, _ := http.NewRequest("GET", m.URL+"/v1/status", nil)
	req.Header.Set("X-Pad", strings.Repeat("p", m.Cfg.MaxHeaderBytes+1))
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4096)
	n, _ := hr.Body.Read(raw)
	hr.Body.Close()
	checkError(fmt.Sprintf("headers of %d bytes", m.Cfg.MaxHeaderBytes+1), response{status: hr.StatusCode, header: hr.Header, body: raw[:n]}, http.StatusRequestHeaderFieldsTooLarge)
}

func sortedOps(ops map[string]docOp) []string {
	ids := make([]string, 0, len(ops))
	for id := range ops {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
