package workload_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/workload"
	"github.com/metastore/metastore/wire"
)

// TestAckRecordsWhatWasSent: a worker's ack op records the generation,
// epoch and payload the request carried (not the worker's later state),
// is invoked before the request reached the member and completed after
// its answer, and takes the content hash and completed_by_this_ack from
// the answer; a refusal (fenced) is a fail with the API code.
func TestAckRecordsWhatWasSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		want history.Outcome
	}{{"ok", true, history.OK}, {"fenced", false, history.Fail}} {
		var mu sync.Mutex
		var got wire.TaskAckRequest
		var path string
		var at time.Time
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			at = time.Now()
			path = r.URL.Path
			_ = json.NewDecoder(r.Body).Decode(&got)
			w.Header().Set("Content-Type", "application/json")
			if !tc.ok {
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(wire.ErrorResponse{Error: wire.Error{Code: wire.CodeFenced, Message: "fenced"}})
				return
			}
			_ = json.NewEncoder(w).Encode(wire.AckResult{Ack: &wire.Ack{Task: "src-0", ContentHash: "hash-of-the-store"}, Completed: true})
		}))
		h := history.New()
		w, err := workload.New(workload.Config{Members: map[string]string{"n1": srv.URL}}, h)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		w.AckOnce(ctx, "wl-0", 7, 3)
		cancel()
		srv.Close()
		ops := h.Snapshot()
		if len(ops) != 1 {
			t.Fatalf("%s: %d ops recorded, want 1: %+v", tc.name, len(ops), ops)
		}
		o := ops[0]
		mu.Lock()
		sent := string(got.Payloads[wire.KindInput])
		if path != "/v1/jobs/wl-0/epochs/3/acks/src-0" || got.Generation != 7 {
			t.Errorf("%s: request %s generation %d", tc.name, path, got.Generation)
		}
		if o.Kind != history.KindAck || o.Job != "wl-0" || o.Task != "src-0" || o.Gen != 7 || o.Epoch != 3 || o.Value != sent || sent == "" || o.HasManifest {
			t.Errorf("%s: op %+v does not record the request (payload %q)", tc.name, o, sent)
		}
		if at.Before(o.Invoke) || o.Complete.Before(at) {
			t.Errorf("%s: op interval [%s, %s] does not contain the request's arrival %s", tc.name, o.Invoke, o.Complete, at)
		}
		mu.Unlock()
		if o.Outcome != tc.want {
			t.Errorf("%s: outcome %s (%s), want %s", tc.name, o.Outcome, o.Code, tc.want)
		}
		if tc.ok && (o.Hash != "hash-of-the-store" || !o.Completed) {
			t.Errorf("%s: hash %q completed %v, want the answer's", tc.name, o.Hash, o.Completed)
		}
		if !tc.ok && (o.Code != string(wire.CodeFenced) || o.Hash != "" || o.Completed) {
			t.Errorf("%s: code %q hash %q completed %v", tc.name, o.Code, o.Hash, o.Completed)
		}
	}
}
