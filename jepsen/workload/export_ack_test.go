package workload

import "context"

// AckOnce runs the ack of epoch by the source task of a job named job
// (job number 0's task set) in generation gen, as a worker does.
func (w *Workload) AckOnce(ctx context.Context, job string, gen, epoch uint64) {
	j := newJobRun(w, 0, job)
	wk := j.workers[0]
	wk.gen = gen
	wk.ack(ctx, gen, epoch)
}
