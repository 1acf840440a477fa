package workload

import (
	"context"

	"github.com/metastore/metastore/client"
)

// RestoreVia records one restore of task through endpoint, as the
// verifier and a worker's reset do (Workload.restore).
func (w *Workload) RestoreVia(ctx context.Context, endpoint, job, task string) error {
	c, id := w.newClient([]string{endpoint})
	_, err := w.restore(ctx, c, id, job, task, client.RestoreOptions{})
	return err
}

// Uploaded records content as what the workload uploaded under key.
func (w *Workload) Uploaded(key string, content []byte) { w.contents.Store(key, content) }

// UploadOnce runs one upload of state task agg-0 of a job named job (job
// number 0's task set) in generation gen and epoch e, as a worker does.
func (w *Workload) UploadOnce(ctx context.Context, job string, gen, e uint64) (string, bool) {
	j := newJobRun(w, 0, job)
	for _, wk := range j.workers {
		if wk.spec.ID == "agg-0" {
			key, _, ok := wk.upload(ctx, gen, e)
			return key, ok
		}
	}
	panic("no agg-0")
}

// Content is what the workload recorded as uploaded under key.
func (w *Workload) Content(key string) []byte {
	v, ok := w.contents.Load(key)
	if !ok {
		return nil
	}
	return v.([]byte)
}
