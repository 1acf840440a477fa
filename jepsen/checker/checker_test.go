package checker

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// hb builds histories with times in milliseconds from a fixed start.
type hb struct {
	t0  time.Time
	ops []history.Op
}

func newHB() *hb { return &hb{t0: time.Unix(1_700_000_000, 0)} }

func (b *hb) ms(n int) time.Time { return b.t0.Add(time.Duration(n) * time.Millisecond) }

func (b *hb) add(o history.Op, from, to int) {
	o.ID = len(b.ops)
	o.Invoke, o.Complete = b.ms(from), b.ms(to)
	if o.Outcome == "" {
		o.Outcome = history.OK
	}
	b.ops = append(b.ops, o)
}

func ack(job string, epoch uint64, task, value string, completed bool) history.Op {
	return history.Op{Kind: history.KindAck, Job: job, Epoch: epoch, Task: task, Gen: 1, Value: value, Completed: completed, Client: 1}
}

func read(job string, epoch uint64, client int) history.Op {
	return history.Op{Kind: history.KindRead, Job: job, Task: "src-0", ReadEpoch: epoch, Client: client, Member: "n1"}
}

func TestLinearizableAcceptsValidHistory(t *testing.T) {
	b := newHB()
	b.add(ack("j", 1, "src-0", "v1", true), 0, 10)
	b.add(read("j", 0, 2), 1, 5) // concurrent with the completion: may see none
	b.add(read("j", 1, 3), 11, 12)
	b.add(ack("j", 2, "src-0", "v2", false), 20, 30) // completion not reported
	b.add(read("j", 2, 2), 25, 35)
	b.add(read("j", 2, 3), 40, 41)
	u := ack("j", 3, "src-0", "v3", false)
	u.Outcome = history.Unknown
	b.add(u, 50, 60)
	b.add(read("j", 2, 2), 70, 71) // the unknown ack has not taken effect yet
	b.add(read("j", 3, 3), 80, 81) // now it has
	v := Linearizable(&Input{Ops: b.ops})
	if !v.OK {
		t.Fatalf("valid history refused: %s %v", v.Summary, v.Problems)
	}
}

func TestLinearizableRefusesStaleRead(t *testing.T) {
	b := newHB()
	b.add(ack("j", 1, "src-0", "v1", true), 0, 10)
	b.add(ack("j", 2, "src-0", "v2", true), 20, 30)
	b.add(read("j", 1, 2), 40, 45)
	dir := t.TempDir()
	v := Linearizable(&Input{Ops: b.ops, OutDir: dir})
	if v.OK {
		t.Fatal("stale read accepted")
	}
	if !strings.Contains(strings.Join(v.Problems, "\n"), "stale read") {
		t.Errorf("no readable reason: %v", v.Problems)
	}
	if v.Artifact == "" {
		t.Error("no visualization written")
	}
}

func TestLinearizableRefusesValueNeverCompleted(t *testing.T) {
	b := newHB()
	f := ack("j", 1, "src-0", "v1", false)
	f.Outcome = history.Fail
	b.add(f, 0, 10)
	b.add(read("j", 1, 2), 20, 25)
	if v := Linearizable(&Input{Ops: b.ops}); v.OK {
		t.Fatal("a read of an epoch whose only ack failed was accepted")
	}
}

func TestLinearizableRefusesLostCompletion(t *testing.T) {
	b := newHB()
	b.add(history.Op{Kind: history.KindAwait, Job: "j", Epoch: 3, Completed: true, Outcome: history.OK, Client: 4}, 0, 10)
	b.add(ack("j", 3, "src-0", "v3", false), 0, 5)
	b.add(read("j", 0, 2), 20, 25)
	if v := Linearizable(&Input{Ops: b.ops}); v.OK {
		t.Fatal("a read behind an awaited completion was accepted")
	}
}

