package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// batchItem is one ack of a POST /v1/acks body.
func batchItem(job string, epoch uint64, task string, gen uint64, payloads map[string][]byte) map[string]any {
	return map[string]any{"job": job, "epoch": epoch, "task": task, "generation": gen, "payloads": payloads}
}

// TestAckBatchAnswersEachAck: the acks of a batch are applied and answered
// one by one, as their own route answers them: acks of two jobs applied
// (one completing its epoch), a retry answered with the stored ack, and
// the refusals (an epoch never begun, a fenced generation, a capability
// the task lacks, an invalid task id) answered in their own results with
// their route's status and code, changing nothing.
func TestAckBatchAnswersEachAck(t *testing.T) {
	m := startSingle(t)
	two := []taskSpec{{ID: "a", Caps: []string{"input"}}, {ID: "b", Caps: []string{"input"}}}
	j1 := createJob(t, m.URL, "batch-one", two)
	j2 := createJob(t, m.URL, "batch-two", two)
	j1.begin(t, 1)
	j2.begin(t, 1)
	first := j1.ack(t, 1, "a", map[string][]byte{"input": []byte("a1")})

	in := func(s string) map[string][]byte { return map[string][]byte{"input": []byte(s)} }
	var out wire.AckBatchAnswer
	ok(t, "POST", m.URL+"/v1/acks", map[string]any{"acks": []any{
		batchItem("batch-one", 1, "b", 1, in("b1")),                                // completes epoch 1 of batch-one
		batchItem("batch-two", 1, "a", 1, in("a1")),                                // a first ack of batch-two
		batchItem("batch-one", 1, "a", 1, in("a1")),                                // a retry: the stored ack
		batchItem("batch-two", 7, "b", 1, in("b7")),                                // never begun
		batchItem("batch-two", 1, "b", 9, in("b1")),                                // a generation that does not exist
		batchItem("batch-two", 1, "b", 1, map[string][]byte{"state": []byte("x")}), // not its capability
		batchItem("batch-two", 1, "b/../a", 1, in("b1")),                           // not an id
	}}, &out)
	want := []struct {
		status int
		code   wire.Code
		field  string
	}{{200, "", ""}, {200, "", ""}, {200, "", ""},
		{404, wire.CodeNotFound, "epoch"}, {400, wire.CodeInvalid, "generation"},
		{409, wire.CodeCapabilityMissing, "payloads.state"}, {400, wire.CodeInvalid, "task"}}
	if len(out.Results) != len(want) {
		t.Fatalf("%d results for %d acks: %+v", len(out.Results), len(want), out.Results)
	}
	for i, w := range want {
		r := out.Results[i]
		if r.Status != w.status {
			t.Errorf("ack %d: status %d, want %d (%+v)", i, r.Status, w.status, r.Error)
			continue
		}
		if w.status == http.StatusOK {
			if r.Ack == nil || r.Ack.Ack == nil || r.Ack.Epoch == nil || r.Error != nil {
				t.Errorf("ack %d: answer %+v", i, r)
			}
			continue
		}
		if r.Ack != nil || r.Error == nil || r.Error.Code != w.code || r.Error.Field != w.field || r.Error.Message == "" {
			t.Errorf("ack %d: %+v (error %+v), want code %s on %q", i, r, r.Error, w.code, w.field)
		}
	}
	if !out.Results[0].Ack.Completed || out.Results[0].Ack.Epoch.State != "completed" {
		t.Errorf("the batch's ack of batch-one's last task did not complete epoch 1: %+v", out.Results[0].Ack)
	}
	if got := out.Results[2].Ack.Ack; got.At != first.Ack.At || got.Index != first.Ack.Index {
		t.Errorf("a retried ack in a batch answered %+v, not the stored ack %+v", got, first.Ack)
	}
	// Only the accepted acks changed the state.
	var e wire.Epoch
	ok(t, "GET", j2.base+"/epochs/1", nil, &e)
	if e.Acked != 1 || e.State != "pending" {
		t.Errorf("batch-two's epoch 1 after the batch: acked %d, %s; want 1 ack (a's), pending", e.Acked, e.State)
	}
	if r := do(t, "GET", j2.base+"/epochs/7", nil); r.status != http.StatusNotFound {
		t.Errorf("epoch 7 of batch-two: %d %s", r.status, r.body)
	}
}

