package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/metastore/metastore/wire"
)

// TestAckBatchItemsCheckedAsTheirRoute: each ack of a batch is answered
// with the status its own route would answer: an epoch above 2^63-1 is
// 400 on "epoch" (as PUT .../epochs/9223372036854775808/acks/a is), and
// an invalid job id is 400 on "job" before any scope check, for a worker
// token as for the route, whose path is checked first. Found by a
// mutation audit: dropping either check of batchAck survived every API
// test.
func TestAckBatchItemsCheckedAsTheirRoute(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/mine", op, []byte(`{}`), nil)
	okTok(t, "POST", m.URL+"/v1/jobs/mine/attempts", op, []byte(`{"attempt_id":"a1","tasks":[{"id":"a","capabilities":["input"]}]}`), nil)
	okTok(t, "POST", m.URL+"/v1/jobs/mine/epochs", op, []byte(`{"generation":1,"epoch":1}`), nil)
	worker, _ := createToken(t, m.URL, op, `{"role":"worker","job":"mine"}`)
	x := map[string][]byte{"input": []byte("x")}

	// The routes' answers, for comparison.
	r := doTok(t, "PUT", m.URL+"/v1/jobs/mine/epochs/9223372036854775808/acks/a", worker, []byte(`{"generation":1}`))
	expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "epoch")
	r = doTok(t, "PUT", m.URL+"/v1/jobs/bad%20id/epochs/1/acks/a", worker, []byte(`{"generation":1}`))
	expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "job")

	for _, tok := range []string{op, worker} {
		body, _ := json.Marshal(map[string]any{"acks": []any{
			batchItem("mine", 1<<63, "a", 1, x),
			batchItem("bad id", 1, "a", 1, x),
			batchItem("mine", 1, "a", 1, x),
		}})
		var out wire.AckBatchAnswer
		okTok(t, "POST", m.URL+"/v1/acks", tok, body, &out)
		if len(out.Results) != 3 {
			t.Fatalf("results: %+v", out.Results)
		}
		for i, field := range []string{"epoch", "job"} {
			res := out.Results[i]
			if res.Status != http.StatusBadRequest || res.Error == nil || res.Error.Code != wire.CodeInvalid || res.Error.Field != field {
				t.Fatalf("ack %d: %+v %+v, want 400 %s on %q", i, res, res.Error, wire.CodeInvalid, field)
			}
		}
		if out.Results[2].Status != http.StatusOK {
			t.Fatalf("the valid ack: %+v %+v", out.Results[2], out.Results[2].Error)
		}
	}
	var e wire.Epoch
	okTok(t, "GET", m.URL+"/v1/jobs/mine/epochs/1", op, nil, &e)
	if e.Acked != 1 {
		t.Fatalf("epoch 1 after the batches: %d acks, want 1", e.Acked)
	}
}

// TestAckBatchScopeOfPrefixTokens: a worker token scoped by a job prefix
// acks in a batch the jobs its prefix covers, and only those (403 in the
// result of any other, nothing applied there). Found by a mutation
// audit: a batch scope check that honoured exact-job tokens only
// survived every API test (which used an exact-job token).
func TestAckBatchScopeOfPrefixTokens(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	for _, job := range []string{"team-a", "other"} {
		okTok(t, "PUT", m.URL+"/v1/jobs/"+job, op, []byte(`{}`), nil)
		okTok(t, "POST", m.URL+"/v1/jobs/"+job+"/attempts", op, []byte(`{"attempt_id":"a1","tasks":[{"id":"a","capabilities":["input"]}]}`), nil)
		okTok(t, "POST", m.URL+"/v1/jobs/"+job+"/epochs", op, []byte(`{"generation":1,"epoch":1}`), nil)
	}
	team, _ := createToken(t, m.URL, op, `{"role":"worker","job_prefix":"team-"}`)
	x := map[string][]byte{"input": []byte("x")}
	body, _ := json.Marshal(map[string]any{"acks": []any{batchItem("team-a", 1, "a", 1, x), batchItem("other", 1, "a", 1, x)}})
	var out wire.AckBatchAnswer
	okTok(t, "POST", m.URL+"/v1/acks", team, body, &out)
	if len(out.Results) != 2 || out.Results[0].Status != http.StatusOK ||
		out.Results[1].Status != http.StatusForbidden || out.Results[1].Error == nil || out.Results[1].Error.Code != wire.CodeForbidden {
		t.Fatalf("prefix token acking team-a and other: %+v", out.Results)
	}
	for job, want := range map[string]int{"team-a": 1, "other": 0} {
		var e wire.Epoch
		okTok(t, "GET", m.URL+"/v1/jobs/"+job+"/epochs/1", op, nil, &e)
		if e.Acked != want {
			t.Errorf("job %s: %d acks after the batch, want %d", job, e.Acked, want)
		}
	}
}