func TestAcksFencingAndZombies(t *testing.T) {
	b := newHB()
	b.add(history.Op{Kind: history.KindAttempt, Job: "j", Gen: 2}, 0, 10)
	b.add(ack("j", 5, "src-0", "old", false), 20, 30) // generation 1 after generation 2 started
	b.add(history.Op{Kind: history.KindZombieAck, Job: "j", Gen: 1, Epoch: 4, Task: "src-0"}, 40, 50)
	v := Acks(&Input{Ops: b.ops})
	if v.OK || v.total() != 2 {
		t.Fatalf("want 2 violations, got %v", v.Problems)
	}
}

func (v Verdict) total() int { return len(v.Problems) }

func TestAcksLostAckAndValueNeverWritten(t *testing.T) {
	b := newHB()
	b.add(ack("j", 1, "agg-0", "a1", false), 0, 10)
	b.add(ack("j", 1, "src-0", "s1", true), 0, 10)
	final := &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, LatestCompleted: 1, Epochs: []EpochFinal{{
		Epoch: 1, Generation: 1, State: "completed", Expected: 2, Acked: 2,
		Tasks: map[string]TaskCheckpoint{"agg-0": {Value: "a1"}, "src-0": {Value: "forged"}},
		Acks:  map[string]AckRecord{"agg-0": {}, "src-0": {}},
	}}}}}
	v := Acks(&Input{Ops: b.ops, Final: final})
	if v.OK {
		t.Fatal("forged checkpoint accepted")
	}
	joined := strings.Join(v.Problems, "\n")
	if !strings.Contains(joined, "no ack of that epoch sent") || !strings.Contains(joined, "lost ack") {
		t.Errorf("problems: %v", v.Problems)
	}
	final.Jobs["j"].Epochs[0].Tasks["src-0"] = TaskCheckpoint{Value: "s1"}
	if v := Acks(&Input{Ops: b.ops, Final: final}); !v.OK {
		t.Fatalf("valid final state refused: %v", v.Problems)
	}
	final.Jobs["j"].Epochs[0].State = "aborted"
	if v := Acks(&Input{Ops: b.ops, Final: final}); v.OK {
		t.Fatal("a completion acknowledged and then aborted was accepted")
	}
}

// An ok ack whose epoch did not complete is still the store's to keep:
// an epoch left pending or aborted one ack short must not hide a lost ack.
func TestAcksLostAckInEpochThatDidNotComplete(t *testing.T) {
	for _, state := range []string{"pending", "aborted", "subsumed"} {
		t.Run(state, func(t *testing.T) {
			b := newHB()
			a := ack("j", 1, "agg-0", "a1", false)
			a.Hash = "h-agg"
			b.add(a, 0, 10)
			s := ack("j", 1, "sink-0", "k1", false)
			s.Hash = "h-sink"
			b.add(s, 0, 10)
			final := func(acks map[string]AckRecord) *Final {
				return &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, Epochs: []EpochFinal{{
					Epoch: 1, Generation: 1, State: state, Expected: 3, Acked: len(acks), Acks: acks,
				}}}}}
			}
			whole := map[string]AckRecord{"agg-0": {Hash: "h-agg"}, "sink-0": {Hash: "h-sink"}}
			if v := Acks(&Input{Ops: b.ops, Final: final(whole)}); !v.OK {
				t.Fatalf("every ok ack held, refused: %v", v.Problems)
			}
			v := Acks(&Input{Ops: b.ops, Final: final(map[string]AckRecord{"agg-0": {Hash: "h-agg"}})})
			if v.OK || !strings.Contains(v.Summary, "lost ack") || !strings.Contains(v.Summary, "sink-0") || !strings.Contains(v.Summary, "holds no ack") {
				t.Fatalf("an ok ack the store does not hold was accepted: %s", v.Summary)
			}
			v = Acks(&Input{Ops: b.ops, Final: final(map[string]AckRecord{"agg-0": {Hash: "h-agg"}, "sink-0": {Hash: "other"}})})
			if v.OK || !strings.Contains(v.Summary, "content") {
				t.Fatalf("an ack held with other content was accepted: %s", v.Summary)
			}
			f := final(whole)
			f.Jobs["j"].Epochs[0].Acked = 1
			if v := Acks(&Input{Ops: b.ops, Final: f}); v.OK {
				t.Fatal("an epoch counting fewer acks than it holds was accepted")
			}
		})
	}
}

