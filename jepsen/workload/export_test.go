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
