package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/wire"
)

type job struct {
	base string // http://host/v1/jobs/ID
	gen  uint64
}

type taskSpec struct {
	ID   string   `json:"id"`
	Caps []string `json:"capabilities"`
}

// hundredTasks is a job of 100 tasks of which 10 checkpoint something.
func hundredTasks() []taskSpec {
	var tasks []taskSpec
	for i := 0; i < 100; i++ {
		ts := taskSpec{ID: fmt.Sprintf("t%03d", i), Caps: []string{}}
		switch {
		case i < 4:
			ts.Caps = []string{"input"}
		case i < 8:
			ts.Caps = []string{"state", "incremental"}
		case i < 10:
			ts.Caps = []string{"state", "output"}
		}
		tasks = append(tasks, ts)
	}
	return tasks
}

func createJob(t *testing.T, url, id string, tasks []taskSpec) *job {
	t.Helper()
	ok(t, "PUT", url+"/v1/jobs/"+id, map[string]any{"config": map[string]any{"retained": 2, "ack_timeout": "1m"}}, nil)
	var a wire.Attempt
	ok(t, "POST", url+"/v1/jobs/"+id+"/attempts", map[string]any{"attempt_id": "a1", "tasks": tasks}, &a)
	if a.Generation != 1 {
		t.Fatalf("generation %d, want 1", a.Generation)
	}
	return &job{base: url + "/v1/jobs/" + id, gen: a.Generation}
}

func (j *job) begin(t *testing.T, epoch uint64) {
	t.Helper()
	ok(t, "POST", j.base+"/epochs", map[string]any{"generation": j.gen, "epoch": epoch}, nil)
}

func (j *job) ack(t *testing.T, epoch uint64, task string, payloads map[string][]byte) wire.AckResult {
	t.Helper()
	var res wire.AckResult
	ok(t, "PUT", fmt.Sprintf("%s/epochs/%d/acks/%s", j.base, epoch, task), map[string]any{"generation": j.gen, "payloads": payloads}, &res)
	return res
}

func payloadsFor(ts taskSpec, epoch uint64) map[string][]byte {
	p := map[string][]byte{}
	for _, c := range ts.Caps {
		if c != "incremental" {
			p[c] = []byte(fmt.Sprintf("%s/%s/%d", ts.ID, c, epoch))
		}
	}
	return p
}

func TestHundredTasksTenExpected(t *testing.T) {
	m := startSingle(t)
	tasks := hundredTasks()
	j := createJob(t, m.URL, "job-100", tasks)
	for epoch := uint64(1); epoch <= 3; epoch++ {
		j.begin(t, epoch)
		for i := 0; i < 10; i++ {
			res := j.ack(t, epoch, tasks[i].ID, payloadsFor(tasks[i], epoch))
			if res.Completed != (i == 9) {
				t.Fatalf("epoch %d ack %d: completed=%v", epoch, i, res.Completed)
			}
		}
		var e wire.EpochDetail
		ok(t, "GET", fmt.Sprintf("%s/epochs/%d", j.base, epoch), nil, &e)
		if e.State != wire.EpochCompleted || e.Acked != 10 || e.Expected != 10 || len(e.Stragglers) != 0 {
			t.Fatalf("epoch %d: %+v", epoch, e.Epoch)
		}
	}
	for i, ts := range tasks {
		var plan wire.RestorePlan
		ok(t, "GET", j.base+"/tasks/"+ts.ID+"/restore", nil, &plan)
		wantStatus := wire.RestoreRestored
		if i >= 10 {
			wantStatus = wire.RestoreNothing
		}
		if plan.Source.Epoch != 3 || plan.Status != wantStatus || plan.ObjectStoreReads != 0 {
			t.Fatalf("%s: %+v", ts.ID, plan)
		}
		want := payloadsFor(ts, 3)
		for _, k := range wire.Kinds {
			kr := plan.Kinds[k]
			if i >= 10 {
				if kr.Status != wire.RestoreNothing || kr.Payload != nil {
					t.Fatalf("%s %s: %+v, want nothing_to_recover", ts.ID, k, kr)
				}
				continue
			}
			if p, has := want[string(k)]; has {
				if kr.Status != wire.RestoreRestored || string(kr.Payload) != string(p) {
					t.Fatalf("%s %s: %+v, want %q", ts.ID, k, kr, p)
				}
			} else if kr.Status != wire.RestoreNothing {
				t.Fatalf("%s %s: %+v, want nothing_to_recover", ts.ID, k, kr)
			}
		}
	}
}