func TestGCSafety(t *testing.T) {
	b := newHB()
	exp := b.ms(60_000)
	b.add(history.Op{Kind: history.KindUpload, Job: "j", Task: "agg-0", Key: "j/agg-0/k1", Expires: &exp}, 0, 10)
	a := ack("j", 1, "agg-0", "a1", true)
	a.HasManifest, a.Keys, a.Commits = true, []string{"j/agg-0/k1"}, []string{"j/agg-0/k1"}
	b.add(a, 20, 30)
	drop := ack("j", 2, "agg-0", "a2", true)
	drop.HasManifest, drop.Keys = true, []string{}
	b.add(drop, 100, 110)
	s3 := func(op s3proxy.Op, at int, status int) s3proxy.Request {
		return s3proxy.Request{Op: op, Key: "ms/j/agg-0/k1", Keys: []string{"ms/j/agg-0/k1"}, Start: b.ms(at), Latency: time.Millisecond, Forwarded: true, Upstream: status, Client: "n1"}
	}
	cases := []struct {
		name string
		req  s3proxy.Request
		ok   bool
	}{
		{"delete while an intent", s3(s3proxy.OpDeleteBatch, 15, 200), false},
		{"delete while in the head", s3(s3proxy.OpDeleteBatch, 50, 200), false},
		{"delete after the drop was sent", s3(s3proxy.OpDeleteBatch, 105, 200), true},
		{"404 while referenced", s3(s3proxy.OpGet, 40, 404), false},
		{"404 after the drop", s3(s3proxy.OpGet, 200, 404), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := GCSafety(&Input{Ops: b.ops, S3: []s3proxy.Request{c.req}, S3Prefix: "ms/"})
			if v.OK != c.ok {
				t.Fatalf("ok = %v, want %v: %v", v.OK, c.ok, v.Problems)
			}
		})
	}
	// At the end: a referenced key missing from the bucket.
	final := &Final{Jobs: map[string]*JobFinal{"j": {Epochs: []EpochFinal{{Epoch: 2, State: "completed",
		Tasks: map[string]TaskCheckpoint{"agg-0": {HasManifest: true, Keys: []string{"j/agg-0/k2"}}}}}}}}
	if v := GCSafety(&Input{Ops: b.ops, Final: final}); v.OK {
		t.Fatal("missing referenced blob accepted")
	}
	final.Bucket = []string{"j/agg-0/k2"}
	if v := GCSafety(&Input{Ops: b.ops, Final: final}); !v.OK {
		t.Fatalf("present blob refused: %v", v.Problems)
	}
}

