package client_test

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// TestDeleteJob: DeleteJob is refused while the job has a savepoint
// (job_pinned, naming it), forced releases the job's references, a repeat
// answers the same deletion, the deleted job's worker gets ErrJobDeleted
// (which is also ErrFenced), an unknown job ErrNotFound, and the name
// comes back with generations above the deleted one's.
func TestDeleteJob(t *testing.T) {
	m := startSingle(t)
	c := newClient(t, m.URL)
	ctx := ctxT(t)
	tasks := []wire.Task{{ID: "agg", Caps: mustCaps(t, "state", "incremental")}}
	w := newWorker(t, c, "del", "a1", tasks, false)
	for e := uint64(1); e <= 2; e++ {
		if err := w.epoch(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Pin(ctx, "del", 2, "keep"); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeleteJob(ctx, "del", false)
	var ae *client.APIError
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ae) || ae.Code != wire.CodeJobPinned || !strings.Contains(ae.Message, `epoch 2 ("keep")`) {
		t.Fatalf("delete of a job with a savepoint: %v", err)
	}
	d, err := c.DeleteJob(ctx, "del", true)
	if err != nil {
		t.Fatal(err)
	}
	if d.Job != "del" || d.Generation != w.gen || !d.Forced || len(d.PinsReleased) != 1 || d.PinsReleased[0] != (wire.PinRef{Epoch: 2, Name: "keep"}) || d.LineagesReleased == 0 {
		t.Fatalf("deletion %+v", d)
	}
	again, err := c.DeleteJob(ctx, "del", false)
	if err != nil || !reflect.DeepEqual(again, d) {
		t.Fatalf("repeated delete: %+v %v, want %+v", again, err, d)
	}
	for key := range w.blobs {
		var b wire.Blob
		if code := rawJSON(t, http.MethodGet, m.URL+"/v1/blobs/"+key, &b); code != http.StatusOK || b.Refs != 0 {
			t.Fatalf("blob %s after the delete: %d %+v", key, code, b)
		}
	}
	_, err = c.BeginEpoch(ctx, "del", w.gen, 3)
	if !errors.Is(err, client.ErrJobDeleted) || !errors.Is(err, client.ErrFenced) {
		t.Fatalf("begin by the deleted job's worker: %v", err)
	}
	if _, err := c.DeleteJob(ctx, "never", false); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete of a job that never existed: %v", err)
	}
	j, err := c.PutJob(ctx, "del", wire.JobConfig{})
	if err != nil || j.GenerationBase != w.gen || j.Generation != w.gen {
		t.Fatalf("job created again: %+v %v", j, err)
	}
	a, err := c.StartAttempt(ctx, "del", "b1", tasks)
	if err != nil || a.Generation != w.gen+1 {
		t.Fatalf("first attempt of the new job: %+v %v", a, err)
	}
	if _, err := c.BeginEpoch(ctx, "del", w.gen, 3); !errors.Is(err, client.ErrFenced) || errors.Is(err, client.ErrJobDeleted) {
		t.Fatalf("begin by the old worker after the name came back: %v", err)
	}
}
