package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestEpochBeyondInt64Refused: epochs above 2^63-1 (the int64 of the
// OpenAPI document) are refused with 400 naming the field, in the body and
// in the path, and the job goes on beginning epochs. Before, 2^63 and
// 2^64-1 were accepted and every later begin answered 409
// epoch_not_increasing.
func TestEpochBeyondInt64Refused(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "big", []taskSpec{{ID: "src", Caps: []string{"input"}}})
	for body, code := range map[string]wire.Code{
		`{"generation": 1, "epoch": 9223372036854775808}`:  "invalid_argument",
		`{"generation": 1, "epoch": 18446744073709551615}`: "invalid_argument",
		`{"generation": 1, "epoch": 18446744073709551616}`: "invalid_json",
	} {
		r := do(t, "POST", j.base+"/epochs", body)
		expectError(t, r, http.StatusBadRequest, code, "epoch")
		if strings.Contains(string(r.body), "uint64") {
			t.Errorf("%s: the message names a Go type: %s", body, r.body)
		}
	}
	expectError(t, do(t, "GET", j.base+"/epochs/9223372036854775808", nil), http.StatusBadRequest, "invalid_argument", "epoch")
	expectError(t, do(t, "GET", m.URL+"/v1/jobs/big/tasks/src/restore?epoch=9223372036854775808", nil), http.StatusBadRequest, "invalid_argument", "epoch")
	j.begin(t, 1)
	j.begin(t, 9223372036854775807)
}