// liveRun is the end of a run with every kind of object the store
// legitimately keeps, and the history that led there.
//
// Job j, retention 1. Generation 1 has the state tasks agg-0 and agg-1:
// epochs 1 and 2 complete (and are subsumed later); agg-0 acknowledges
// epoch 3, which the start of generation 2 aborts. Generation 2 removes
// agg-1: agg-0 continues from epoch 2, epoch 4 completes, its ack of epoch
// 5 is ok and the epoch is aborted (its manifest is agg-0's working
// manifest), its ack of epoch 6 (still pending) has an unknown outcome.
//
// Job k: epoch 1 completed and pinned; epoch 7 completed, holding a blob
// of j it forked from j's savepoint; agg-0 acknowledged epoch 8 (pending)
// and then epoch 9 (aborted: its working manifest).
//
// A job the workload did not create (gc-crash-after-mark's garbage job)
// holds a blob in its retained checkpoint.
func liveRun() ([]history.Op, *Final) {
	b := newHB()
	man := func(job string, gen, epoch uint64, task string, out history.Outcome, keys ...string) history.Op {
		return history.Op{Kind: history.KindAck, Job: job, Gen: gen, Epoch: epoch, Task: task, HasManifest: true, Keys: keys, Outcome: out, Client: 1}
	}
	b.add(history.Op{Kind: history.KindAttempt, Job: "j", Gen: 1}, 0, 10)
	b.add(man("j", 1, 1, "agg-0", history.OK, "j/b1", "j/s0", "j/s1"), 20, 30)
	b.add(man("j", 1, 1, "agg-1", history.OK, "j/r1"), 20, 30)
	b.add(man("j", 1, 2, "agg-0", history.OK, "j/b1", "j/b2"), 40, 50)
	b.add(man("j", 1, 2, "agg-1", history.OK, "j/r1", "j/r2"), 40, 50)
	b.add(man("j", 1, 3, "agg-0", history.OK, "j/b1", "j/b2", "j/b3"), 60, 70)
	b.add(history.Op{Kind: history.KindAttempt, Job: "j", Gen: 2}, 80, 90)
	b.add(man("j", 2, 4, "agg-0", history.OK, "j/b1", "j/b2", "j/b4"), 100, 110)
	b.add(man("j", 2, 5, "agg-0", history.OK, "j/b1", "j/b5"), 120, 130)
	b.add(man("j", 2, 6, "agg-0", history.Unknown, "j/b1", "j/b5", "j/b6"), 140, 150)
	b.add(history.Op{Kind: history.KindAttempt, Job: "k", Gen: 1}, 0, 10)
	b.add(man("k", 1, 1, "agg-0", history.OK, "k/p1"), 20, 30)
	b.add(man("k", 1, 7, "agg-0", history.OK, "k/p7", "j/s1"), 40, 50)
	b.add(man("k", 1, 8, "agg-0", history.OK, "k/p7", "k/p8"), 60, 70)
	b.add(man("k", 1, 9, "agg-0", history.OK, "k/p7", "k/p9"), 80, 90)

	now := b.ms(10_000)
	lease, ended := now.Add(time.Minute), now.Add(-time.Second)
	tc := func(keys ...string) TaskCheckpoint { return TaskCheckpoint{HasManifest: true, Keys: keys} }
	f := &Final{ListedAt: now, GCStart: now, Grace: 2 * time.Second, Jobs: map[string]*JobFinal{
		"j": {Generation: 2, LatestCompleted: 4, Epochs: []EpochFinal{
			{Epoch: 1, Generation: 1, State: "subsumed"},
			{Epoch: 2, Generation: 1, State: "subsumed"},
			{Epoch: 3, Generation: 1, State: "aborted"},
			{Epoch: 4, Generation: 2, State: "completed", Tasks: map[string]TaskCheckpoint{"agg-0": tc("j/b1", "j/b2", "j/b4")}},
			{Epoch: 5, Generation: 2, State: "aborted"},
			{Epoch: 6, Generation: 2, State: "pending"},
		}},
		"k": {Generation: 1, LatestCompleted: 7, Epochs: []EpochFinal{
			{Epoch: 1, Generation: 1, State: "completed", Pinned: true, Tasks: map[string]TaskCheckpoint{"agg-0": tc("k/p1")}},
			{Epoch: 7, Generation: 1, State: "completed", Tasks: map[string]TaskCheckpoint{"agg-0": tc("k/p7", "j/s1")}},
			{Epoch: 8, Generation: 1, State: "pending", Tasks: map[string]TaskCheckpoint{"agg-0": tc("k/p7", "k/p8")}},
			{Epoch: 9, Generation: 1, State: "aborted"},
		}},
	}, Others: map[string]*JobFinal{
		// A fault's own job: its base blob is live in epoch 2.
		"nemesis-gc-1": {Generation: 1, LatestCompleted: 2, Epochs: []EpochFinal{
			{Epoch: 1, Generation: 1, State: "subsumed"},
			{Epoch: 2, Generation: 1, State: "completed", Tasks: map[string]TaskCheckpoint{"t": tc("nemesis-gc-1/t/base")}},
		}},
	}, Records: map[string]BlobRecord{
		"j/b5": {State: "live", Refs: 1, Job: "j", Task: "agg-0", Generation: 2},
		"j/b6": {State: "live", Refs: 1, Job: "j", Task: "agg-0", Generation: 2},
		"k/p9": {State: "live", Refs: 1, Job: "k", Task: "agg-0", Generation: 1},
		"j/u1": {State: "intent", LeaseUntil: &lease},
		"j/u2": {State: "expired", LeaseUntil: &ended}, // within the grace period
	}}
	f.Bucket = []string{"j/b1", "j/b2", "j/b4", "j/b5", "j/b6", "j/s1", "j/u1", "j/u2", "k/p1", "k/p7", "k/p8", "k/p9", "nemesis-gc-1/t/base"}
	return b.ops, f
}

