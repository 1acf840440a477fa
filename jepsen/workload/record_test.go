package workload_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/workload"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// member stands in for a metastore member answering one restore plan of
// job wl-1 task agg-1 (epoch 1) and the reads of its blobs, with object
// bytes that may differ from those the workload uploaded.
func member(t *testing.T, plan wire.RestorePlan, objects map[string][]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/jobs/wl-1/tasks/agg-1/restore":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(plan)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/objects/"):
			b, ok := objects[strings.TrimPrefix(r.URL.Path, "/v1/objects/")]
			off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
			n, _ := strconv.Atoi(r.URL.Query().Get("length"))
			if !ok || off+n > len(b) {
				http.Error(w, "no such object", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(b[off : off+n])
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// ackOK is the ok ack of wl-1/agg-1 in epoch 1 that the plans below
// restore: payload "v1" and a state manifest of key.
func ackOK(key string, at time.Time) history.Op {
	return history.Op{ID: 0, Client: 1, Kind: history.KindAck, Job: "wl-1", Task: "agg-1", Gen: 1, Epoch: 1,
		Value: "v1", HasManifest: true, Keys: []string{key}, Commits: []string{key}, Completed: true, Hash: "h1",
		Invoke: at, Complete: at.Add(time.Millisecond), Outcome: history.OK}
}

func restorePlan(kr wire.KindRestore) wire.RestorePlan {
	caps, _ := wire.ParseCaps([]string{"state"})
	return wire.RestorePlan{Job: "wl-1", Task: "agg-1", Status: wire.RestoreRestored,
		Source:       wire.RestoreSource{Job: "wl-1", Task: "agg-1", Epoch: 1, Generation: 1},
		Capabilities: &caps, Kinds: map[wire.Kind]wire.KindRestore{wire.KindState: kr}}
}

// check runs the checkers that read restores on the ack and the recorded
// restore, and returns the verdicts that failed.
func check(ops []history.Op) []checker.Verdict {
	in := &checker.Input{Ops: ops}
	var failed []checker.Verdict
	for _, v := range []checker.Verdict{checker.Acks(in), checker.GCSafety(in), checker.Linearizable(in)} {
		if !v.OK {
			failed = append(failed, v)
		}
	}
	return failed
}

// TestRestoreOfChangedBytesIsAViolation: a restore whose blob holds bytes
// other than those the workload uploaded, on every read, is a violation
// the checkers must report ("blob bytes read back equal what was
// uploaded", checker.Acks). The workload declares a CRC32C for every
// range, so the client's ReadRange turns such bytes into ErrChecksum
// before the workload's own comparison (ErrContent, CodeContent) sees
// them; the restore is then recorded as a plain failed read (code
// "error"), which no checker reads. Fails today.
func TestRestoreOfChangedBytesIsAViolation(t *testing.T) {
	key := "wl-1/agg-1/00000000000000000000000000000001"
	uploaded := []byte(strings.Repeat("uploaded|", 40))
	stored := []byte(strings.Repeat("replaced|", 40)) // same length, other bytes
	plan := restorePlan(wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("v1"),
		Manifest: &manifests.Manifest{Bases: []manifests.Base{}, Segments: []manifests.Segment{
			{Key: key, Offset: 0, Length: uint64(len(uploaded)), FirstSeq: 1, LastSeq: 10, CRC32C: manifests.CRC32C(uploaded)}}}})
	srv := member(t, plan, map[string][]byte{key: stored})

	h := history.New()
	w, err := workload.New(workload.Config{Members: map[string]string{"n1": srv.URL}}, h)
	if err != nil {
		t.Fatal(err)
	}
	w.Uploaded(key, uploaded)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rerr := w.RestoreVia(ctx, srv.URL, "wl-1", "agg-1")
	if rerr == nil {
		t.Fatal("the restore read the changed bytes without error")
	}
	ops := append([]history.Op{ackOK(key, start.Add(-time.Second))}, h.Snapshot()...)
	for i := range ops {
		ops[i].ID = i
	}
	r := ops[1]
	t.Logf("restore recorded: outcome %s, code %q, key %q, error %q", r.Outcome, r.Code, r.Key, r.Error)
	if failed := check(ops); len(failed) == 0 {
		t.Errorf("a restore read bytes other than those uploaded (%v) and every checker passed: the history records it as outcome %s code %q", rerr, r.Outcome, r.Code)
	}

	// Control: the same bytes in a range that declares no CRC32C reach
	// the workload's comparison, and the acks checker reports them.
	plan.Kinds[wire.KindState].Manifest.Segments[0].CRC32C = ""
	srv2 := member(t, plan, map[string][]byte{key: stored})
	h2 := history.New()
	w2, _ := workload.New(workload.Config{Members: map[string]string{"n1": srv2.URL}}, h2)
	w2.Uploaded(key, uploaded)
	_ = w2.RestoreVia(ctx, srv2.URL, "wl-1", "agg-1")
	ops2 := append([]history.Op{ackOK(key, start.Add(-time.Second))}, h2.Snapshot()...)
	for i := range ops2 {
		ops2[i].ID = i
	}
	if ops2[1].Code != workload.CodeContent || len(check(ops2)) == 0 {
		t.Fatalf("control: a range without CRC32C read with other bytes was recorded with code %q and not reported", ops2[1].Code)
	}
}

// TestRestoreOfLostStateIsAViolation: a restore of a state task whose
// latest checkpoint (epoch 1) answers neither the state payload nor the
// manifest that its only ack of epoch 1 (ok) sent has lost an
// acknowledged write. The workload records the restore's payload under
// the kind the store's plan names (Capabilities) and its manifest only
// when the plan has one, so it records an empty value and no manifest;
// checker.Acks exempts a restore's empty payload (a task without that
// kind) and compares manifests only when the restore recorded one. The
// task's kinds are the workload's own (Tasks), not the store's to say.
// Fails today.
func TestRestoreOfLostStateIsAViolation(t *testing.T) {
	key := "wl-1/agg-1/00000000000000000000000000000002"
	for _, tc := range []struct {
		name string
		plan wire.RestorePlan
	}{
		{"state restored without payload or manifest", restorePlan(wire.KindRestore{Status: wire.RestoreRestored})},
		{"payload restored, manifest lost", restorePlan(wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("v1")})},
		{"control: a payload no ack sent", restorePlan(wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("never-sent")})},
		{"plan without capabilities", func() wire.RestorePlan {
			p := restorePlan(wire.KindRestore{Status: wire.RestoreRestored})
			p.Capabilities = nil
			return p
		}()},
	} {
		srv := member(t, tc.plan, nil)
		h := history.New()
		w, err := workload.New(workload.Config{Members: map[string]string{"n1": srv.URL}}, h)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rerr := w.RestoreVia(ctx, srv.URL, "wl-1", "agg-1")
		cancel()
		if rerr != nil {
			t.Fatalf("%s: restore: %v", tc.name, rerr)
		}
		ops := append([]history.Op{ackOK(key, start.Add(-time.Second))}, h.Snapshot()...)
		for i := range ops {
			ops[i].ID = i
		}
		r := ops[1]
		if r.Outcome != history.OK || r.ReadEpoch != 1 {
			t.Fatalf("%s: restore recorded %s epoch %d, want ok epoch 1", tc.name, r.Outcome, r.ReadEpoch)
		}
		if failed := check(ops); len(failed) == 0 {
			t.Errorf("%s: the restore of checkpoint 1 returned value %q and has_manifest %v where the ok ack sent %q and a manifest of %v, and every checker passed",
				tc.name, r.Value, r.HasManifest, "v1", []string{key})
		}
	}
}
