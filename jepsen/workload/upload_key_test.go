package workload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/workload"
	"github.com/metastore/metastore/wire"
)

// TestRepeatedUploadKeyIsRecorded: a member that answers every upload-slot
// request with the same key. The workload's first upload writes the
// object; the second is recorded with workload.CodeRepeatedKey and writes
// nothing, the recorded content stays the first upload's (a checkpoint
// may reference it), and gc-safety reports the key handed out twice.
func TestRepeatedUploadKeyIsRecorded(t *testing.T) {
	const key = "wl-0/agg-0/00000000000000000000000000000007"
	var mu sync.Mutex
	var puts [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs/wl-0/uploads":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(wire.Uploads{LeaseUntil: time.Now().Add(time.Minute), Uploads: []wire.Upload{
				{Key: key, Method: http.MethodPut, URL: "http://" + r.Host + "/v1/objects/" + key, ExpiresAt: time.Now().Add(time.Minute)}}})
		case r.Method == http.MethodPut && r.URL.Path == "/v1/objects/"+key:
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			puts = append(puts, b)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(wire.ObjectPut{Key: key, Size: int64(len(b))})
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
		}
	}))
	defer srv.Close()

	h := history.New()
	w, err := workload.New(workload.Config{Members: map[string]string{"n1": srv.URL}}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if k, ok := w.UploadOnce(ctx, "wl-0", 1, 1); !ok || k != key {
		t.Fatalf("first upload: key %q ok %v", k, ok)
	}
	first := append([]byte(nil), w.Content(key)...)
	if _, ok := w.UploadOnce(ctx, "wl-0", 1, 2); ok {
		t.Fatal("second upload to a repeated key reported ok")
	}
	ops := h.Snapshot()
	if len(ops) != 2 || ops[0].Outcome != history.OK || ops[1].Code != workload.CodeRepeatedKey || ops[1].Key != key {
		t.Fatalf("uploads recorded %+v", ops)
	}
	mu.Lock()
	n := len(puts)
	mu.Unlock()
	if n != 1 || !bytes.Equal(puts[0], first) || !bytes.Equal(w.Content(key), first) {
		t.Fatalf("%d PUTs; the recorded content changed: %v", n, !bytes.Equal(w.Content(key), first))
	}
	if v := checker.GCSafety(&checker.Input{Ops: ops}); v.OK {
		t.Fatalf("gc-safety passed a key handed out twice: %s", v.Summary)
	}
}
