package api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestCrossJobReadRefused is the attack of issue 13, item 1, over HTTP with
// auth on: a worker of job A names an ordinary (unpinned) checkpoint of job
// B as its base, or a blob of job B in add_segments, to get signed reads of
// B's blobs in its restore plan. Both are refused before anything is
// proposed, with the answer they got before job B existed, and A's plan
// grants nothing of B. Once B's checkpoint is an operator's savepoint, the
// fork works.
func TestCrossJobReadRefused(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	ctx := context.Background()
	opc := newClient(t, m, op)
	for _, j := range []string{"jobA", "jobB"} {
		if _, err := opc.PutJob(ctx, j, wire.JobConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	aTok, _ := createToken(t, m.URL, op, `{"role":"worker","job":"jobA"}`)
	bTok, _ := createToken(t, m.URL, op, `{"role":"worker","job":"jobB"}`)
	caps := fsm.Caps(0)
	if err := caps.UnmarshalJSON([]byte(`["state","incremental"]`)); err != nil {
		t.Fatal(err)
	}
	tk := wire.Task{ID: "agg-0", Caps: caps}
	a := newClient(t, m, aTok)
	at, err := a.StartAttempt(ctx, "jobA", "a-1", []wire.Task{tk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.BeginEpoch(ctx, "jobA", at.Generation, 1); err != nil {
		t.Fatal(err)
	}
	ackURL := m.URL + "/v1/jobs/jobA/epochs/1/acks/agg-0"
	attack := func(manifest string) apiError {
		t.Helper()
		r := doTok(t, "PUT", ackURL, aTok, []byte(`{"generation":1,"manifest":`+manifest+`}`))
		var e apiError
		r.decode(t, &e)
		if r.status != http.StatusNotFound || e.Error.Code != wire.CodeNotFound {
			t.Fatalf("ack with manifest %s: status %d: %s", manifest, r.status, r.body)
		}
		return e
	}
	baseAttack := `{"base":{"job":"jobB","task":"agg-0","epoch":1}}`
	beforeB := attack(baseAttack)
	ghostKey := "jobB/agg-0/0123456789abcdef0123456789abcdef"
	segAttack := func(key string) string {
		return `{"delta":{"add_segments":[{"key":"` + key + `","offset":0,"length":8,"first_seq":1,"last_seq":1}]}}`
	}
	ghostSeg := attack(segAttack(ghostKey))

	// Job B checkpoints epoch 1, unpinned.
	b := newClient(t, m, bTok)
	bt, err := b.StartAttempt(ctx, "jobB", "b-1", []wire.Task{tk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.BeginEpoch(ctx, "jobB", bt.Generation, 1); err != nil {
		t.Fatal(err)
	}
	secret := []byte("job B's secret state")
	key, err := b.Upload(ctx, "jobB", bt.Generation, "agg-0", bytes.NewReader(secret), int64(len(secret)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := client.NewTaskState(nil, caps)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.AddBlob(key, uint64(len(secret)), ""); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegment(key, 0, uint64(len(secret)), 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ack(ctx, "jobB", bt.Generation, 1, "agg-0", client.AckRequest{Manifest: ts.Manifest()}); err != nil {
		t.Fatal(err)
	}
	// The leader observes B's new blob after the ack (a Raft entry of its
	// own): wait for it, so that the index below moves only for a proposal.
	waitFor(t, 10*time.Second, "observation of "+key, func() bool {
		bl, _, err := m.FSM.Blob(key)
		return err == nil && bl.Observed != nil
	})
	before := m.FSM.AppliedIndex()

	// The same attacks now: the same answers, nothing proposed.
	if got := attack(baseAttack); got != beforeB {
		t.Fatalf("base of B's unpinned epoch: %+v, before B existed %+v", got, beforeB)
	}
	for _, base := range []string{`{"job":"jobB","task":"agg-0","epoch":9}`, `{"job":"jobB","task":"agg-7","epoch":1}`, `{"job":"jobZ","task":"agg-0","epoch":1}`} {
		if got := attack(`{"base":` + base + `}`); got.Error.Code != beforeB.Error.Code || got.Error.Field != beforeB.Error.Field {
			t.Fatalf("base %s: %+v, want the answer of %+v", base, got, beforeB)
		}
	}
	realSeg := attack(segAttack(key))
	if strings.ReplaceAll(realSeg.Error.Message, key, ghostKey) != ghostSeg.Error.Message || realSeg.Error.Code != ghostSeg.Error.Code || realSeg.Error.Field != ghostSeg.Error.Field {
		t.Fatalf("B's blob in add_segments: %+v; a key that does not exist: %+v", realSeg, ghostSeg)
	}
	if after := m.FSM.AppliedIndex(); after != before {
		t.Fatalf("refused acks were proposed: applied index %d -> %d", before, after)
	}

	// A's token gets no read of B's blob: not by a plan, not directly, and
	// not by naming B's checkpoint as the source (decided before any
	// lookup: the same answer for a job that does not exist).
	var plan struct {
		ObjectGrants map[string]string `json:"object_grants"`
	}
	okTok(t, "GET", m.URL+"/v1/jobs/jobA/tasks/agg-0/restore", aTok, nil, &plan)
	if _, leaked := plan.ObjectGrants[key]; leaked {
		t.Fatalf("A's restore plan grants a read of B's blob: %+v", plan)
	}
	if r := doTok(t, "GET", m.URL+"/v1/objects/"+key, aTok, nil); r.status != http.StatusForbidden {
		t.Fatalf("GET B's blob with A's token: %d %s", r.status, r.body)
	}
	restoreErr := func(q string) apiError {
		r := doTok(t, "GET", m.URL+"/v1/jobs/jobA/tasks/agg-0/restore?"+q, op, nil)
		var e apiError
		r.decode(t, &e)
		if r.status != http.StatusNotFound || e.Error.Code != wire.CodeNotFound {
			t.Fatalf("operator restore ?%s: %d %s", q, r.status, r.body)
		}
		return e
	}
	// Even an operator maps a restore onto another job only from a
	// savepoint; the answer does not tell an existing job from another.
	if e1, e2 := restoreErr("source_job=jobB&source_task=agg-0&epoch=1"), restoreErr("source_job=jobZ&source_task=agg-0&epoch=1"); strings.ReplaceAll(e2.Error.Message, "jobZ", "jobB") != e1.Error.Message || e1.Error.Field != "source_job" {
		t.Fatalf("restore from B's unpinned epoch: %+v", e1)
	}

	// Pinned by the operator, B's epoch 1 is a savepoint: the fork is
	// accepted and A's plan then reads B's blob.
	if _, err := opc.Pin(ctx, "jobB", 1, "sp1"); err != nil {
		t.Fatal(err)
	}
	okTok(t, "PUT", ackURL, aTok, []byte(`{"generation":1,"manifest":`+baseAttack+`}`), nil)
	okTok(t, "GET", m.URL+"/v1/jobs/jobA/tasks/agg-0/restore", aTok, nil, &plan)
	if _, ok := plan.ObjectGrants[key]; !ok {
		t.Fatalf("A forked B's savepoint, but its plan grants no read of the blob: %+v", plan)
	}
}
