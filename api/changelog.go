package api

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// changelogCollector exports, per job and task with a manifest in the
// job's latest completed checkpoint, what a restore from it replays: its
// bytes in all, the changelog's bytes and segments since the last
// materialization. Read from this member's state at each scrape. A
// changelog that keeps growing against a small upload per epoch says to
// materialize more often.
type changelogCollector struct {
	fsm                          *fsm.FSM
	restore, changelog, segments *prometheus.Desc
}

func newChangelogCollector(f *fsm.FSM) *changelogCollector {
	labels := []string{"job_id", "task"}
	return &changelogCollector{fsm: f,
		restore: prometheus.NewDesc("metastore_task_restore_bytes",
			"Bytes a restore of the task from the job's latest completed checkpoint reads from the object store (bases and changelog segments).", labels, nil),
		changelog: prometheus.NewDesc("metastore_task_changelog_bytes",
			"Bytes of changelog segments in the task's manifest of the job's latest completed checkpoint: grown since the last materialization, replayed by a restore.", labels, nil),
		segments: prometheus.NewDesc("metastore_task_changelog_segments",
			"Changelog segments in the task's manifest of the job's latest completed checkpoint.", labels, nil),
	}
}

func (c *changelogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.restore
	ch <- c.changelog
	ch <- c.segments
}

func (c *changelogCollector) Collect(ch chan<- prometheus.Metric) {
	if err := c.collect(ch); err != nil {
		ch <- prometheus.NewInvalidMetric(c.restore, err)
	}
}

func (c *changelogCollector) collect(ch chan<- prometheus.Metric) error {
	jobs, _, err := c.fsm.Jobs()
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.LatestCompleted == 0 {
			continue
		}
		e, _, err := c.fsm.Epoch(j.ID, j.LatestCompleted)
		if err != nil {
			if gone(err) {
				continue // subsumed since the job was read
			}
			return err
		}
		for _, a := range e.Acks {
			if a.Lineage == 0 {
				continue
			}
			m, _, err := c.fsm.Manifest(j.ID, j.LatestCompleted, a.Task)
			if err != nil {
				if gone(err) {
					continue
				}
				return err
			}
			var segBytes uint64
			for _, s := range m.Segments {
				segBytes += s.Length
			}
			ch <- prometheus.MustNewConstMetric(c.restore, prometheus.GaugeValue, float64(m.Bytes()), j.ID, a.Task)
			ch <- prometheus.MustNewConstMetric(c.changelog, prometheus.GaugeValue, float64(segBytes), j.ID, a.Task)
			ch <- prometheus.MustNewConstMetric(c.segments, prometheus.GaugeValue, float64(len(m.Segments)), j.ID, a.Task)
		}
	}
	return nil
}

// gone reports whether err says a record read a moment ago is no longer
// there (an epoch forgotten or subsumed in between).
func gone(err error) bool {
	var rule *wire.RuleError
	return errors.As(err, &rule) && (rule.Code == wire.CodeNotFound || rule.Code == wire.CodeEpochNotCompleted)
}