// TestGCLiveness: the bucket at the end may hold the blobs of retained,
// pinned and pending checkpoints (a fork's included), of the working
// manifests of the current attempts (possibly of an ack whose outcome is
// unknown), young uploads and garbage in its grace; a blob the store
// still counts references to but that no live checkpoint holds is a leak.
func TestGCLiveness(t *testing.T) {
	ops, f := liveRun()
	if v := GCLiveness(&Input{Ops: ops, Final: f}); !v.OK {
		t.Errorf("what live checkpoints reference, and young uploads, refused: %v", v.Problems)
	}
	if v := GCSafety(&Input{Ops: ops, Final: f}); !v.OK {
		t.Errorf("gc-safety refused the same end: %v", v.Problems)
	}

	long, ahead := f.GCStart.Add(-time.Hour), f.GCStart.Add(time.Minute)
	old := f.GCStart.Add(-time.Minute)
	leaks := []struct {
		name string
		key  string
		rec  BlobRecord
		// change, if set, changes the final state instead.
		change func(*Final)
		want   []string
	}{
		{name: "removed task's blob still referenced", key: "j/r2",
			rec:  BlobRecord{State: "live", Refs: 1, Job: "j", Task: "agg-1", Generation: 1},
			want: []string{"leak: object j/r2", "live with 1 reference(s), but no live checkpoint references it", "uploaded by j/agg-1 in generation 1", "j/agg-1 epoch 2 in generation 1 (ok), that epoch subsumed", "current attempt generation 2"}},
		{name: "abandoned attempt's blob still referenced", key: "j/b3",
			rec:  BlobRecord{State: "live", Refs: 1, Job: "j", Task: "agg-0", Generation: 1},
			want: []string{"leak: object j/b3", "no live checkpoint references it", "epoch 3 in generation 1 (ok), that epoch aborted"}},
		{name: "subsumed checkpoint's blob still referenced", key: "j/s0",
			rec:  BlobRecord{State: "live", Refs: 2},
			want: []string{"leak: object j/s0", "live with 2 reference(s)", "epoch 1 in generation 1 (ok), that epoch subsumed"}},
		{name: "working manifest of an earlier attempt", key: "j/b5",
			change: func(f *Final) { f.Jobs["j"].Generation = 3 },
			want:   []string{"leak: object j/b5", "no live checkpoint references it", "current attempt generation 3 (no working manifest of agg-0 from generation 2 counts)"}},
		{name: "unknown ack's blob the store no longer counts", key: "j/b6",
			rec:  BlobRecord{State: "live", UnreferencedAt: &old},
			want: []string{"leak: object j/b6", "recorded live with 0 references"}},
		{name: "unreferenced live blob", key: "j/x1", rec: BlobRecord{State: "live"},
			want: []string{"leak: object j/x1", "recorded live with 0 references", "in no manifest an ack sent"}},
		{name: "expired upload past its grace", key: "j/x2", rec: BlobRecord{State: "expired", LeaseUntil: &old},
			want: []string{"recorded expired"}},
		{name: "deleting", key: "j/x3", rec: BlobRecord{State: "deleting"}, want: []string{"recorded deleting"}},
		{name: "no record", key: "j/x4", want: []string{"its record was not read"}},
		{name: "unreferenced an hour ago under skew", key: "j/x5", rec: BlobRecord{State: "live", UnreferencedAt: &long},
			want: []string{"recorded live with 0 references"}},
	}
	for _, c := range leaks {
		t.Run(c.name, func(t *testing.T) {
			ops, f := liveRun()
			if c.change != nil {
				c.change(f)
			} else {
				f.Bucket = append(f.Bucket, c.key)
				if c.rec.State != "" {
					f.Records[c.key] = c.rec
				}
			}
			v := GCLiveness(&Input{Ops: ops, Final: f, ClockSkew: 90 * time.Second})
			if v.OK {
				t.Fatalf("leak of %s accepted: %s", c.key, v.Summary)
			}
			got := strings.Join(v.Problems, "\n")
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in %s", w, got)
				}
			}
		})
	}

	// Unreferenced by a leader whose clock was a minute ahead: not
	// collectable yet, if and only if clocks were set that far apart.
	ops, f = liveRun()
	f.Bucket = append(f.Bucket, "j/x6")
	f.Records["j/x6"] = BlobRecord{State: "live", UnreferencedAt: &ahead}
	if v := GCLiveness(&Input{Ops: ops, Final: f, ClockSkew: 90 * time.Second}); !v.OK {
		t.Fatalf("a blob unreferenced by a leader 1m ahead refused under 90s of skew: %v", v.Problems)
	}
	if v := GCLiveness(&Input{Ops: ops, Final: f}); v.OK {
		t.Fatal("a blob unreferenced in the future accepted without clock skew")
	}

	// Without the final state the live set is unknown: no verdict of
	// "no leak".
	ops, f = liveRun()
	f.CollectErr = "not collected"
	if v := GCLiveness(&Input{Ops: ops, Final: f}); v.OK {
		t.Fatal("an incomplete final state accepted")
	}
}