func TestStragglersAndBlockingQuery(t *testing.T) {
	m := startSingle(t)
	tasks := []taskSpec{{ID: "src", Caps: []string{"input"}}, {ID: "sink", Caps: []string{"output"}}, {ID: "map", Caps: []string{}}}
	j := createJob(t, m.URL, "job-b", tasks)
	j.begin(t, 1)
	j.ack(t, 1, "src", map[string][]byte{"input": []byte("offset=7")})

	var e wire.EpochDetail
	r := ok(t, "GET", j.base+"/epochs/1", nil, &e)
	if e.State != wire.EpochPending || len(e.Stragglers) != 1 || e.Stragglers[0] != "sink" {
		t.Fatalf("epoch: %+v stragglers %v", e.Epoch, e.Stragglers)
	}
	if r.index() == 0 {
		t.Fatal("no index header")
	}
	// A blocking query that times out answers the unchanged state.
	var same wire.EpochDetail
	ok(t, "GET", fmt.Sprintf("%s/epochs/1?index=%d&wait=50ms", j.base, e.ModifyIndex), nil, &same)
	if same.State != wire.EpochPending || same.ModifyIndex != e.ModifyIndex {
		t.Fatalf("timed-out blocking query: %+v", same.Epoch)
	}
	// The only change left is completion: the blocking query must answer it.
	done := make(chan wire.EpochDetail, 1)
	go func() {
		var got wire.EpochDetail
		resp := do(t, "GET", fmt.Sprintf("%s/epochs/1?index=%d&wait=30s", j.base, e.ModifyIndex), nil)
		if resp.status == http.StatusOK {
			resp.decode(t, &got)
		}
		done <- got
	}()
	j.ack(t, 1, "sink", map[string][]byte{"output": []byte("txn-1")})
	got := <-done
	if got.State != wire.EpochCompleted || got.CompletedAt == nil {
		t.Fatalf("blocking query answered %+v", got.Epoch)
	}
	if len(got.Acks) != 2 || got.Acks[0].Task != "src" || got.Acks[1].Sizes[wire.KindOutput] != 5 {
		t.Fatalf("acks: %+v", got.Acks)
	}
}

