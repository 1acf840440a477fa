package mssut

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/metastore/metastore/bench/internal/procs"
	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// snapshotTimeout bounds the backup and the restore of Footprint.
const snapshotTimeout = time.Hour

// RestoreMethod is how Footprint restores from its snapshot.
const RestoreMethod = "metastore snapshot restore (PUT /v1/snapshot on the leader): the backup, checked against " +
	"its SHA-256, replaces the whole replicated state through Raft (raft.Restore on the leader, InstallSnapshot to " +
	"both followers); timed from the upload until every member has applied the leader's index"

// Footprint loads blobs live blobs across jobs jobs, each a job of one
// stateful incremental task whose acks commit and reference 1,000 blobs
// each (one segment of Options.FootprintBlobBytes per blob; upload slots
// 1,000 keys per request; no object bytes: the store does not read the
// object store to commit a blob). Once every member has applied the load
// it reports each running member's resident memory (VmRSS, split into
// RssAnon and RssFile) and data directory size. Then it kills a follower
// (SIGKILL), starts it again and times it until it answers its status and
// until it is ready and has applied the leader's index read before the
// kill, and reports its resident memory then (see measureRestart). Last
// it reports the time and size of a backup (metastore snapshot save: GET
// /v1/snapshot from the leader, a Raft snapshot streamed out) and the
// time to restore it (see RestoreMethod).
// The restored state is the state backed up, so the system carries on
// with it.
//
// When the restart, the backup or the restore fails, Footprint returns
// the figures measured before with the error, which it also records in
// the result (RestartError, RestoreError).
func (s *System) Footprint(ctx context.Context, blobs, jobs int) (sut.FootprintResult, error) {
	res := sut.FootprintResult{Blobs: blobs, Jobs: jobs, RestoreMethod: RestoreMethod}
	if jobs <= 0 || blobs < jobs {
		return res, fmt.Errorf("mssut: Footprint of %d blobs in %d jobs: want at least one blob per job", blobs, jobs)
	}
	c, err := s.client()
	if err != nil {
		return res, err
	}
	run := s.seq.Add(1)
	start := time.Now()
	err = s.parallel(ctx, jobs, func(ctx context.Context, j int) error {
		n := blobs / jobs
		if j < blobs%jobs {
			n++
		}
		return s.loadJob(ctx, c, fmt.Sprintf("fp-%d-%d", run, j), n)
	})
	if err != nil {
		return res, err
	}
	res.LoadSeconds = time.Since(start).Seconds()
	if err := s.waitCaughtUp(ctx); err != nil {
		return res, err
	}
	if err := s.measureMembers(&res); err != nil {
		return res, err
	}

	if err := s.measureRestart(ctx, &res); err != nil {
		res.RestartError = err.Error()
		return res, err
	}
	if err := s.backupAndRestore(ctx, run, &res); err != nil {
		res.RestoreError = err.Error()
		return res, err
	}
	return res, nil
}

// measureMembers records each running member's resident memory and data
// directory size in res. It sets every per-member slice or none.
func (s *System) measureMembers(res *sut.FootprintResult) error {
	var ids []string
	var rss, anon, file, dirs []int64
	split := true
	for _, m := range s.Members() {
		mem, err := procs.ResidentMemory(m.PID)
		if err != nil {
			return fmt.Errorf("mssut: Footprint: member %s: %w", m.ID, err)
		}
		size, err := dirBytes(m.DataDir)
		if err != nil {
			return err
		}
		ids = append(ids, m.ID)
		rss = append(rss, mem.RSS)
		anon = append(anon, mem.Anon)
		file = append(file, mem.File)
		dirs = append(dirs, size)
		split = split && mem.Split
	}
	res.MemberIDs, res.RSSBytes, res.DataDirBytes = ids, rss, dirs
	if split {
		res.RSSAnonBytes, res.RSSFileBytes = anon, file
	}
	return nil
}

// measureRestart kills a follower and starts it again from its data
// directory (as the failover workload does with the leader), timing from
// the start until it answers GET /v1/status and until it is ready and has
// applied at least the leader's applied index read right before the kill;
// then it records the member's resident memory.
func (s *System) measureRestart(ctx context.Context, res *sut.FootprintResult) error {
	leader, err := s.leader(ctx)
	if err != nil {
		return fmt.Errorf("mssut: Footprint: restart: %w", err)
	}
	var follower *proc
	for _, p := range s.running() {
		if p != leader {
			follower = p
			break
		}
	}
	if follower == nil {
		return errors.New("mssut: Footprint: restart: no running follower")
	}
	lst, err := s.status(ctx, leader)
	if err != nil {
		return fmt.Errorf("mssut: Footprint: restart: the leader's status: %w", err)
	}
	res.RestartMember, res.RestartIndex = follower.id, lst.AppliedIndex
	if err := follower.kill(); err != nil {
		return fmt.Errorf("mssut: Footprint: restart: %w", err)
	}
	r, err := s.restart(ctx, follower, lst.AppliedIndex)
	res.RestartServeSecs = r.answered.Seconds()
	if err != nil {
		return fmt.Errorf("mssut: Footprint: restart: %w", err)
	}
	res.RestartSecs, res.RestartIndex = r.caughtUp.Seconds(), r.index
	pid, ok := follower.running()
	if !ok {
		return fmt.Errorf("mssut: Footprint: restart: member %s exited after it caught up: %v", follower.id, follower.exitErr())
	}
	mem, err := procs.ResidentMemory(pid)
	if err != nil {
		return fmt.Errorf("mssut: Footprint: restart: member %s: %w", follower.id, err)
	}
	res.RestartRSSBytes = mem.RSS
	if mem.Split {
		res.RestartRSSAnonBytes, res.RestartRSSFileBytes = mem.Anon, mem.File
	}
	return nil
}

