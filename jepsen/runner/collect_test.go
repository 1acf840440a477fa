package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/workload"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// fakeStore answers the reads collect makes, for job wl-0 (the workload's
// first job: src-0, map-0, agg-0, sink-0) and a job of a fault's own,
// other: epoch 1 aborted, 2 subsumed, 3 completed and pinned, 4 pending.
// fail names paths answered 500 (internal) instead.
type fakeStore struct {
	mu   sync.Mutex
	fail map[string]bool
}

func (s *fakeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	fail := s.fail[r.URL.Path]
	s.mu.Unlock()
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	apiErr := func(status int, code wire.Code) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(wire.ErrorResponse{Error: wire.Error{Code: code, Message: "fake"}})
	}
	if fail {
		apiErr(http.StatusInternalServerError, wire.CodeInternal)
		return
	}
	t0 := time.Unix(1_700_000_000, 0).UTC()
	epoch := func(job string, n uint64, st wire.EpochState, pinned bool, acked int) wire.Epoch {
		e := wire.Epoch{Job: job, Epoch: n, Generation: 1, State: st, Pinned: pinned, Expected: 3, Acked: acked}
		if st == wire.EpochCompleted || st == wire.EpochSubsumed {
			at := t0.Add(time.Duration(n) * time.Second)
			e.CompletedAt = &at
		}
		return e
	}
	epochs := map[uint64]wire.Epoch{
		1: epoch("wl-0", 1, wire.EpochAborted, false, 1),
		2: epoch("wl-0", 2, wire.EpochSubsumed, false, 3),
		3: epoch("wl-0", 3, wire.EpochCompleted, true, 3),
		4: epoch("wl-0", 4, wire.EpochPending, false, 1),
	}
	acksOf := func(n uint64) []wire.Ack {
		var out []wire.Ack
		for i, task := range []string{"src-0", "agg-0", "sink-0"}[:epochs[n].Acked] {
			out = append(out, wire.Ack{Task: task, ContentHash: task + "@" + string(rune('0'+n)), Index: uint64(i + 1)})
		}
		return out
	}
	stateCaps, _ := wire.ParseCaps([]string{"state", "incremental"})
	p := r.URL.Path
	switch {
	case p == "/v1/jobs":
		reply(wire.JobList{Jobs: []wire.Job{{ID: "wl-0", Generation: 1}, {ID: "other", Generation: 1}}})
	case p == "/v1/jobs/wl-0":
		reply(wire.Job{ID: "wl-0", Generation: 1, LastEpoch: 4, LatestCompleted: 3})
	case p == "/v1/jobs/wl-0/epochs":
		reply(wire.EpochList{Epochs: []wire.Epoch{epochs[1], epochs[2], epochs[3], epochs[4]}})
	case regexp.MustCompile(`^/v1/jobs/wl-0/epochs/\d$`).MatchString(p):
		n := uint64(p[len(p)-1] - '0')
		reply(wire.EpochDetail{Epoch: epochs[n], Acks: acksOf(n)})
	case regexp.MustCompile(`^/v1/jobs/wl-0/tasks/[a-z]+-0/restore$`).MatchString(p):
		task := strings.Split(p, "/")[5]
		if r.URL.Query().Get("epoch") != "3" {
			apiErr(http.StatusBadRequest, wire.CodeInvalid)
			return
		}
		plan := wire.RestorePlan{Job: "wl-0", Task: task, Status: wire.RestoreRestored, Source: wire.RestoreSource{Job: "wl-0", Task: task, Epoch: 3, Generation: 1},
			Kinds: map[wire.Kind]wire.KindRestore{}}
		switch task {
		case "src-0":
			plan.Kinds[wire.KindInput] = wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("in@3")}
		case "sink-0":
			plan.Kinds[wire.KindOutput] = wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("out@3")}
		case "agg-0":
			plan.Capabilities = &stateCaps
			plan.Kinds[wire.KindState] = wire.KindRestore{Status: wire.RestoreRestored, Payload: []byte("st@3"),
				Manifest: &manifests.Manifest{Bases: []manifests.Base{{Key: "wl-0/agg-0/b1", Length: 4}}, Segments: []manifests.Segment{{Key: "wl-0/agg-0/s1", Length: 4, FirstSeq: 1, LastSeq: 10}}}}
		default:
			apiErr(http.StatusBadRequest, wire.CodeInvalid)
			return
		}
		reply(plan)
	case p == "/v1/jobs/wl-0/epochs/4/manifests/agg-0":
		reply(wire.ManifestAnswer{Job: "wl-0", Epoch: 4, Task: "agg-0", Manifest: &manifests.Manifest{Segments: []manifests.Segment{{Key: "wl-0/agg-0/s2", Length: 4, FirstSeq: 11, LastSeq: 20}}}})
	case p == "/v1/jobs/other":
		reply(wire.Job{ID: "other", Generation: 1, LastEpoch: 1, LatestCompleted: 1})
	case p == "/v1/jobs/other/epochs":
		reply(wire.EpochList{Epochs: []wire.Epoch{{Job: "other", Epoch: 1, Generation: 1, State: wire.EpochCompleted, Expected: 1, Acked: 1}}})
	case p == "/v1/jobs/other/epochs/1":
		reply(wire.EpochDetail{Epoch: wire.Epoch{Job: "other", Epoch: 1, Generation: 1, State: wire.EpochCompleted, Expected: 1, Acked: 1}, Acks: []wire.Ack{{Task: "t", ContentHash: "h"}}})
	case p == "/v1/jobs/other/attempts/1":
		caps, _ := wire.ParseCaps([]string{"state"})
		reply(wire.AttemptDetail{TaskList: []wire.Task{{ID: "t", Caps: caps}}})
	case p == "/v1/jobs/other/tasks/t/restore":
		reply(wire.RestorePlan{Job: "other", Task: "t", Status: wire.RestoreRestored, Source: wire.RestoreSource{Job: "other", Task: "t", Epoch: 1},
			Kinds: map[wire.Kind]wire.KindRestore{wire.KindState: {Status: wire.RestoreRestored, Manifest: &manifests.Manifest{Segments: []manifests.Segment{{Key: "other/t/g", Length: 1, FirstSeq: 1, LastSeq: 1}}}}}})
	default:
		// Any other read (a manifest of a task that acknowledged none):
		// not found.
		apiErr(http.StatusNotFound, wire.CodeNotFound)
	}
}