// TestJobBlockingQuery: GET /v1/jobs/{job}?index=N answers when the job
// changes (here: its epoch completes), and a query that times out answers
// the unchanged job; an ack that does not complete the epoch is no change
// of the job.
func TestJobBlockingQuery(t *testing.T) {
	m := startSingle(t)
	tasks := []taskSpec{{ID: "src", Caps: []string{"input"}}, {ID: "sink", Caps: []string{"output"}}}
	j := createJob(t, m.URL, "job-jb", tasks)
	j.begin(t, 1)
	var job wire.Job
	ok(t, "GET", j.base, nil, &job)
	var same wire.Job
	ok(t, "GET", fmt.Sprintf("%s?index=%d&wait=50ms", j.base, job.ModifyIndex), nil, &same)
	if same.ModifyIndex != job.ModifyIndex || same.LatestCompleted != 0 {
		t.Fatalf("timed-out blocking query: %+v", same)
	}
	done := make(chan wire.Job, 1)
	go func() {
		var got wire.Job
		resp := do(t, "GET", fmt.Sprintf("%s?index=%d&wait=30s", j.base, job.ModifyIndex), nil)
		if resp.status == http.StatusOK {
			resp.decode(t, &got)
		}
		done <- got
	}()
	j.ack(t, 1, "src", map[string][]byte{"input": []byte("offset=1")})
	j.ack(t, 1, "sink", map[string][]byte{"output": []byte("txn-1")})
	got := <-done
	if got.LatestCompleted != 1 || len(got.Pending) != 0 || got.ModifyIndex <= job.ModifyIndex {
		t.Fatalf("blocking query answered %+v", got)
	}
	// The list blocks on the jobs' modify indexes alike.
	var list struct {
		Jobs []wire.Job `json:"jobs"`
	}
	ok(t, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=50ms", m.URL, got.ModifyIndex), nil, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ModifyIndex != got.ModifyIndex {
		t.Fatalf("timed-out blocking list: %+v", list)
	}
	listed := make(chan []wire.Job, 1)
	go func() {
		var l struct {
			Jobs []wire.Job `json:"jobs"`
		}
		resp := do(t, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=30s", m.URL, got.ModifyIndex), nil)
		if resp.status == http.StatusOK {
			resp.decode(t, &l)
		}
		listed <- l.Jobs
	}()
	j.begin(t, 2)
	if l := <-listed; len(l) != 1 || !slices.Equal(l[0].Pending, []uint64{2}) {
		t.Fatalf("blocking list answered %+v", l)
	}
	for _, q := range []string{"?index=x", "?index=1&wait=forever", "?index=1&wait=-1s"} {
		if resp := do(t, "GET", m.URL+"/v1/jobs"+q, nil); resp.status != http.StatusBadRequest {
			t.Errorf("GET /v1/jobs%s: %d, want 400", q, resp.status)
		}
		resp := do(t, "GET", j.base+q, nil)
		if resp.status != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", q, resp.status)
		}
	}
}

func TestTopologyChangeAndFencing(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-t", []taskSpec{{ID: "a", Caps: []string{"state"}}, {ID: "b", Caps: []string{"state"}}})
	j.begin(t, 1)
	j.ack(t, 1, "a", map[string][]byte{"state": []byte("A1")})
	j.ack(t, 1, "b", map[string][]byte{"state": []byte("B1")})

	// Attempt 2 removes b and adds c.
	var a2 wire.Attempt
	ok(t, "POST", j.base+"/attempts", map[string]any{"attempt_id": "a2", "tasks": []taskSpec{{ID: "a", Caps: []string{"state"}}, {ID: "c", Caps: []string{"state"}}}}, &a2)
	if a2.Generation != 2 {
		t.Fatalf("generation %d", a2.Generation)
	}
	restore := func(task string) wire.RestorePlan {
		var p wire.RestorePlan
		ok(t, "GET", j.base+"/tasks/"+task+"/restore", nil, &p)
		return p
	}
	if p := restore("c"); p.Status != wire.RestoreNoPriorState || p.Kinds[wire.KindState].Status != wire.RestoreNoPriorState {
		t.Fatalf("new task c: %+v", p)
	}
	if p := restore("b"); p.Status != wire.RestoreRestored || string(p.Kinds[wire.KindState].Payload) != "B1" {
		t.Fatalf("removed task b: %+v", p)
	}
	// A zombie of generation 1 is fenced and changes nothing.
	before := stateHash(t, m)
	r := do(t, "POST", j.base+"/epochs", map[string]any{"generation": 1, "epoch": 2})
	expectError(t, r, http.StatusConflict, "fenced", "generation")
	r = do(t, "PUT", j.base+"/epochs/1/acks/b", map[string]any{"generation": 1, "payloads": map[string][]byte{"state": []byte("B1")}})
	expectError(t, r, http.StatusConflict, "fenced", "generation")
	if after := stateHash(t, m); after != before {
		t.Fatal("a fenced write changed the state")
	}
	j.gen = 2
	j.begin(t, 2)
	j.ack(t, 2, "a", map[string][]byte{"state": []byte("A2")})
	j.ack(t, 2, "c", map[string][]byte{"state": []byte("C2")})
	if p := restore("b"); p.Status != wire.RestoreNoPriorState {
		t.Fatalf("removed task b after epoch 2: %+v", p)
	}
	if p := restore("c"); string(p.Kinds[wire.KindState].Payload) != "C2" {
		t.Fatalf("task c after epoch 2: %+v", p)
	}
}

