package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// fields splits output lines into whitespace-separated words, so table
// assertions do not depend on column widths.
func fields(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}

// hasLine reports whether out has a line equal to want after collapsing
// whitespace.
func hasLine(out, want string) bool {
	for _, l := range fields(out) {
		if l == want {
			return true
		}
	}
	return false
}

func expectLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !hasLine(out, w) {
			t.Errorf("output has no line %q:\n%s", w, out)
		}
	}
}

const jobsJSON = `{"jobs":[
 {"id":"orders","config":{"retained":2,"ack_timeout":"2m0s","history":100},"generation":3,"attempt_id":"run-3",
  "last_epoch":9,"latest_completed":8,"pending":[9],"retained":[7,8],"ended":[1,2,3,4,5,6],"restored_attempts":1,"restores_counted_from":2,
  "created_at":"2025-01-02T03:04:05Z","updated_at":"2025-01-02T03:09:05.5Z","create_index":5,"modify_index":77},
 {"id":"fresh","config":{"retained":1,"ack_timeout":"10m0s","history":100},"generation":0,
  "last_epoch":0,"latest_completed":0,"pending":[],"retained":[1,2,3,4,5,6,7,8,9,10],"ended":[],
  "created_at":"2025-01-02T03:04:05Z","updated_at":"2025-01-02T03:04:05Z","create_index":6,"modify_index":6}]}`

const attemptJSON = `{"job":"orders","generation":3,"attempt_id":"run-3","started_at":"2025-01-02T03:05:00Z","tasks":3,"expected":2,
 "content_hash":"abc","restored_from":6,"index":40,"task_list":[
  {"id":"agg-0","capabilities":["state","incremental"]},{"id":"map-0","capabilities":[]},{"id":"src-0","capabilities":["input"]}]}`

