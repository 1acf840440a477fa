package client_test

import (
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/metastore/metastore/wire"
)

// The tests of this file pin checks of calls.go against a fake member on
// loopback.

// TestAwaitEpochBlocksUntilEnded: AwaitEpoch's reads after the first are
// blocking queries at the last index seen (at least 1), and a subsumed
// epoch ends the wait like a completed one.
func TestAwaitEpochBlocksUntilEnded(t *testing.T) {
	var mu sync.Mutex
	var queries []url.Values
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Query())
		n := len(queries)
		mu.Unlock()
		d := wire.EpochDetail{Epoch: wire.Epoch{Job: "j", Epoch: 1, State: wire.EpochPending}}
		switch n {
		case 1:
			d.ModifyIndex = 0
		case 2:
			d.ModifyIndex = 7
		case 3:
			d.State, d.ModifyIndex = wire.EpochSubsumed, 9
		default:
			d.State, d.Reason = wire.EpochAborted, "asked again after it ended"
		}
		answer(w, http.StatusOK, d)
	})
	d, err := proxiedClient(t, 2, srv.URL).AwaitEpoch(ctxT(t), "j", 1)
	if err != nil || d.State != wire.EpochSubsumed {
		t.Fatalf("AwaitEpoch: %+v %v; want the subsumed epoch", d, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"", "index=1&wait=30s", "index=7&wait=30s"}
	if len(queries) != len(want) {
		t.Fatalf("%d reads, want %d", len(queries), len(want))
	}
	for i, q := range queries {
		if q.Encode() != want[i] {
			t.Errorf("read %d asked %q, want %q", i+1, q.Encode(), want[i])
		}
	}
}

// TestEpochManifestOfNone: an epoch manifest answered as null (the task
// acknowledged no manifest) is an empty manifest, never nil.
func TestEpochManifestOfNone(t *testing.T) {
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"manifest":null}`)
	})
	m, err := proxiedClient(t, 2, srv.URL).EpochManifest(ctxT(t), "j", 1, "t")
	if err != nil || m == nil || len(m.Bases)+len(m.Segments) != 0 {
		t.Fatalf("EpochManifest answered null: %+v %v; want an empty manifest", m, err)
	}
}