// TestAckBatchRefusedWhole: what the batch route refuses as a whole, with
// nothing applied: no acks, too many, an unknown field of an ack, and a
// body that is not JSON.
func TestAckBatchRefusedWhole(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "whole", []taskSpec{{ID: "a", Caps: []string{"input"}}})
	j.begin(t, 1)
	var tooMany []any
	for range wire.MaxBatchAcks + 1 {
		tooMany = append(tooMany, batchItem("whole", 1, "a", 1, map[string][]byte{"input": []byte("x")}))
	}
	for name, c := range map[string]struct {
		body  any
		code  wire.Code
		field string
	}{
		"no acks":       {map[string]any{"acks": []any{}}, wire.CodeInvalid, "acks"},
		"no field":      {map[string]any{}, wire.CodeInvalid, "acks"},
		"too many":      {map[string]any{"acks": tooMany}, wire.CodeInvalid, "acks"},
		"unknown field": {`{"acks":[{"job":"whole","epoch":1,"task":"a","generation":1,"extra":1}]}`, wire.CodeUnknownField, ""},
		"not json":      {`{"acks":[`, wire.CodeInvalidJSON, ""},
	} {
		r := do(t, "POST", m.URL+"/v1/acks", c.body)
		var e apiError
		if r.status != http.StatusBadRequest || json.Unmarshal(r.body, &e) != nil || e.Error.Code != c.code || (c.field != "" && e.Error.Field != c.field) {
			t.Errorf("%s: %d %s, want 400 %s", name, r.status, r.body, c.code)
		}
	}
	var e wire.Epoch
	ok(t, "GET", j.base+"/epochs/1", nil, &e)
	if e.Acked != 0 {
		t.Errorf("refused batches applied %d acks", e.Acked)
	}
}

// TestAckBatchAuthorizesEachAck: with auth on, a worker token scoped to
// one job has its acks of that job applied and those of another refused
// 403 in their results, the other job untouched; a batch without a token
// is refused whole (401).
func TestAckBatchAuthorizesEachAck(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	for _, job := range []string{"mine", "theirs"} {
		okTok(t, "PUT", m.URL+"/v1/jobs/"+job, op, []byte(`{}`), nil)
		okTok(t, "POST", m.URL+"/v1/jobs/"+job+"/attempts", op, []byte(`{"attempt_id":"a1","tasks":[{"id":"a","capabilities":["input"]}]}`), nil)
		okTok(t, "POST", m.URL+"/v1/jobs/"+job+"/epochs", op, []byte(`{"generation":1,"epoch":1}`), nil)
	}
	worker, _ := createToken(t, m.URL, op, `{"role":"worker","job":"mine"}`)
	body, _ := json.Marshal(map[string]any{"acks": []any{
		batchItem("mine", 1, "a", 1, map[string][]byte{"input": []byte("x")}),
		batchItem("theirs", 1, "a", 1, map[string][]byte{"input": []byte("x")}),
	}})
	if r := doTok(t, "POST", m.URL+"/v1/acks", "", body); r.status != http.StatusUnauthorized {
		t.Errorf("a batch without a token: %d %s", r.status, r.body)
	}
	var out wire.AckBatchAnswer
	okTok(t, "POST", m.URL+"/v1/acks", worker, body, &out)
	if len(out.Results) != 2 || out.Results[0].Status != http.StatusOK ||
		out.Results[1].Status != http.StatusForbidden || out.Results[1].Error == nil || out.Results[1].Error.Code != wire.CodeForbidden ||
		!strings.Contains(out.Results[1].Error.Message, `"theirs"`) {
		t.Fatalf("worker of job mine acking mine and theirs: %+v", out.Results)
	}
	for job, want := range map[string]int{"mine": 1, "theirs": 0} {
		var e wire.Epoch
		okTok(t, "GET", m.URL+"/v1/jobs/"+job+"/epochs/1", op, nil, &e)
		if e.Acked != want {
			t.Errorf("job %s: %d acks after the batch, want %d", job, e.Acked, want)
		}
	}
}

// TestAckBatchCountsAgainstRateLimit: a batch counts as many requests as
// it holds acks, so batching does not lift a client's --rate-limit, also
// when a follower forwards it.
func TestAckBatchCountsAgainstRateLimit(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s: the bucket does not refill during the test
		c.RateBurst = 20
	})
	c := clientFrom("127.0.0.4")
	var acks []any
	for i := range 15 {
		acks = append(acks, batchItem("nojob", 1, fmt.Sprintf("t%d", i), 1, nil))
	}
	body, _ := json.Marshal(map[string]any{"acks": acks})
	post := func(base string) int {
		req, _ := http.NewRequest("POST", base+"/v1/acks", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// 15 of the burst of 20, then 5 left: the second batch is refused.
	if s := post(m.URL); s != http.StatusOK {
		t.Fatalf("first batch of 15: %d", s)
	}
	if s := post(m.URL); s != http.StatusTooManyRequests {
		t.Fatalf("second batch of 15 with 5 tokens left: %d, want 429", s)
	}

	// Sent to a follower, which forwards it (the leader does not count
	// what a member forwards): the follower counts the batch's acks.
	ms := testmember.StartClusterWith(t, 3, func(c *config.Config) {
		c.RateLimit = 0.5
		c.RateBurst = 20
	})
	var follower *member
	waitFor(t, 10*time.Second, "a leader", func() bool { return testmember.LeaderOf(ms) != nil })
	for _, f := range ms {
		if !f.Node.IsLeader() {
			follower = f
			break
		}
	}
	if s := post(follower.URL); s != http.StatusOK {
		t.Fatalf("first batch of 15 through a follower: %d", s)
	}
	if s := post(follower.URL); s != http.StatusTooManyRequests {
		t.Fatalf("second batch of 15 through a follower with 5 tokens left: %d, want 429", s)
	}
}