func expectError(t *testing.T, r response, status int, code wire.Code, field string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("status %d, body %q is not a JSON error", r.status, r.body)
	}
	if r.status != status || e.Error.Code != code || (field != "" && e.Error.Field != field) {
		t.Fatalf("got %d %s field=%q (%s), want %d %s field=%q", r.status, e.Error.Code, e.Error.Field, e.Error.Message, status, code, field)
	}
	if e.Error.Message == "" {
		t.Fatal("error without a message")
	}
}

// TestBadInput sends each malformed or rule-breaking request twice: both
// answers must be the same 4xx JSON error, and the state must not change.
func TestBadInput(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-x", []taskSpec{{ID: "src", Caps: []string{"input"}}, {ID: "sink", Caps: []string{"output"}}, {ID: "map", Caps: []string{}}})
	j.begin(t, 5)
	j.ack(t, 5, "src", map[string][]byte{"input": []byte("o=1")})
	j.ack(t, 5, "sink", map[string][]byte{"output": []byte("t=1")})
	j.begin(t, 6)
	ok(t, "POST", j.base+"/epochs/6/abort", map[string]any{"generation": 1, "reason": "test"}, nil)
	j.begin(t, 7)

	big := strings.Repeat("x", wire.MaxInlinePayload+1)
	huge := `{"generation":1,"payloads":{"input":"` + strings.Repeat("A", 2<<20) + `"}}`
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               wire.Code
		field              string
	}{
		{"malformed json", "POST", "/epochs", `{"generation":1,`, 400, "invalid_json", ""},
		{"not json", "POST", "/epochs", `hello`, 400, "invalid_json", ""},
		{"empty body", "POST", "/epochs", ``, 400, "invalid_json", ""},
		{"trailing data", "POST", "/epochs", `{"generation":1,"epoch":8} {}`, 400, "invalid_json", ""},
		{"unknown field", "POST", "/epochs", `{"generation":1,"epoch":8,"epohc":9}`, 400, "unknown_field", "epohc"},
		{"wrong type", "POST", "/epochs", `{"generation":"one","epoch":8}`, 400, "invalid_json", "generation"},
		{"negative epoch", "POST", "/epochs", `{"generation":1,"epoch":-8}`, 400, "invalid_json", "epoch"},
		{"huge number", "POST", "/epochs", `{"generation":1,"epoch":1e400}`, 400, "invalid_json", "epoch"},
		{"missing generation", "POST", "/epochs", `{"epoch":8}`, 400, "invalid_argument", "generation"},
		{"epoch zero", "POST", "/epochs", `{"generation":1,"epoch":0}`, 400, "invalid_argument", "epoch"},
		{"epoch not increasing", "POST", "/epochs", `{"generation":1,"epoch":4}`, 409, "epoch_not_increasing", "epoch"},
		{"stale generation", "POST", "/epochs", `{"generation":0,"epoch":9}`, 400, "invalid_argument", "generation"},
		{"future generation", "POST", "/epochs", `{"generation":2,"epoch":9}`, 400, "invalid_argument", "generation"},
		{"bad epoch in path", "PUT", "/epochs/seven/acks/src", `{"generation":1}`, 400, "invalid_argument", "epoch"},
		{"bad task id", "PUT", "/epochs/7/acks/..%2Fetc", `{"generation":1}`, 400, "invalid_argument", "task"},
		{"task not in attempt", "PUT", "/epochs/7/acks/ghost", `{"generation":1}`, 409, "task_not_in_attempt", "task"},
		{"task without capabilities", "PUT", "/epochs/7/acks/map", `{"generation":1}`, 409, "task_not_expected", "task"},
		{"capability missing", "PUT", "/epochs/7/acks/src", `{"generation":1,"payloads":{"state":"eA=="}}`, 409, "capability_missing", "payloads.state"},
		{"unknown kind", "PUT", "/epochs/7/acks/src", `{"generation":1,"payloads":{"blob":"eA=="}}`, 400, "invalid_argument", "payloads"},
		{"payload not base64", "PUT", "/epochs/7/acks/src", `{"generation":1,"payloads":{"input":"***"}}`, 400, "invalid_json", ""},
		{"payload over limit", "PUT", "/epochs/7/acks/src", map[string]any{"generation": 1, "payloads": map[string][]byte{"input": []byte(big)}}, 413, "payload_too_large", "payloads.input"},
		{"body over limit", "PUT", "/epochs/7/acks/src", huge, 413, "body_too_large", ""},
		{"ack completed epoch differently", "PUT", "/epochs/5/acks/src", `{"generation":1,"payloads":{"input":"eA=="}}`, 409, "conflict", "task"},
		{"ack aborted epoch", "PUT", "/epochs/6/acks/src", `{"generation":1,"payloads":{"input":"eA=="}}`, 409, "epoch_not_pending", "epoch"},
		{"ack unknown epoch", "PUT", "/epochs/70/acks/src", `{"generation":1}`, 404, "not_found", "epoch"},
		{"abort completed epoch", "POST", "/epochs/5/abort", `{"generation":1}`, 409, "epoch_not_pending", "epoch"},
		{"pin pending epoch", "PUT", "/epochs/7/pin", `{"name":"sp1"}`, 409, "epoch_not_completed", "epoch"},
		{"pin bad name", "PUT", "/epochs/5/pin", `{"name":"../x"}`, 400, "invalid_argument", "name"},
		{"abort reason control chars", "POST", "/epochs/7/abort", `{"generation":1,"reason":"a\u0000b"}`, 400, "invalid_argument", "reason"},
		{"unknown capability", "POST", "/attempts", `{"attempt_id":"a9","tasks":[{"id":"x","capabilities":["magic"]}]}`, 400, "invalid_json", ""},
		{"incremental without state", "POST", "/attempts", `{"attempt_id":"a9","tasks":[{"id":"x","capabilities":["incremental"]}]}`, 400, "invalid_json", ""},
		{"duplicate task", "POST", "/attempts", `{"attempt_id":"a9","tasks":[{"id":"x","capabilities":[]},{"id":"x","capabilities":[]}]}`, 400, "invalid_argument", "tasks[].id"},
		{"no tasks", "POST", "/attempts", `{"attempt_id":"a9","tasks":[]}`, 400, "invalid_argument", "tasks"},
		{"unicode task id", "POST", "/attempts", `{"attempt_id":"a9","tasks":[{"id":"t\u0430sk","capabilities":[]}]}`, 400, "invalid_argument", "tasks[].id"},
		{"restore bad epoch", "GET", "/tasks/src/restore?epoch=x", nil, 400, "invalid_argument", "epoch"},
		{"restore aborted epoch", "GET", "/tasks/src/restore?epoch=6", nil, 409, "epoch_not_completed", "epoch"},
		{"restore unknown pin", "GET", "/tasks/src/restore?pin=nope", nil, 404, "not_found", "pin"},
		{"restore unknown source job", "GET", "/tasks/src/restore?source_job=nope", nil, 404, "not_found", "source_job"},
		{"bad retained", "PUT", "", `{"config":{"retained":-1}}`, 400, "invalid_argument", "config.retained"},
		{"bad ack timeout", "PUT", "", `{"config":{"ack_timeout":"soon"}}`, 400, "invalid_json", ""},
		{"bad wait", "GET", "/epochs/7?index=1&wait=forever", nil, 400, "invalid_argument", "wait"},
		{"bad state filter", "GET", "/epochs?state=done", nil, 400, "invalid_argument", "state"},
		{"bad consistency", "GET", "/epochs?consistency=eventual", nil, 400, "invalid_argument", "consistency"},
		{"manifest of an aborted epoch", "GET", "/epochs/6/manifests/src", nil, 409, "epoch_not_completed", "epoch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateHash(t, m)
			for try := 0; try < 2; try++ {
				r := do(t, tc.method, j.base+tc.path, tc.body)
				expectError(t, r, tc.status, tc.code, tc.field)
			}
			if after := stateHash(t, m); after != before {
				t.Fatal("a rejected request changed the state")
			}
		})
	}
	// Unknown routes and methods are JSON errors too.
	expectError(t, do(t, "GET", m.URL+"/v1/nope", nil), 404, "route_not_found", "")
	expectError(t, do(t, "PATCH", j.base, nil), 405, "method_not_allowed", "")
	expectError(t, do(t, "GET", m.URL+"/v1/jobs/nope", nil), 404, "not_found", "job")
	expectError(t, do(t, "POST", m.URL+"/v1/leader/transfer", nil), 409, "conflict", "")
	// The server still serves.
	ok(t, "GET", m.URL+"/healthz", nil, nil)
}

