package api

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// LateWindow is the number of a job's latest completed epochs in which late
// tasks are counted.
const LateWindow = 10

// LateTasks returns the tasks whose ack of one epoch was late: its delay
// was over twice the median delay of the epoch's acks and at least 1ms over
// it (the lower median; an epoch of one ack has no late task). A task late
// again and again is held up upstream of it (backpressure) or is slow to
// checkpoint. The console draws the same rule.
func LateTasks(acks []wire.Ack) []string {
	if len(acks) < 2 {
		return nil
	}
	delays := make([]time.Duration, len(acks))
	for i, a := range acks {
		delays[i] = time.Duration(a.Delay)
	}
	slices.Sort(delays)
	median := delays[(len(delays)-1)/2]
	var out []string
	for _, a := range acks {
		d := time.Duration(a.Delay)
		if d > 2*median && d-median >= time.Millisecond {
			out = append(out, a.Task)
		}
	}
	return out
}

// lateCollector exports, per job and task, in how many of the job's
// latest LateWindow completed epochs the task's ack was late, read from
// this member's state at each scrape. Tasks never late are left out.
type lateCollector struct {
	fsm  *fsm.FSM
	desc *prometheus.Desc
}

func newLateCollector(f *fsm.FSM) *lateCollector {
	return &lateCollector{fsm: f, desc: prometheus.NewDesc("metastore_task_late_epochs",
		"Of the job's latest 10 completed epochs, those in which the task acknowledged late (over twice the epoch's median ack delay), by job and task.",
		[]string{"job_id", "task"}, nil)}
}

func (c *lateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lateCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := LateCounts(c.fsm)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for job, tasks := range counts {
		for task, n := range tasks {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), job, task)
		}
	}
}

// LateCounts counts, per job and task, the job's latest LateWindow
// completed (or since subsumed) epochs in which the task was late.
func LateCounts(f *fsm.FSM) (map[string]map[string]int, error) {
	jobs, _, err := f.Jobs()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for _, j := range jobs {
		epochs, _, err := f.Epochs(j.ID, "")
		if err != nil {
			return nil, err
		}
		var done []uint64
		for i := len(epochs) - 1; i >= 0 && len(done) < LateWindow; i-- {
			if st := epochs[i].State; st == wire.EpochCompleted || st == wire.EpochSubsumed {
				done = append(done, epochs[i].Epoch)
			}
		}
		for _, n := range done {
			e, _, err := f.Epoch(j.ID, n)
			if gone(err) {
				continue // forgotten since the list was read
			}
			if err != nil {
				return nil, err
			}
			for _, task := range LateTasks(e.Acks) {
				if out[j.ID] == nil {
					out[j.ID] = map[string]int{}
				}
				out[j.ID][task]++
			}
		}
	}
	return out, nil
}
