package mssut

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// TestSystem starts the real processes (three members, one S3 server) and
// runs every operation of sut.System and sut.Extras at small sizes.
func TestSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sys := New(Options{})
	dir := t.TempDir()
	t0 := time.Now()
	if err := sys.Start(ctx, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			for _, f := range []string{"n1.log", "n2.log", "n3.log", "s3server.log"} {
				t.Logf("--- %s:\n%s", f, logTail(dir+"/"+f, 3000))
			}
		}
	})
	t.Logf("started in %s", time.Since(t0).Round(time.Millisecond))
	if got := sys.Name(); got != "metastore" {
		t.Errorf("Name() = %q", got)
	}
	if ms := sys.Members(); len(ms) != 3 {
		t.Fatalf("Members() = %v, want 3", ms)
	}

	// The checkpoint cycle from two tasks at once.
	const job = "j1"
	tasks := []string{"a", "b"}
	if err := sys.CreateJob(ctx, job, tasks); err != nil {
		t.Fatal(err)
	}
	epoch := uint64(0)
	cycle := func(epochs int) {
		t.Helper()
		for range epochs {
			epoch++
			if err := sys.BeginEpoch(ctx, job, epoch); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(tasks))
			for _, task := range tasks {
				wg.Go(func() {
					keys, err := sys.Keys(ctx, job, task, 2)
					if err != nil {
						errs <- err
						return
					}
					// Three segments: one in the first key, two at
					// different offsets of the second.
					segs := []sut.Segment{
						{Key: keys[0], Offset: 0, Length: 100, FirstSeq: 30*epoch + 1, LastSeq: 30*epoch + 10},
						{Key: keys[1], Offset: 0, Length: 512, FirstSeq: 30*epoch + 11, LastSeq: 30*epoch + 20},
						{Key: keys[1], Offset: 512, Length: 512, FirstSeq: 30*epoch + 21, LastSeq: 30*epoch + 30},
					}
					errs <- sys.Ack(ctx, job, task, epoch, segs)
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	start := time.Now()
	cycle(10)
	took := time.Since(start)
	t.Logf("10 epochs of 2 concurrent tasks (Keys + Ack each): %s, %.0f acks/s", took.Round(time.Millisecond), 20/took.Seconds())

	// SettleState returns once every member's state file holds what the
	// member had applied. (Its scrapes of /metrics are reads, which
	// commit, so this checks the metrics it relies on and its answer,
	// not that it waits: a SettleState that returned at once would pass.)
	applied := map[string]float64{}
	for _, p := range sys.running() {
		a, err := sys.metricOf(ctx, p, "metastore_node_fsm_applied_index")
		if err != nil {
			t.Fatal(err)
		}
		applied[p.id] = a
	}
	t0 = time.Now()
	if err := sys.SettleState(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("SettleState: %s", time.Since(t0).Round(time.Millisecond))
	for _, p := range sys.running() {
		c, err := sys.metricOf(ctx, p, "metastore_node_fsm_committed_index")
		if err != nil {
			t.Fatal(err)
		}
		if applied[p.id] == 0 || c < applied[p.id] {
			t.Fatalf("after SettleState member %s has committed index %.0f, below the %.0f it had applied", p.id, c, applied[p.id])
		}
	}

	if n, err := sys.ReadManifest(ctx, job, "a", false); err != nil || n != 30 {
		t.Fatalf("ReadManifest from the leader = %d, %v; want 30", n, err)
	}
	// A follower answers from its own state, which may lag: wait for it.
	err := sut.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		n, err := sys.ReadManifest(ctx, job, "b", true)
		return n == 30, err
	})
	if err != nil {
		t.Fatalf("stale ReadManifest: %v", err)
	}

	// Preload: one task, 5,000 segments.
	if err := sys.CreateJob(ctx, "p1", []string{"t"}); err != nil {
		t.Fatal(err)
	}
	next, err := sys.Preload(ctx, "p1", "t", 5000)
	if err != nil {
		t.Fatal(err)
	}
	// The preload ends once the leader has observed its blobs, on every
	// member's last commit (the measured acks after it do not share the
	// cores with that work).
	for _, p := range sys.running() {
		var buf strings.Builder
		if err := sys.send(ctx, p.url(), http.MethodGet, "/metrics", nil, 0, &buf, defaultStatusRequestTimeout); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "\nmetastore_blobs_unobserved 0\n") {
			t.Fatalf("%s after Preload: no metastore_blobs_unobserved 0 on /metrics", p.url())
		}
	}
	if n, err := sys.ReadManifest(ctx, "p1", "t", false); err != nil || n != 5000 {
		t.Fatalf("ReadManifest after Preload(5000) = %d, %v", n, err)
	}
	keys, err := sys.Keys(ctx, "p1", "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.BeginEpoch(ctx, "p1", next); err != nil {
		t.Fatalf("begin the epoch Preload returned (%d): %v", next, err)
	}
	if err := sys.Ack(ctx, "p1", "t", next, []sut.Segment{{Key: keys[0], Length: 10, FirstSeq: 1 << 30, LastSeq: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if n, err := sys.ReadManifest(ctx, "p1", "t", false); err != nil || n != 5001 {
		t.Fatalf("ReadManifest after one more ack = %d, %v", n, err)
	}

	// Kill the leader; the others carry on; the killed one rejoins.
	old, err := sys.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Kill(old); err != nil {
		t.Fatal(err)
	}
	if ms := sys.Members(); len(ms) != 2 {
		t.Fatalf("Members() after Kill = %v, want 2", ms)
	}
	cycle(1)
	now, err := sys.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now.ID == old.ID {
		t.Fatalf("leader %s still leads after its kill", now.ID)
	}
	if err := sys.Restart(ctx, old); err != nil {
		t.Fatal(err)
	}
	if ms := sys.Members(); len(ms) != 3 {
		t.Fatalf("Members() after Restart = %v, want 3", ms)
	}
	cycle(1)
	t.Logf("leader %s killed, %s elected, %s restarted and caught up", old.ID, now.ID, old.ID)

	// A one-task epoch delivered twice (as a client sends an ack again
	// after a timeout): the second answer is a retry's, not "completed
	// by this ack", and the epoch counts as completed all the same.
	oc, err := sys.client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.PutJob(ctx, "once", wire.JobConfig{Retained: 1}); err != nil {
		t.Fatal(err)
	}
	att, err := oc.StartAttempt(ctx, "once", "a", []wire.Task{{ID: "t", Caps: statefulCaps}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := ackEpoch(ctx, oc, "once", att.Generation, 1, "t", client.AckRequest{}); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if res, err := oc.Ack(ctx, "once", att.Generation, 1, "t", client.AckRequest{}); err != nil || res.Completed {
		t.Fatalf("a third delivery answered %+v, %v: want a retry's answer", res, err)
	}

	gcRes, err := sys.GC(ctx, 1500)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GC: %+v", gcRes)
	if gcRes.Deleted < 1500 || gcRes.PerSecond <= 0 || gcRes.DeleteRequests < 2 || gcRes.RaftEntries < 4 {
		t.Errorf("GC result implausible: %+v", gcRes)
	}
	// The members' own count of DeleteObjects calls agrees with the S3
	// server's log (a Delete call of at most 1,000 keys is one request).
	if calls, err := sys.metricSum(ctx, "metastore_blobstore_request_duration_seconds_count", `op="delete"`); err != nil {
		t.Error(err)
	} else if int(calls) != gcRes.DeleteRequests {
		t.Errorf("members counted %v delete calls, the S3 server %d DeleteObjects requests", calls, gcRes.DeleteRequests)
	}

	c := sys.Client()
	st0 := c.Stats()
	rs, err := sys.Resume(ctx, 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Resume: %+v", rs)
	// 9 stateful tasks keep their state (3 epochs, 2 segments each), 44
	// of 45 sources their input; 300 naive reads find 53 objects.
	want := sut.ResumeResult{Tasks: 100, Stateful: 10, MetastoreRequests: 54, NaiveRequests: 300, NaiveNoSuchKey: 247}
	if rs != want {
		t.Errorf("Resume = %+v, want %+v", rs, want)
	}
	if gets := c.Stats().Sub(st0).ObjectGets; gets != int64(rs.MetastoreRequests) {
		t.Errorf("the client made %d object reads, the S3 server logged %d requests", gets, rs.MetastoreRequests)
	}

	fp, err := sys.Footprint(ctx, 2000, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Footprint: %+v", fp)
	if len(fp.RSSBytes) != 3 || len(fp.DataDirBytes) != 3 || fp.SnapshotBytes <= 0 || fp.SnapshotSecs <= 0 || fp.RestoreSecs <= 0 || fp.LoadSeconds <= 0 {
		t.Errorf("Footprint result implausible: %+v", fp)
	}
	for i := range fp.RSSBytes {
		if fp.RSSBytes[i] < 1<<20 || fp.DataDirBytes[i] < 1<<20 {
			t.Errorf("member %d: %d bytes resident, %d bytes of data", i, fp.RSSBytes[i], fp.DataDirBytes[i])
		}
	}
	// The split of VmRSS (every kernel since 4.5 reports it).
	if len(fp.MemberIDs) != 3 || len(fp.RSSAnonBytes) != 3 || len(fp.RSSFileBytes) != 3 {
		t.Errorf("Footprint members %v, RssAnon %v, RssFile %v: want three of each", fp.MemberIDs, fp.RSSAnonBytes, fp.RSSFileBytes)
	} else {
		for i := range fp.RSSBytes {
			if fp.RSSAnonBytes[i] <= 0 || fp.RSSFileBytes[i] <= 0 || fp.RSSAnonBytes[i]+fp.RSSFileBytes[i] > fp.RSSBytes[i] {
				t.Errorf("member %s: VmRSS %d, RssAnon %d, RssFile %d", fp.MemberIDs[i], fp.RSSBytes[i], fp.RSSAnonBytes[i], fp.RSSFileBytes[i])
			}
		}
	}
	// A follower was killed and restarted, and caught up with the
	// leader's applied index of before the kill.
	if fp.RestartMember == "" || fp.RestartServeSecs <= 0 || fp.RestartSecs < fp.RestartServeSecs || fp.RestartIndex == 0 || fp.RestartError != "" || fp.RestoreError != "" {
		t.Errorf("Footprint restart implausible: %+v", fp)
	}
	if ms := sys.Members(); len(ms) != 3 {
		t.Errorf("Members() after Footprint = %v, want 3", ms)
	}
	if st, err := sys.status(ctx, mustMember(t, sys, fp.RestartMember)); err != nil || st.AppliedIndex < fp.RestartIndex {
		t.Errorf("restarted member %s: %+v, %v", fp.RestartMember, st, err)
	}

	// The restored state is the state before: the job carries on.
	if n, err := sys.ReadManifest(ctx, job, "a", false); err != nil || n != 36 {
		t.Fatalf("ReadManifest after the snapshot restore = %d, %v; want 36", n, err)
	}
	cycle(1)
}

func mustMember(t *testing.T, s *System, id string) *proc {
	t.Helper()
	p, err := s.member(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