func TestIdempotentRetries(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-i", []taskSpec{{ID: "a", Caps: []string{"state"}}, {ID: "b", Caps: []string{"input"}}})
	// The same attempt again answers the same generation.
	var again wire.Attempt
	ok(t, "POST", j.base+"/attempts", map[string]any{"attempt_id": "a1", "tasks": []taskSpec{{ID: "b", Caps: []string{"input"}}, {ID: "a", Caps: []string{"state"}}}}, &again)
	if again.Generation != 1 {
		t.Fatalf("retried attempt got generation %d", again.Generation)
	}
	j.begin(t, 1)
	j.begin(t, 1)
	first := j.ack(t, 1, "a", map[string][]byte{"state": []byte("s")})
	second := j.ack(t, 1, "a", map[string][]byte{"state": []byte("s")})
	if first.Ack.Index != second.Ack.Index || second.Epoch.Acked != 1 {
		t.Fatalf("retried ack: %+v then %+v", first.Ack, second.Ack)
	}
	expectError(t, do(t, "PUT", j.base+"/epochs/1/acks/a", map[string]any{"generation": 1, "payloads": map[string][]byte{"state": []byte("other")}}), 409, "conflict", "task")
	done := j.ack(t, 1, "b", map[string][]byte{"input": []byte("i")})
	if !done.Completed {
		t.Fatal("epoch did not complete")
	}
	// A retry of the completing ack, after completion, is still a success.
	retry := j.ack(t, 1, "b", map[string][]byte{"input": []byte("i")})
	if retry.Completed || retry.Epoch.State != wire.EpochCompleted || retry.Ack.Index != done.Ack.Index {
		t.Fatalf("retry after completion: %+v", retry)
	}
	// Pin twice, unpin twice.
	ok(t, "PUT", j.base+"/epochs/1/pin", map[string]any{"name": "sp"}, nil)
	ok(t, "PUT", j.base+"/epochs/1/pin", map[string]any{"name": "sp"}, nil)
	var p wire.RestorePlan
	ok(t, "GET", j.base+"/tasks/a/restore?pin=sp", nil, &p)
	if p.Source.Epoch != 1 || string(p.Kinds[wire.KindState].Payload) != "s" {
		t.Fatalf("restore by pin: %+v", p)
	}
	ok(t, "DELETE", j.base+"/epochs/1/pin", nil, nil)
	ok(t, "DELETE", j.base+"/epochs/1/pin", nil, nil)
}

