package client_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// TestRestorePlanInSequenceOrder: the segments of a restore plan come in
// sequence order although their keys sort the other way round, over two
// acks; Ranges and OpenState, which take the plan's order as it is, replay
// the changelog in order.
func TestRestorePlanInSequenceOrder(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)
	tasks := []wire.Task{{ID: "agg", Caps: mustCaps(t, "state", "incremental")}}
	if _, err := c.PutJob(ctx, "order", wire.JobConfig{Retained: 2}); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartAttempt(ctx, "order", "a1", tasks)
	if err != nil {
		t.Fatal(err)
	}
	// Upload slots get random keys: upload six blobs, then number them in
	// descending key order, so the first segment has the greatest key.
	const n = 6
	var keys []string
	bodies := map[string]string{}
	for i := range n {
		body := []byte(fmt.Sprintf("blob %d", i))
		key, err := c.Upload(ctx, "order", a.Generation, "agg", bytes.NewReader(body), int64(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		bodies[key] = string(body)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	ts, err := client.NewTaskState(nil, tasks[0].Caps)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for epoch, half := range [][]string{keys[:n/2], keys[n/2:]} {
		for _, k := range half {
			seq := uint64(slices.Index(keys, k) + 1)
			if err := ts.AddBlob(k, 6, ""); err != nil {
				t.Fatal(err)
			}
			if err := ts.AddSegment(k, 0, 6, seq, seq); err != nil {
				t.Fatal(err)
			}
			want.WriteString(bodies[k])
		}
		e := uint64(epoch + 1)
		if _, err := c.BeginEpoch(ctx, "order", a.Generation, e); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Ack(ctx, "order", a.Generation, e, "agg", client.AckRequest{Manifest: ts.Manifest()}); err != nil {
			t.Fatal(err)
		}
		ts.Acked()
	}

	r, err := c.Restore(ctx, "order", "agg", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var planKeys []string
	var seqs []uint64
	for _, s := range r.Plan.Kinds[wire.KindState].Manifest.Segments {
		planKeys = append(planKeys, s.Key)
		seqs = append(seqs, s.FirstSeq)
	}
	if !slices.Equal(planKeys, keys) || !slices.IsSorted(seqs) {
		t.Fatalf("plan segments by key %q, seqs %v; want the keys in sequence order %q", planKeys, seqs, keys)
	}
	var rangeKeys []string
	for _, rg := range r.Ranges() {
		rangeKeys = append(rangeKeys, rg.Key)
	}
	if !slices.Equal(rangeKeys, keys) {
		t.Fatalf("Ranges %q, want %q", rangeKeys, keys)
	}
	if got := string(readState(t, r)); got != want.String() {
		t.Fatalf("state replayed as %q, want %q", got, want.String())
	}
}