// TestMemberChangesKeepQuorum: a member whose addresses cannot be dialled
// is refused (400, naming the field), and so is a voter that would leave
// the cluster without a quorum of reachable voters (409 quorum_at_risk);
// the store keeps its leader and takes writes. Before, "not-an-addr" was
// added and the single node answered 503 no_leader forever.
func TestMemberChangesKeepQuorum(t *testing.T) {
	m := startSingle(t)
	r := do(t, "POST", m.URL+"/v1/members", `{"id": "zz", "raft_addr": "not-an-addr", "http_addr": "127.0.0.1:2"}`)
	expectError(t, r, http.StatusBadRequest, "invalid_argument", "raft_addr")
	r = do(t, "POST", m.URL+"/v1/members", `{"id": "zz", "raft_addr": "127.0.0.1:7071", "http_addr": "127.0.0.1:99999"}`)
	expectError(t, r, http.StatusBadRequest, "invalid_argument", "http_addr")

	// A well-formed address where nothing listens: one voter of two
	// reachable is not a quorum.
	addr := testmember.FreePort(t)
	r = do(t, "POST", m.URL+"/v1/members", map[string]string{"id": "zz", "raft_addr": addr, "http_addr": "127.0.0.1:2"})
	expectError(t, r, http.StatusConflict, "quorum_at_risk", "")
	if !strings.Contains(string(r.body), "zz at "+addr) {
		t.Errorf("the refusal does not name the unreachable member: %s", r.body)
	}
	var st struct {
		LeaderID string `json:"leader_id"`
		Members  []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	ok(t, "GET", m.URL+"/v1/status", nil, &st)
	if st.LeaderID == "" || len(st.Members) != 1 {
		t.Fatalf("after the refusals: %+v", st)
	}
	ok(t, "PUT", m.URL+"/v1/jobs/still-writable", map[string]any{"config": map[string]any{}}, nil)
}

// TestProtocolErrorsAreJSON: a 431 answer is a JSON error, a 405 answer
// carries Allow, and a JSON array where an object belongs is named as such,
// without Go type names. Before, the 431 was Go's plain text, 405 had no
// Allow, and the array's message read "expected api.memberBody".
func TestProtocolErrorsAreJSON(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.MaxHeaderBytes = 8 << 10 })
	req, err := http.NewRequest("GET", m.URL+"/v1/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Pad", strings.Repeat("p", 12<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	expectError(t, response{status: resp.StatusCode, header: resp.Header, body: body}, http.StatusRequestHeaderFieldsTooLarge, "header_too_large", "")

	for path, want := range map[string]string{
		"/v1/jobs/j":              "GET, PUT, DELETE",
		"/v1/members":             "GET, POST",
		"/v1/jobs/j/epochs/1/pin": "PUT, DELETE",
	} {
		r := do(t, "PATCH", m.URL+path, nil)
		expectError(t, r, http.StatusMethodNotAllowed, "method_not_allowed", "")
		if got := r.header.Get("Allow"); got != want {
			t.Errorf("PATCH %s: Allow %q, want %q", path, got, want)
		}
	}
	// DELETE of a job is a route (jobs.delete): a job that does not exist
	// answers 404 as the other routes do.
	r := do(t, "DELETE", m.URL+"/v1/jobs/j", nil)
	expectError(t, r, http.StatusNotFound, "not_found", "job")

	for _, path := range []string{"/v1/members", "/v1/jobs/j/epochs"} {
		r := do(t, "POST", m.URL+path, `[{"id": "x"}]`)
		expectError(t, r, http.StatusBadRequest, "invalid_json", "")
		var e apiError
		r.decode(t, &e)
		if !strings.Contains(e.Error.Message, "JSON object") || strings.Contains(e.Error.Message, "api.") || strings.Contains(e.Error.Message, "struct") {
			t.Errorf("POST %s with an array: %q", path, e.Error.Message)
		}
	}
	r = do(t, "PUT", m.URL+"/v1/jobs/j", `{"config": {"retained": "two"}}`)
	expectError(t, r, http.StatusBadRequest, "invalid_json", "config.retained")
	if strings.Contains(string(r.body), "uint") || strings.Contains(string(r.body), "int64") {
		t.Errorf("a string for an integer: %s", r.body)
	}
}

// TestOpenAPIMismatchesResolved: the answers the OpenAPI document now
// describes: an unknown consistency is 400, an attempt's task without
// capabilities is 400 naming it (it was accepted as []), and a leader
// transfer on a single member is 409.
func TestOpenAPIMismatchesResolved(t *testing.T) {
	m := startSingle(t)
	expectError(t, do(t, "GET", m.URL+"/v1/jobs?consistency=strong", nil), http.StatusBadRequest, "invalid_argument", "consistency")
	ok(t, "PUT", m.URL+"/v1/jobs/caps", map[string]any{"config": map[string]any{}}, nil)
	r := do(t, "POST", m.URL+"/v1/jobs/caps/attempts", `{"attempt_id": "a1", "tasks": [{"id": "src", "capabilities": ["input"]}, {"id": "map"}]}`)
	expectError(t, r, http.StatusBadRequest, "invalid_argument", "tasks[1].capabilities")
	ok(t, "POST", m.URL+"/v1/jobs/caps/attempts", `{"attempt_id": "a1", "tasks": [{"id": "src", "capabilities": ["input"]}, {"id": "map", "capabilities": []}]}`, nil)
	expectError(t, do(t, "POST", m.URL+"/v1/leader/transfer", nil), http.StatusConflict, "conflict", "")
}

// TestStrictReconfigurationInACluster: with three voters up, a fourth may
// be added before it starts (three of four reachable is a quorum); with
// one voter down, removing a live one is refused with 409 quorum_at_risk
// (one of two reachable is not), while removing the dead one is allowed.
func TestStrictReconfigurationInACluster(t *testing.T) {
	ms := testmember.StartCluster(t, 3)
	leader := testmember.LeaderOf(ms)
	ok(t, "POST", leader.URL+"/v1/members", map[string]string{"id": "n4", "raft_addr": testmember.FreePort(t), "http_addr": "127.0.0.1:2"}, nil)
	ok(t, "DELETE", leader.URL+"/v1/members/n4", nil, nil)

	var followers []*testmember.Member
	for _, m := range ms {
		if m != leader {
			followers = append(followers, m)
		}
	}
	followers[0].Stop()
	r := do(t, "DELETE", leader.URL+"/v1/members/"+followers[1].ID, nil)
	expectError(t, r, http.StatusConflict, "quorum_at_risk", "")
	if !strings.Contains(string(r.body), followers[0].ID) {
		t.Errorf("the refusal does not name the stopped member %s: %s", followers[0].ID, r.body)
	}
	ok(t, "DELETE", leader.URL+"/v1/members/"+followers[0].ID, nil, nil)
	ok(t, "PUT", leader.URL+"/v1/jobs/after-removal", map[string]any{"config": map[string]any{}}, nil)
}