func TestAckTimeoutAbortsEpoch(t *testing.T) {
	m := startSingle(t)
	ok(t, "PUT", m.URL+"/v1/jobs/job-slow", map[string]any{"config": map[string]any{"ack_timeout": "200ms"}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/job-slow/attempts", map[string]any{"attempt_id": "a1", "tasks": []taskSpec{{ID: "a", Caps: []string{"state"}}}}, nil)
	ok(t, "POST", m.URL+"/v1/jobs/job-slow/epochs", map[string]any{"generation": 1, "epoch": 1}, nil)
	var e wire.EpochDetail
	// Block until the epoch changes: the leader's timeout task aborts it.
	ok(t, "GET", m.URL+"/v1/jobs/job-slow/epochs/1?index=1&wait=20s", nil, &e)
	for e.State == wire.EpochPending {
		ok(t, "GET", fmt.Sprintf("%s/v1/jobs/job-slow/epochs/1?index=%d&wait=20s", m.URL, e.ModifyIndex), nil, &e)
	}
	if e.State != wire.EpochAborted || !strings.Contains(e.Reason, "ack timeout") || len(e.Stragglers) != 1 {
		t.Fatalf("epoch after timeout: %+v stragglers=%v", e.Epoch, e.Stragglers)
	}
	expectError(t, do(t, "PUT", m.URL+"/v1/jobs/job-slow/epochs/1/acks/a", map[string]any{"generation": 1}), 409, "epoch_not_pending", "epoch")
}

func TestObservability(t *testing.T) {
	m := startSingle(t)
	ok(t, "GET", m.URL+"/healthz", nil, nil)
	ok(t, "GET", m.URL+"/readyz", nil, nil)
	var st struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		LeaderID string `json:"leader_id"`
		Members  []struct {
			ID       string `json:"id"`
			HTTPAddr string `json:"http_addr"`
		} `json:"members"`
	}
	ok(t, "GET", m.URL+"/v1/status", nil, &st)
	if st.ID != "n1" || st.LeaderID != "n1" || len(st.Members) != 1 {
		t.Fatalf("status: %+v", st)
	}
	for _, c := range []string{"stale", "default", "linearizable"} {
		r := ok(t, "GET", m.URL+"/v1/jobs?consistency="+c, nil, nil)
		if r.header.Get(api.HeaderIndex) == "" {
			t.Fatalf("consistency=%s: no index", c)
		}
	}
	r := do(t, "GET", m.URL+"/metrics", nil)
	for _, want := range []string{"metastore_http_requests_total", "metastore_http_request_duration_seconds", `route="jobs.list"`} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}

// TestConcurrentAcks checks that many concurrent acks over several jobs all
// land: every epoch completes exactly once.
func TestConcurrentAcks(t *testing.T) {
	m := startSingle(t)
	var tasks []taskSpec
	for i := 0; i < 8; i++ {
		tasks = append(tasks, taskSpec{ID: fmt.Sprintf("w%d", i), Caps: []string{"state"}})
	}
	var jobs []*job
	for i := 0; i < 4; i++ {
		jobs = append(jobs, createJob(t, m.URL, fmt.Sprintf("cj%d", i), tasks))
	}
	for epoch := uint64(1); epoch <= 3; epoch++ {
		var wg sync.WaitGroup
		for _, j := range jobs {
			j.begin(t, epoch)
			for _, ts := range tasks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := do(t, "PUT", fmt.Sprintf("%s/epochs/%d/acks/%s", j.base, epoch, ts.ID), map[string]any{"generation": 1, "payloads": payloadsFor(ts, epoch)})
					if r.status != http.StatusOK {
						t.Errorf("ack: %d %s", r.status, r.body)
					}
				}()
			}
		}
		wg.Wait()
		for _, j := range jobs {
			var e wire.EpochDetail
			ok(t, "GET", fmt.Sprintf("%s/epochs/%d", j.base, epoch), nil, &e)
			if e.State != wire.EpochCompleted || e.Acked != len(tasks) {
				t.Fatalf("%s epoch %d: %+v", j.base, epoch, e.Epoch)
			}
		}
	}
}

func stateHash(t *testing.T, m *member) string {
	t.Helper()
	_, h, err := m.FSM.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
