package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/metastore/metastore/wire"
)

// docOp is one operation of the OpenAPI document.
type docOp struct {
	path, method string
	item         *openapi3.PathItem
	op           *openapi3.Operation
}

// bodyRecorder sends requests to a member, validates every answer (status,
// headers, body) against the operation of the OpenAPI document it belongs
// to, with kin-openapi, and records the statuses seen per operation.
type bodyRecorder struct {
	t     *testing.T
	doc   *openapi3.T
	ops   map[string]docOp
	base  string
	token string
	seen  map[string][]int
}

func loadOpenAPIDoc(t *testing.T) (*openapi3.T, map[string]docOp) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI document is not valid OpenAPI 3: %v", err)
	}
	ops := map[string]docOp{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops[op.OperationID] = docOp{path: path, method: method, item: item, op: op}
		}
	}
	return doc, ops
}

// call sends one request of operation id to target (path and query) and
// returns the answer after validating it.
func (r *bodyRecorder) call(id, target string, body []byte) response {
	r.t.Helper()
	ref, ok := r.ops[id]
	if !ok {
		r.t.Fatalf("no operation %q in the document", id)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(ref.method, r.base+target, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if body != nil {
		ct := "application/json"
		if id == "objects.put" || id == "snapshot.restore" {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", ref.method, target, err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		r.t.Fatal(err)
	}
	route := &routers.Route{Spec: r.doc, Path: ref.path, PathItem: ref.item, Method: ref.method, Operation: ref.op}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(raw)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		shown := raw
		if len(shown) > 2000 {
			shown = shown[:2000]
		}
		r.t.Errorf("%s (%s %s): the %d answer does not match the document: %v\nbody: %s", id, ref.method, target, resp.StatusCode, err, shown)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if rs := ref.op.Responses.Status(resp.StatusCode); rs != nil && rs.Value != nil {
			if mt := rs.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
				var v any
				if json.Unmarshal(raw, &v) == nil {
					for _, path := range undocumented(mt.Schema, v, "") {
						r.t.Errorf("%s (%s %s): the %d answer holds %s, which the document does not name", id, ref.method, target, resp.StatusCode, path)
					}
				}
			}
		}
	}
	r.seen[id] = append(r.seen[id], resp.StatusCode)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// undocumented returns the members of v, a decoded JSON value, that s
// does not name: kin-openapi accepts a member a schema does not list
// unless the schema forbids more, so a field added to an answer and not
// to the document would pass its validation. A schema that names no
// properties (a map) or combines others is not looked into.
func undocumented(s *openapi3.SchemaRef, v any, at string) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := s.Value.Properties
		if len(props) == 0 {
			return nil
		}
		for k, sub := range v {
			p, ok := props[k]
			if !ok {
				out = append(out, at+"."+k)
				continue
			}
			out = append(out, undocumented(p, sub, at+"."+k)...)
		}
	case []any:
		for i, sub := range v {
			out = append(out, undocumented(s.Value.Items, sub, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	return out
}

// ok is call expecting 200, decoding the body into out when not nil.
func (r *bodyRecorder) ok(id, target string, body any, out any) response {
	r.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			r.t.Fatal(err)
		}
	}
	resp := r.call(id, target, raw)
	if resp.status != http.StatusOK {
		r.t.Fatalf("%s %s: %d %s", id, target, resp.status, resp.body)
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			r.t.Fatalf("%s: %v", id, err)
		}
	}
	return resp
}

// TestOpenAPIResponseBodies drives every operation of the document against
// a member running with --auth, through a job's whole life (attempt,
// upload, manifest ack, inline ack, pin, restore plan, verify, GC, tokens,
// backup and restore), and validates every answer against the document
// with kin-openapi: the status is documented for the operation, and the
// headers and body match its schema. Operations a single member can only
// refuse are checked on their documented error answers.
func TestOpenAPIResponseBodies(t *testing.T) {
	doc, ops := loadOpenAPIDoc(t)
	m, op := startAuthSingle(t, nil)
	r := &bodyRecorder{t: t, doc: doc, ops: ops, base: m.URL, token: op, seen: map[string][]int{}}

	r.ok("healthz", "/healthz", nil, nil)
	r.ok("readyz", "/readyz", nil, nil)
	r.ok("metrics", "/metrics", nil, nil)
	var st struct {
		Members []struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
			HTTPAddr string `json:"http_addr"`
		} `json:"members"`
	}
	r.ok("status", "/v1/status", nil, &st)
	r.ok("members.list", "/v1/members", nil, nil)
	r.ok("members.status", "/v1/members/status", nil, nil)
	// Adding the member that is already a voter at its addresses changes
	// nothing (a single member cannot admit one that does not run).
	r.ok("members.add", "/v1/members", map[string]string{"id": st.Members[0].ID, "raft_addr": st.Members[0].RaftAddr, "http_addr": st.Members[0].HTTPAddr}, nil)
	r.ok("state.hash", "/v1/state/hash", nil, nil)

	const job = "bodies"
	jb := "/v1/jobs/" + job
	r.ok("jobs.put", jb, map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "10m"}}, nil)
	r.ok("attempts.start", jb+"/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{
		{"id": "agg", "capabilities": []string{"state", "incremental"}},
		{"id": "src", "capabilities": []string{"input"}},
	}}, nil)
	r.ok("jobs.list", "/v1/jobs", nil, nil)
	r.ok("jobs.get", jb, nil, nil)
	r.ok("attempts.get", jb+"/attempts/1", nil, nil)
	r.ok("attempts.list", jb+"/attempts", nil, nil)
	r.ok("attempts.list", jb+"/attempts?tasks=true&limit=5", nil, nil)

	var slots struct {
		Uploads []wire.Upload `json:"uploads"`
	}
	r.ok("uploads.create", jb+"/uploads", map[string]any{"generation": 1, "task": "agg", "count": 1}, &slots)
	if len(slots.Uploads) != 1 {
		t.Fatalf("uploads: %+v", slots)
	}
	var shared wire.Uploads
	r.ok("uploads.create", jb+"/uploads?shared=true", map[string]any{"generation": 1, "task": "agg", "count": 2}, &shared)
	if shared.Shared == nil || len(shared.Uploads) != 2 {
		t.Fatalf("uploads in the shared form: %+v", shared)
	}
	key := slots.Uploads[0].Key
	// The slot's URL is this API's object endpoint, signed.
	target := strings.TrimPrefix(slots.Uploads[0].URL, m.URL)
	blob := []byte(strings.Repeat("a", 60) + strings.Repeat("b", 40))
	r.ok("objects.put", target, blob, nil)

	r.ok("epochs.begin", jb+"/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)
	r.ok("epochs.ack", jb+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": key, "size": len(blob)}},
		"delta": map[string]any{"add_segments": []map[string]any{{"key": key, "offset": 0, "length": len(blob), "first_seq": 1, "last_seq": 9}}}}}, nil)
	r.ok("epochs.get", jb+"/epochs/1", nil, nil)
	r.ok("epochs.ack", jb+"/epochs/1/acks/src", map[string]any{"generation": 1, "payloads": map[string][]byte{"input": []byte("offset=7")}}, nil)
	// The same ack again in a batch (answered the stored ack) beside one
	// of an epoch never begun (refused in its own result).
	var batch wire.AckBatchAnswer
	r.ok("acks.batch", "/v1/acks", map[string]any{"acks": []map[string]any{
		{"job": job, "epoch": 1, "task": "src", "generation": 1, "payloads": map[string][]byte{"input": []byte("offset=7")}},
		{"job": job, "epoch": 9, "task": "src", "generation": 1},
	}}, &batch)
	if len(batch.Results) != 2 || batch.Results[0].Status != http.StatusOK || batch.Results[1].Status != http.StatusNotFound {
		t.Errorf("batch of a retried ack and one of an epoch never begun: %+v", batch.Results)
	}
	r.ok("epochs.list", jb+"/epochs", nil, nil)
	r.ok("epochs.get", jb+"/epochs/1", nil, nil)
	r.ok("epochs.pin", jb+"/epochs/1/pin", map[string]any{"name": "before-upgrade"}, nil)
	r.ok("tasks.restore", jb+"/tasks/agg/restore", nil, nil)
	r.ok("tasks.restore", jb+"/tasks/agg/restore?pin=before-upgrade", nil, nil)
	r.ok("epochs.manifest", jb+"/epochs/1/manifests/agg", nil, nil)
	r.ok("objects.get", "/v1/objects/"+key+"?offset=60&length=40", nil, nil)
	r.ok("blobs.get", "/v1/blobs/"+key, nil, nil)
	r.ok("blobs.stats", "/v1/blobs", nil, nil)
	r.ok("jobs.verify", jb+"/verify", nil, nil)
	r.ok("fsck", "/v1/fsck", nil, nil)
	r.ok("epochs.unpin", jb+"/epochs/1/pin", nil, nil)
	r.ok("epochs.begin", jb+"/epochs", map[string]any{"generation": 1, "epoch": 2}, nil)
	r.ok("epochs.abort", jb+"/epochs/2/abort", map[string]any{"generation": 1, "reason": "test"}, nil)
	// A job deleted: refused while it has a savepoint, then forced and
	// repeated; its writers are answered 410.
	dj := "/v1/jobs/doomed"
	r.ok("jobs.put", dj, map[string]any{}, nil)
	r.ok("attempts.start", dj+"/attempts", map[string]any{"attempt_id": "d1", "tasks": []map[string]any{{"id": "src", "capabilities": []string{"input"}}}}, nil)
	r.ok("epochs.begin", dj+"/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)
	r.ok("epochs.ack", dj+"/epochs/1/acks/src", map[string]any{"generation": 1, "payloads": map[string][]byte{"input": []byte("offset=1")}}, nil)
	r.ok("epochs.pin", dj+"/epochs/1/pin", map[string]any{"name": "keep"}, nil)
	if resp := r.call("jobs.delete", dj, nil); resp.status != http.StatusConflict || !strings.Contains(string(resp.body), "job_pinned") {
		t.Errorf("delete of a job with a savepoint: %d %s", resp.status, resp.body)
	}
	r.ok("jobs.delete", dj+"?force=true", nil, nil)
	r.ok("jobs.delete", dj, nil, nil)
	if resp := r.call("epochs.begin", dj+"/epochs", []byte(`{"generation": 1, "epoch": 2}`)); resp.status != http.StatusGone {
		t.Errorf("begin of a deleted job: %d %s", resp.status, resp.body)
	}
	r.ok("gc.status", "/v1/gc", nil, nil)
	r.ok("gc.run", "/v1/gc/run?dry_run=true", nil, nil)

	var created struct {
		Secret   string `json:"secret"`
		Accessor string `json:"accessor"`
	}
	r.ok("tokens.create", "/v1/tokens", map[string]any{"role": "worker", "job": job, "description": "bodies"}, &created)
	r.ok("tokens.list", "/v1/tokens", nil, nil)
	// The refusals of auth: no token, and a worker's token on /metrics
	// and on an operator route.
	for _, tok := range []string{"", created.Secret} {
		r.token = tok
		if resp := r.call("metrics", "/metrics", nil); resp.status == http.StatusOK {
			t.Errorf("/metrics with token %q: 200", tok)
		}
		if resp := r.call("fsck", "/v1/fsck", nil); resp.status == http.StatusOK {
			t.Errorf("fsck with token %q: 200", tok)
		}
	}
	r.token = op
	r.ok("tokens.revoke", "/v1/tokens/"+created.Accessor, nil, nil)

	backup := r.ok("snapshot.save", "/v1/snapshot", nil, nil).body
	r.ok("snapshot.restore", "/v1/snapshot", backup, nil)

	// Error answers, validated like the others: a single member has no
	// other voter to hand leadership to, and no member n9 to remove.
	if resp := r.call("leader.transfer", "/v1/leader/transfer", []byte("{}")); resp.status == http.StatusOK {
		t.Errorf("leader.transfer on a single member: %d %s", resp.status, resp.body)
	}
	if resp := r.call("members.remove", "/v1/members/n9", nil); resp.status == http.StatusOK {
		t.Errorf("members.remove of an unknown member: %d %s", resp.status, resp.body)
	}
	// A few refusals of the common kinds.
	r.call("jobs.get", "/v1/jobs/nope", nil)
	r.call("epochs.begin", jb+"/epochs", []byte(`{"generation": 1, "epoch": 1, "extra": true}`))
	r.call("epochs.get", jb+"/epochs/notanumber", nil)

	// Every operation of the document was answered at least once, and
	// with 200 unless it is one of the two above.
	var missing []string
	for id := range ops {
		statuses := r.seen[id]
		if len(statuses) == 0 {
			missing = append(missing, id)
			continue
		}
		if id == "leader.transfer" || id == "members.remove" {
			continue
		}
		if !containsInt(statuses, http.StatusOK) {
			missing = append(missing, fmt.Sprintf("%s (no 200: %v)", id, statuses))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations without a validated answer: %v", missing)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