func TestJobsList(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){"GET /v1/jobs": answer(200, jobsJSON)})
	code, out, errOut := runCmd([]string{"jobs", "list", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := fields(out)
	want := []string{
		"JOB GENERATION ATTEMPT LAST EPOCH LATEST COMPLETED PENDING EPOCHS RETAINED EPOCHS UPDATED",
		"orders 3 run-3 9 8 9 7,8 2025-01-02T03:09:05Z",
		"fresh 0 - 0 0 - 10 (1..10) 2025-01-02T03:04:05Z",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("jobs list:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}

	// --json is the API's answer.
	code, out, _ = runCmd([]string{"jobs", "list", "--json", "--addr", srv.URL}, nil)
	var got, exp any
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("--json: exit %d, %q", code, out)
	}
	json.Unmarshal([]byte(jobsJSON), &exp)
	if !jsonEqual(got, exp) {
		t.Errorf("--json = %s", out)
	}

	_, empty := newFakeNode(t, map[string]func(http.ResponseWriter){"GET /v1/jobs": answer(200, `{"jobs":[]}`)})
	if code, out, _ := runCmd([]string{"jobs", "list", "--addr", empty.URL}, nil); code != exitOK || out != "no jobs\n" {
		t.Errorf("no jobs: exit %d, %q", code, out)
	}
}

func TestJobsShow(t *testing.T) {
	var orders map[string]json.RawMessage
	json.Unmarshal([]byte(jobsJSON), &orders)
	var list []json.RawMessage
	json.Unmarshal(orders["jobs"], &list)
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/jobs/orders":                  answer(200, string(list[0])),
		"GET /v1/jobs/orders/attempts/current": answer(200, attemptJSON),
		"GET /v1/jobs/fresh":                   answer(200, string(list[1])),
		"GET /v1/jobs/fresh/attempts/current":  answer(409, `{"error":{"code":"no_attempt","field":"generation","message":"job \"fresh\" has no attempt yet"}}`),
	})
	code, out, errOut := runCmd([]string{"jobs", "show", "orders", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out,
		"job orders",
		"attempt generation 3, id run-3, started 2025-01-02T03:05:00Z",
		"tasks 3, 2 expected to ack each epoch",
		"started from restored from epoch 6",
		"restored attempts 1 since generation 2",
		"config retained 2, ack timeout 2m0s, history 100",
		"pending 9",
		"retained 7,8",
		"ended 1,2,3,4,5,6",
		"TASK CAPABILITIES EXPECTED",
		"agg-0 state,incremental yes",
		"map-0 - no",
		"src-0 input yes",
	)
	if got := f.seen(); strings.Join(got, "|") != "GET /v1/jobs/orders|GET /v1/jobs/orders/attempts/current" {
		t.Errorf("requests = %q", got)
	}

	// A job without an attempt is shown without one.
	code, out, errOut = runCmd([]string{"jobs", "show", "fresh", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" || !hasLine(out, "attempt none yet (generation 0)") || !hasLine(out, "restored attempts 0") || strings.Contains(out, "TASK") {
		t.Fatalf("fresh: exit %d, stderr %q, out:\n%s", code, errOut, out)
	}

	// --json combines both answers.
	code, out, _ = runCmd([]string{"jobs", "show", "fresh", "--json", "--addr", srv.URL}, nil)
	var combined struct {
		Job     map[string]any `json:"job"`
		Attempt any            `json:"attempt"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &combined) != nil || combined.Job["id"] != "fresh" || combined.Attempt != nil {
		t.Errorf("--json: exit %d, %s", code, out)
	}
	code, out, _ = runCmd([]string{"jobs", "show", "orders", "--json", "--addr", srv.URL}, nil)
	if code != exitOK || json.Unmarshal([]byte(out), &combined) != nil || combined.Attempt.(map[string]any)["attempt_id"] != "run-3" {
		t.Errorf("--json: exit %d, %s", code, out)
	}

	// An unknown job is the API's error, on one line.
	code, out, errOut = runCmd([]string{"jobs", "show", "nope", "--addr", srv.URL}, nil)
	if code != exitFailure || out != "" || errOut != "metastore: not_found: no route GET /v1/jobs/nope\n" {
		t.Errorf("unknown job: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

const epochsJSON = `{"epochs":[
 {"job":"orders","epoch":7,"generation":3,"state":"completed","began_at":"2025-01-02T03:04:05Z","deadline":"2025-01-02T03:06:05Z",
  "completed_at":"2025-01-02T03:04:06.25Z","expected":2,"acked":2,"payload_bytes":30,"pinned":true,"pin_name":"before-upgrade","create_index":50,"modify_index":55},
 {"job":"orders","epoch":8,"generation":3,"state":"aborted","began_at":"2025-01-02T03:05:05Z","deadline":"2025-01-02T03:07:05Z",
  "ended_at":"2025-01-02T03:07:05Z","reason":"ack timeout","expected":2,"acked":1,"payload_bytes":3,"pinned":false,"create_index":60,"modify_index":66},
 {"job":"orders","epoch":9,"generation":3,"state":"pending","began_at":"2025-01-02T03:08:05Z","deadline":"2025-01-02T03:10:05Z",
  "expected":2,"acked":0,"payload_bytes":0,"pinned":false,"create_index":70,"modify_index":70}]}`

const epochJSON = `{"job":"orders","epoch":9,"generation":3,"state":"pending","began_at":"2025-01-02T03:08:05Z","deadline":"2025-01-02T03:10:05Z",
 "expected":3,"acked":2,"payload_bytes":1030,"pinned":false,"create_index":70,"modify_index":75,
 "acks":[
  {"task":"src-0","at":"2025-01-02T03:08:05.2Z","delay":"200.123456ms","sizes":{"input":30},"content_hash":"x","index":72},
  {"task":"agg-0","at":"2025-01-02T03:08:06.5Z","delay":"1.5s","sizes":{"state":1000},"content_hash":"y","index":75,"lineage":4}],
 "stragglers":["sink-0"],"duration":"1.5s"}`

func TestCheckpoints(t *testing.T) {
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/jobs/orders/epochs":   answer(200, epochsJSON),
		"GET /v1/jobs/orders/epochs/9": answer(200, epochJSON),
		"GET /v1/jobs/empty/epochs":    answer(200, `{"epochs":[]}`),
	})
	code, out, errOut := runCmd([]string{"checkpoints", "list", "orders", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := []string{
		"EPOCH STATE GENERATION ACKED PAYLOAD BYTES BEGAN DURATION PINNED REASON",
		"7 completed 3 2/2 30 2025-01-02T03:04:05Z 1.25s before-upgrade -",
		"8 aborted 3 1/2 3 2025-01-02T03:05:05Z 2m0s - ack timeout",
		"9 pending 3 0/2 0 2025-01-02T03:08:05Z - - -",
	}
	if strings.Join(fields(out), "\n") != strings.Join(want, "\n") {
		t.Errorf("checkpoints list:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	// --state goes to the API as ?state=.
	if code, _, errOut := runCmd([]string{"checkpoints", "list", "--state", "completed", "orders", "--addr", srv.URL}, nil); code != exitOK {
		t.Fatalf("--state: exit %d, %q", code, errOut)
	}
	if code, out, _ := runCmd([]string{"checkpoints", "list", "empty", "--state", "pending", "--addr", srv.URL}, nil); code != exitOK || out != "job empty has no pending epochs\n" {
		t.Errorf("empty: exit %d, %q", code, out)
	}

	code, out, errOut = runCmd([]string{"checkpoints", "show", "orders", "9", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("show: exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out,
		"epoch 9",
		"state pending",
		"deadline 2025-01-02T03:10:05Z",
		"duration 1.5s so far (to the last ack)",
		"acked 2 of 3 expected tasks",
		"stragglers sink-0",
		"payload 1030 bytes (1.0 KiB) inline",
		"pinned -",
		"TASK ACK DELAY INPUT STATE OUTPUT MANIFEST ACKED AT",
		"src-0 200.123ms 30 - - - 2025-01-02T03:08:05Z",
		"agg-0 1.5s - 1000 - yes 2025-01-02T03:08:06Z",
	)

	want = []string{
		"GET /v1/jobs/orders/epochs",
		"GET /v1/jobs/orders/epochs?state=completed",
		"GET /v1/jobs/empty/epochs?state=pending",
		"GET /v1/jobs/orders/epochs/9",
	}
	if got := f.seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Bad command lines are usage errors, and send nothing.
	for _, args := range [][]string{
		{"checkpoints", "list", "orders", "--state", "done"},
		{"checkpoints", "list"},
		{"checkpoints", "show", "orders"},
		{"checkpoints", "show", "orders", "0"},
		{"checkpoints", "show", "orders", "-3"},
		{"checkpoints", "show", "orders", "nine"},
	} {
		code, out, errOut := runCmd(append(args, "--addr", srv.URL), nil)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "(usage: metastore checkpoints ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage line and exit 2", args, code, out, errOut)
		}
	}
	if n := len(f.seen()); n != len(want) {
		t.Errorf("usage errors sent %d requests", n-len(want))
	}
}

const planJSON = `{"job":"orders","task":"agg-0","status":"restored",
 "source":{"job":"orders","task":"agg-0","epoch":7,"generation":3,"pin":"before-upgrade"},
 "capabilities":["state","incremental"],
 "kinds":{
  "input":{"status":"nothing_to_recover","bytes":0},
  "state":{"status":"restored","payload":"AAEC","manifest":{"bases":[{"key":"orders/agg-0/b1","offset":0,"length":4096}],
    "segments":[{"key":"orders/agg-0/s1","offset":0,"length":100,"first_seq":1,"last_seq":5},{"key":"orders/agg-0/s1","offset":100,"length":28,"first_seq":6,"last_seq":9}]},"bytes":4227},
  "output":{"status":"nothing_to_recover","bytes":0}},
 "inline_bytes":3,"object_store_reads":3,"object_store_bytes":4224}`

func TestRestorePlan(t *testing.T) {
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/jobs/orders/tasks/agg-0/restore": answer(200, planJSON),
	})
	code, out, errOut := runCmd([]string{"restore-plan", "orders", "agg-0", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	expectLines(t, out,
		"status restored",
		"source orders/agg-0, epoch 7 (generation 3), savepoint before-upgrade",
		"capabilities state,incremental",
		"inline bytes 3",
		"object-store reads 3, 4224 bytes (4.1 KiB)",
		"KIND STATUS INLINE BASES SEGMENTS MANIFEST BYTES TOTAL BYTES",
		"input nothing_to_recover - - - - 0",
		"state restored 3 1 2 4224 4227",
		"output nothing_to_recover - - - - 0",
	)
	// The flags become the query of the request.
	for _, tc := range []struct {
		args []string
		uri  string
	}{
		{[]string{"--epoch", "7"}, "?epoch=7"},
		{[]string{"--pin", "before-upgrade"}, "?pin=before-upgrade"},
		{[]string{"--source-job", "old", "--source-task", "agg-9"}, "?source_job=old&source_task=agg-9"},
	} {
		if code, _, errOut := runCmd(append([]string{"restore-plan", "orders", "agg-0", "--addr", srv.URL}, tc.args...), nil); code != exitOK {
			t.Fatalf("%q: exit %d, %q", tc.args, code, errOut)
		}
		seen := f.seen()
		if got := seen[len(seen)-1]; got != "GET /v1/jobs/orders/tasks/agg-0/restore"+tc.uri {
			t.Errorf("%q: request %q", tc.args, got)
		}
	}
	for _, args := range [][]string{
		{"restore-plan", "orders", "agg-0", "--epoch", "7", "--pin", "x"},
		{"restore-plan", "orders"},
		{"restore-plan", "orders", "agg-0", "--epoch", "seven"},
	} {
		if code, _, errOut := runCmd(append(args, "--addr", srv.URL), nil); code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want a usage line and exit 2", args, code, errOut)
		}
	}
}

func TestEpochsCommands(t *testing.T) {
	var orders map[string]json.RawMessage
	json.Unmarshal([]byte(jobsJSON), &orders)
	var list []json.RawMessage
	json.Unmarshal(orders["jobs"], &list)
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/jobs/orders":                 answer(200, string(list[0])),
		"POST /v1/jobs/orders/epochs/9/abort": answer(200, `{"job":"orders","epoch":9,"state":"aborted"}`),
		"PUT /v1/jobs/orders/epochs/7/pin":    answer(200, `{"job":"orders","epoch":7,"pinned":true}`),
		"DELETE /v1/jobs/orders/epochs/7/pin": answer(200, `{"job":"orders","epoch":7,"pinned":false}`),
		"GET /v1/jobs/fresh":                  answer(200, string(list[1])),
		"DELETE /v1/jobs/orders": answer(200, `{"job":"orders","generation":3,"last_epoch":9,"forced":true,"pins_released":[{"epoch":7,"name":"before-upgrade"}],`+
			`"lineages_released":4,"intents_expired":1,"deleted_at":"2025-03-14T09:26:53Z","index":77}`),
	})
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"epochs", "abort", "orders", "9", "--reason", "stuck sink"}, "aborted epoch 9 of job orders (generation 3)\n"},
		{[]string{"epochs", "abort", "orders", "9", "--generation", "2"}, "aborted epoch 9 of job orders (generation 2)\n"},
		{[]string{"epochs", "pin", "orders", "7", "--name", "before-upgrade"}, "pinned epoch 7 of job orders as before-upgrade\n"},
		{[]string{"epochs", "pin", "orders", "7"}, "pinned epoch 7 of job orders\n"},
		{[]string{"epochs", "unpin", "orders", "7"}, "unpinned epoch 7 of job orders\n"},
		{[]string{"jobs", "delete", "orders", "--force"}, "deleted job orders (last generation 3, last epoch 9): 4 task manifests released, 1 upload intents expired, savepoints released: 7 (before-upgrade)\n"},
	} {
		code, out, errOut := runCmd(append(tc.args, "--addr", srv.URL), nil)
		if code != exitOK || out != tc.out || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.out)
		}
	}
	f.mu.Lock()
	gotReq, gotBodies := f.requests, f.bodies
	f.mu.Unlock()
	wantReq := []string{"GET /v1/jobs/orders", "POST /v1/jobs/orders/epochs/9/abort", "POST /v1/jobs/orders/epochs/9/abort",
		"PUT /v1/jobs/orders/epochs/7/pin", "PUT /v1/jobs/orders/epochs/7/pin", "DELETE /v1/jobs/orders/epochs/7/pin", "DELETE /v1/jobs/orders"}
	if strings.Join(gotReq, "|") != strings.Join(wantReq, "|") {
		t.Fatalf("requests = %q, want %q", gotReq, wantReq)
	}
	for i, want := range []any{
		nil,
		map[string]any{"generation": 3, "reason": "stuck sink"},
		map[string]any{"generation": 2, "reason": "aborted by an operator"},
		map[string]any{"name": "before-upgrade"},
		nil, nil,
	} {
		if want == nil {
			if gotBodies[i] != nil {
				t.Errorf("request %d has body %v, want none", i, gotBodies[i])
			}
		} else if !jsonEqual(gotBodies[i], want) {
			t.Errorf("request %d body = %v, want %v", i, gotBodies[i], want)
		}
	}
	// A job without an attempt has no pending epoch to abort.
	code, _, errOut := runCmd([]string{"epochs", "abort", "fresh", "1", "--addr", srv.URL}, nil)
	if code != exitFailure || errOut != "metastore: job fresh has no attempt, so no pending epoch\n" {
		t.Errorf("abort without attempt: exit %d, %q", code, errOut)
	}
}