// backupAndRestore saves a backup from the leader and restores it,
// recording sizes and times in res.
func (s *System) backupAndRestore(ctx context.Context, run uint64, res *sut.FootprintResult) error {
	backup := filepath.Join(s.dir, fmt.Sprintf("footprint-%d.backup", run))
	defer os.Remove(backup)
	leader, err := s.leader(ctx)
	if err != nil {
		return err
	}
	f, err := os.Create(backup)
	if err != nil {
		return fmt.Errorf("mssut: Footprint: %w", err)
	}
	start := time.Now()
	err = s.send(ctx, leader.url(), http.MethodGet, "/v1/snapshot", nil, 0, f, snapshotTimeout)
	if err == nil {
		err = f.Sync()
	}
	res.SnapshotSecs = time.Since(start).Seconds()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mssut: Footprint: snapshot save from %s: %w", leader.id, err)
	}
	st, err := os.Stat(backup)
	if err != nil {
		return fmt.Errorf("mssut: Footprint: %w", err)
	}
	res.SnapshotBytes = st.Size()

	start = time.Now()
	if err := s.restoreSnapshot(ctx, backup, st.Size()); err != nil {
		return err
	}
	if err := s.waitRestored(ctx); err != nil {
		return fmt.Errorf("mssut: Footprint: after the snapshot restore: %w", err)
	}
	res.RestoreSecs = time.Since(start).Seconds()
	return nil
}

// restoreAttempts bounds how often Footprint sends its restore: a restore
// that loses leadership while it commits answers 503 outcome_unknown, and
// repeating it is safe (the server says so: a restore is idempotent by
// content).
const restoreAttempts = 5

// restoreSnapshot sends the backup to the leader, again to the new leader
// after an answer that says it may be repeated. The measured time includes
// the repeats.
func (s *System) restoreSnapshot(ctx context.Context, backup string, size int64) error {
	var last error
	for attempt := 1; attempt <= restoreAttempts; attempt++ {
		leader, err := s.leader(ctx)
		if err != nil {
			return fmt.Errorf("mssut: Footprint: snapshot restore: %w (after %v)", err, last)
		}
		in, err := os.Open(backup)
		if err != nil {
			return fmt.Errorf("mssut: Footprint: %w", err)
		}
		err = s.send(ctx, leader.url(), http.MethodPut, "/v1/snapshot", in, size, nil, snapshotTimeout)
		in.Close()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("mssut: Footprint: snapshot restore on %s (attempt %d): %w", leader.id, attempt, err)
		var ae *apiError
		if !errors.As(err, &ae) || !(ae.Retryable || ae.Status == http.StatusServiceUnavailable) {
			return last
		}
	}
	return last
}

// loadJob creates one job of Footprint and gives its task n live blobs.
func (s *System) loadJob(ctx context.Context, c *client.Client, job string, n int) error {
	const task = "t0"
	if _, err := c.PutJob(ctx, job, wire.JobConfig{Retained: 1}); err != nil {
		return fmt.Errorf("mssut: Footprint: create job %s: %w", job, err)
	}
	att, err := c.StartAttempt(ctx, job, "footprint", []wire.Task{{ID: task, Caps: statefulCaps}})
	if err != nil {
		return fmt.Errorf("mssut: Footprint: start attempt of %s: %w", job, err)
	}
	size := uint64(s.opts.FootprintBlobBytes)
	var seq uint64
	for epoch := uint64(1); n > 0; epoch++ {
		count := min(n, wire.MaxIntents)
		slots, err := uploadSlots(ctx, c, job, att.Generation, task, count)
		if err != nil {
			return err
		}
		m := &wire.ManifestAck{Delta: &manifests.Delta{}}
		for _, sl := range slots {
			m.Blobs = append(m.Blobs, wire.BlobCommit{Key: sl.Key, Size: size})
			m.Delta.AddSegments = append(m.Delta.AddSegments, manifests.Segment{Key: sl.Key, Length: size, FirstSeq: seq + 1, LastSeq: seq + 100})
			seq += 100
		}
		if err := ackEpoch(ctx, c, job, att.Generation, epoch, task, client.AckRequest{Manifest: m}); err != nil {
			return fmt.Errorf("mssut: Footprint: %w", err)
		}
		n -= count
	}
	return nil
}

// waitCaughtUp waits until every running member has applied what the
// leader had applied when the wait began.
func (s *System) waitCaughtUp(ctx context.Context) error {
	lst, err := s.leaderStatus(ctx)
	if err != nil {
		return err
	}
	return s.waitApplied(ctx, lst.AppliedIndex)
}

// waitRestored waits until every running member has installed the
// snapshot the leader restored (its last snapshot index) and applied what
// the leader has applied since.
func (s *System) waitRestored(ctx context.Context) error {
	lst, err := s.leaderStatus(ctx)
	if err != nil {
		return err
	}
	err = sut.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		for _, p := range s.running() {
			st, err := s.status(ctx, p)
			if err != nil || st.LastSnapshotIndex < lst.LastSnapshotIndex || st.AppliedIndex < lst.AppliedIndex {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("mssut: waiting for every member to install snapshot %d and apply index %d: %w", lst.LastSnapshotIndex, lst.AppliedIndex, err)
	}
	return nil
}

// waitApplied waits until every running member has applied index.
func (s *System) waitApplied(ctx context.Context, index uint64) error {
	err := sut.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, p := range s.running() {
			st, err := s.status(ctx, p)
			if err != nil || st.AppliedIndex < index {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("mssut: waiting for every member to apply index %d: %w", index, err)
	}
	return nil
}