// TestLiveSetCertainty: gc-safety requires in the bucket what the store
// must hold (checkpoints, the working manifest of an ok ack), not what it
// holds only if an ack of unknown outcome took effect.
func TestLiveSetCertainty(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"j/b4", false},                // retained checkpoint
		{"k/p1", false},                // pinned
		{"k/p8", false},                // pending
		{"j/s1", false},                // another job's checkpoint (a fork)
		{"nemesis-gc-1/t/base", false}, // a checkpoint of a job the workload did not create
		{"k/p9", false},                // working manifest of an ok ack of an aborted epoch
		{"j/b5", false},                // working manifest, in the unknown ack's too
		{"j/b6", true},                 // only in the manifest of the ack of unknown outcome
	} {
		t.Run(c.key, func(t *testing.T) {
			ops, f := liveRun()
			f.Bucket = slices.DeleteFunc(f.Bucket, func(k string) bool { return k == c.key })
			v := GCSafety(&Input{Ops: ops, Final: f})
			if v.OK != c.ok {
				t.Fatalf("%s missing from the bucket: gc-safety ok = %v, want %v: %v", c.key, v.OK, c.ok, v.Problems)
			}
		})
	}
	ops, f := liveRun()
	live := LiveSet(ops, f)
	if l := live["j/b6"]; l.Certain || !strings.Contains(l.Why, "if its ack of epoch 6 (outcome unknown) took effect") {
		t.Errorf("j/b6: %+v", l)
	}
	if l := live["k/p9"]; !l.Certain || !strings.Contains(l.Why, "working manifest of k/agg-0 in generation 1 (its last ok ack, epoch 9)") {
		t.Errorf("k/p9: %+v", l)
	}
	for _, k := range []string{"j/r1", "j/r2", "j/b3", "j/s0"} {
		if l, ok := live[k]; ok {
			t.Errorf("%s is held by no live checkpoint, but the live set has it: %+v", k, l)
		}
	}
}

func TestScanLog(t *testing.T) {
	log := "ok\npanic: boom\nfaultpoint: crash at gc.after-mark\nWARNING: DATA RACE\n"
	if got := ScanLog(log); len(got) != 2 {
		t.Fatalf("findings %v", got)
	}
	// An expected panic is skipped with its trace's header; the others are
	// not.
	log = "panic: write raft.db: input/output error\n\ngoroutine 21 [running]:\nmain.f()\npanic: boom\n\ngoroutine 7 [running]:\n"
	eio := regexp.MustCompile(`input/output error$`)
	if got := ScanLog(log, eio); len(got) != 2 || got[0] != "panic: boom" {
		t.Fatalf("findings with an expected panic %q", got)
	}
	if got := ScanLog(log); len(got) != 4 {
		t.Fatalf("findings without expected panics %q", got)
	}
}