func collectFrom(t *testing.T, s *fakeStore) (*checker.Final, error) {
	t.Helper()
	srv := httptest.NewServer(s)
	defer srv.Close()
	cl, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true, MaxAttempts: 2,
		BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := &checker.Final{Jobs: map[string]*checker.JobFinal{}, Records: map[string]checker.BlobRecord{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = collect(ctx, cl, &workload.Result{Jobs: []string{"wl-0"}}, f)
	return f, err
}

// TestCollectReadsEveryEpoch: the final state holds every epoch the store
// remembers, whatever its state, with its ack records; for a completed
// epoch the restore of that very epoch (?epoch=) of every expected task
// (not the stateless map-0), its main payload and its manifest's keys;
// for a pending one the manifest of each state task; the jobs the
// workload did not create go to Others, read with their attempt's tasks.
func TestCollectReadsEveryEpoch(t *testing.T) {
	s := &fakeStore{}
	f, err := collectFrom(t, s)
	if err != nil {
		t.Fatalf("collect: %v", err)
	}
	jf := f.Jobs["wl-0"]
	if jf == nil || jf.Generation != 1 || jf.LatestCompleted != 3 {
		t.Fatalf("job wl-0: %+v", jf)
	}
	var got []string
	for _, e := range jf.Epochs {
		got = append(got, string(rune('0'+e.Epoch))+":"+e.State)
		if e.Acked != len(e.Acks) {
			t.Errorf("epoch %d: acked %d, %d ack records", e.Epoch, e.Acked, len(e.Acks))
		}
		for task, a := range e.Acks {
			if a.Hash != task+"@"+string(rune('0'+e.Epoch)) {
				t.Errorf("epoch %d task %s: hash %q", e.Epoch, task, a.Hash)
			}
		}
		switch e.State {
		case "completed":
			if !e.Pinned {
				t.Errorf("epoch 3 not pinned")
			}
			want := map[string]checker.TaskCheckpoint{
				"src-0":  {Value: "in@3"},
				"sink-0": {Value: "out@3"},
				"agg-0":  {Value: "st@3", HasManifest: true, Keys: []string{"wl-0/agg-0/b1", "wl-0/agg-0/s1"}},
			}
			if len(e.Tasks) != len(want) {
				t.Errorf("epoch 3 tasks %v, want %v", e.Tasks, want)
			}
			for task, w := range want {
				g := e.Tasks[task]
				if g.Value != w.Value || g.HasManifest != w.HasManifest || !slices.Equal(g.Keys, w.Keys) {
					t.Errorf("epoch 3 task %s: %+v, want %+v", task, g, w)
				}
			}
		case "pending":
			if len(e.Tasks) != 1 || !e.Tasks["agg-0"].HasManifest || !slices.Equal(e.Tasks["agg-0"].Keys, []string{"wl-0/agg-0/s2"}) {
				t.Errorf("epoch 4 tasks %+v, want agg-0's manifest of s2", e.Tasks)
			}
		default:
			if len(e.Tasks) != 0 {
				t.Errorf("epoch %d (%s) has tasks %+v", e.Epoch, e.State, e.Tasks)
			}
		}
	}
	if !slices.Equal(got, []string{"1:aborted", "2:subsumed", "3:completed", "4:pending"}) {
		t.Fatalf("epochs %v", got)
	}
	o := f.Others["other"]
	if o == nil || len(o.Epochs) != 1 || !slices.Equal(o.Epochs[0].Tasks["t"].Keys, []string{"other/t/g"}) {
		t.Fatalf("other job: %+v", o)
	}
	if _, mine := f.Others["wl-0"]; mine {
		t.Fatal("the workload's job read as another's")
	}
}

// TestCollectFailsOnAnyUnreadableCheckpoint: a failed read of an epoch,
// of a completed checkpoint's restore, or of a pending manifest (other
// than not found) fails the collection, so the checkers report the final
// state as not collected rather than judge a partial one.
func TestCollectFailsOnAnyUnreadableCheckpoint(t *testing.T) {
	for _, path := range []string{
		"/v1/jobs/wl-0",
		"/v1/jobs/wl-0/epochs",
		"/v1/jobs/wl-0/epochs/2",
		"/v1/jobs/wl-0/tasks/agg-0/restore",
		"/v1/jobs/wl-0/tasks/src-0/restore",
		"/v1/jobs/wl-0/epochs/4/manifests/agg-0",
		"/v1/jobs",
		"/v1/jobs/other/attempts/1",
	} {
		_, err := collectFrom(t, &fakeStore{fail: map[string]bool{path: true}})
		if err == nil {
			t.Errorf("collect succeeded with %s failing", path)
		}
	}
}
