package checker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// Tests written in a mutation audit of gc.go: each case is the smallest
// history on which one rule of Protections, GCSafety, LiveSet or
// GCLiveness decides the verdict.

// s3req is a request of member n1 for metastore key k (prefix "ms/"),
// started at ms milliseconds and lasting one.
func s3req(b *hb, op s3proxy.Op, k string, ms, status int) s3proxy.Request {
	r := s3proxy.Request{Op: op, Key: "ms/" + k, Start: b.ms(ms), Latency: time.Millisecond, Forwarded: true, Upstream: status, Client: "n1"}
	if op == s3proxy.OpDeleteBatch {
		r.Key, r.Keys = "", []string{"ms/" + k}
	}
	return r
}

func safety(t *testing.T, in *Input, ok bool) {
	t.Helper()
	in.S3Prefix = "ms/"
	v := GCSafety(in)
	if v.OK != ok {
		t.Fatalf("gc-safety ok = %v, want %v: %s %v", v.OK, ok, v.Summary, v.Problems)
	}
}

func manAck(job string, g, epoch uint64, task string, keys ...string) history.Op {
	return history.Op{Kind: history.KindAck, Job: job, Gen: g, Epoch: epoch, Task: task, HasManifest: true, Keys: keys, Client: 1}
}

// TestProtectionHeads: a key is protected from the ok answer of an ack
// whose manifest holds it until the task's next ack without it is
// invoked or a new attempt of the job is invoked, or the end.
func TestProtectionHeads(t *testing.T) {
	del := s3proxy.OpDeleteBatch
	for _, c := range []struct {
		name string
		ops  []step
		at   int // the delete's start
		ok   bool
	}{
		{"before the ack answered", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}}, 5, true},
		{"as the ack answered", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}}, 30, false},
		{"the last ack's manifest, to the end", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}}, 5000, false},
		{"up to the invocation of the ack that drops it", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {manAck("j", 1, 2, "agg-0"), 100, 110}}, 99, false},
		{"after the ack that drops it", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {manAck("j", 1, 2, "agg-0"), 100, 110}}, 101, true},
		{"a next ack that keeps it, before it answered", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {manAck("j", 1, 2, "agg-0", "k", "k2"), 100, 110}}, 104, false},
		{"an ack without a manifest", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {ack("j", 2, "agg-0", "a2", false), 100, 110}}, 150, false},
		{"a failed ack's manifest", []step{{outcome(manAck("j", 1, 1, "agg-0", "k"), history.Fail), 20, 30}}, 50, true},
		{"another operation invoked", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {read("j", 0, 2), 40, 45}}, 50, false},
		{"an attempt invoked before the ack", []step{{attempt("j", 1), 0, 10}, {manAck("j", 1, 1, "agg-0", "k"), 20, 30}}, 50, false},
		{"a new attempt invoked", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {attempt("j", 2), 100, 110}}, 150, true},
		{"a new attempt invoked after the drop", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {manAck("j", 1, 2, "agg-0"), 100, 110}, {attempt("j", 2), 200, 210}}, 150, true},
		{"a new attempt of another job", []step{{manAck("j", 1, 1, "agg-0", "k"), 20, 30}, {attempt("k", 2), 100, 110}}, 150, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHB()
			for _, s := range c.ops {
				b.add(s.op, s.from, s.to)
			}
			safety(t, &Input{Ops: b.ops, S3: []s3proxy.Request{s3req(b, del, "k", c.at, 200)}}, c.ok)
		})
	}
}

// TestProtectionIntents: an upload's key is protected from its answer
// until its lease's end less a margin (and the injected skew), or until
// the first ack that commits it is invoked, whichever is first.
func TestProtectionIntents(t *testing.T) {
	del := s3proxy.OpDeleteBatch
	upload := func(b *hb, leaseMS int) history.Op {
		exp := b.ms(leaseMS)
		return history.Op{Kind: history.KindUpload, Job: "j", Task: "agg-0", Key: "k", Expires: &exp, Client: 1}
	}
	commit := func(out history.Outcome) history.Op {
		a := ack("j", 1, "agg-0", "a1", false)
		a.Commits, a.Outcome = []string{"k"}, out
		return a
	}
	for _, c := range []struct {
		name string
		// lease end (ms), commits (as acks at [from,to]), delete, skew
		lease   int
		commits []step
		at      int
		skew    time.Duration
		ok      bool
	}{
		{"inside the lease", 10_000, nil, 5000, 0, false},
		{"in the margin before the lease's end", 10_000, nil, 9500, 0, true},
		{"before the margin and the skew", 10_000, nil, 5500, 3 * time.Second, false},
		{"in the skew before the margin", 10_000, nil, 7500, 3 * time.Second, true},
		{"after the commit was invoked (the ack failed)", 60_000, []step{{commit(history.Fail), 20, 25}}, 30, 0, true},
		{"after the first of two commits", 60_000, []step{{commit(history.Fail), 20, 25}, {commit(history.Unknown), 40, 50}}, 30, 0, true},
		{"commit invoked after the lease's end", 5_000, []step{{commit(history.Fail), 10_000, 10_010}}, 6_000, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHB()
			b.add(upload(b, c.lease), 0, 10)
			for _, s := range c.commits {
				b.add(s.op, s.from, s.to)
			}
			safety(t, &Input{Ops: b.ops, S3: []s3proxy.Request{s3req(b, del, "k", c.at, 200)}, ClockSkew: c.skew}, c.ok)
		})
	}
}

// TestProtectionPins: the keys of a pinned epoch's manifests (read ok)
// are protected from the pin's ok answer to the invocation of the first
// unpin of that job and epoch invoked after it.
func TestProtectionPins(t *testing.T) {
	del := s3proxy.OpDeleteBatch
	pin := history.Op{Kind: history.KindPin, Job: "j", Epoch: 1, Client: 6}
	unpin := func(job string, epoch uint64) history.Op {
		return history.Op{Kind: history.KindUnpin, Job: job, Epoch: epoch, Client: 6}
	}
	man := step{manifestRead("j", 1, "agg-0", "p"), 120, 130}
	for _, c := range []struct {
		name string
		ops  []step
		at   int
		ok   bool
	}{
		{"pinned", []step{{pin, 100, 110}, man}, 200, false},
		{"before the pin", []step{{pin, 100, 110}, man}, 50, true},
		{"after the unpin", []step{{pin, 100, 110}, man, {unpin("j", 1), 300, 310}}, 320, true},
		{"failed pin", []step{{outcome(pin, history.Fail), 100, 110}, man}, 200, true},
		{"failed manifest read", []step{{pin, 100, 110}, {outcome(manifestRead("j", 1, "agg-0", "p"), history.Fail), 120, 130}}, 200, true},
		{"another operation invoked", []step{{pin, 100, 110}, man, {read("j", 0, 2), 150, 160}}, 200, false},
		{"unpin of another job", []step{{pin, 100, 110}, man, {unpin("k", 1), 150, 160}}, 200, false},
		{"unpin of another epoch", []step{{pin, 100, 110}, man, {unpin("j", 2), 150, 160}}, 200, false},
		{"an unpin before the pin", []step{{unpin("j", 1), 0, 10}, {pin, 100, 110}, man}, 200, false},
		{"between two unpins", []step{{pin, 100, 110}, man, {unpin("j", 1), 300, 310}, {unpin("j", 1), 400, 410}}, 350, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHB()
			for _, s := range c.ops {
				b.add(s.op, s.from, s.to)
			}
			safety(t, &Input{Ops: b.ops, S3: []s3proxy.Request{s3req(b, del, "p", c.at, 200)}}, c.ok)
		})
	}
}

// TestGCSafetyRequests: which S3 requests and which failed restores of
// the history count as a deletion or a miss of a protected key.
func TestGCSafetyRequests(t *testing.T) {
	b := newHB()
	b.add(manAck("j", 1, 1, "agg-0", "k"), 20, 30) // k protected from 30 on
	single := s3req(b, s3proxy.OpDelete, "k", 50, 204)
	unforwarded := s3req(b, s3proxy.OpDeleteBatch, "k", 50, 0)
	unforwarded.Forwarded = false
	unprefixed := s3req(b, s3proxy.OpDeleteBatch, "k", 50, 200)
	unprefixed.Keys = []string{"k"}
	for _, c := range []struct {
		name string
		req  s3proxy.Request
		ok   bool
	}{
		{"DeleteObject", single, false},
		{"DeleteObjects not forwarded", unforwarded, true},
		{"DeleteObjects of a key outside the prefix", unprefixed, true},
		{"HEAD answered 404", s3req(b, s3proxy.OpHead, "k", 50, 404), false},
		{"GET answered 200", s3req(b, s3proxy.OpGet, "k", 50, 200), true},
		{"GET answered 404 for a key outside the prefix", s3proxy.Request{Op: s3proxy.OpGet, Key: "k", Start: b.ms(50), Latency: time.Millisecond, Forwarded: true, Upstream: 404}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			safety(t, &Input{Ops: b.ops, S3: []s3proxy.Request{c.req}}, c.ok)
		})
	}

	failed := func(kind history.Kind, code string) history.Op {
		return history.Op{Kind: kind, Job: "j", Task: "agg-0", Key: "k", Outcome: history.Fail, Code: code, Error: "blob k: " + code, Client: 3}
	}
	for _, c := range []struct {
		name string
		op   history.Op
		ok   bool
	}{
		{"restore: blob not found", failed(history.KindRestore, "not_found"), false},
		{"restore: blob deleting", failed(history.KindRestore, "conflict"), false},
		{"restore failed otherwise", failed(history.KindRestore, "timeout"), true},
		{"upload of an existing key refused", failed(history.KindUpload, "conflict"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops := append(slices.Clone(b.ops), c.op)
			ops[1].ID, ops[1].Invoke, ops[1].Complete = 1, b.ms(50), b.ms(60)
			safety(t, &Input{Ops: ops}, c.ok)
		})
	}
}

// TestGCSafetyEnd: the final check needs the final state and the bucket's
// listing; without either, gc-safety does not pass.
func TestGCSafetyEnd(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Final)
		want   string
	}{
		{"final state incomplete", func(f *Final) { f.CollectErr = "epochs of j: timeout" }, "final state incomplete: epochs of j"},
		{"bucket not listed", func(f *Final) { f.BucketErr = "list: timeout" }, "final state incomplete: list: timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, f := liveRun()
			c.change(f)
			v := GCSafety(&Input{Ops: ops, Final: f})
			if v.OK || !strings.Contains(v.Summary, c.want) {
				t.Fatalf("%s %v", v.Summary, v.Problems)
			}
		})
	}
}

// TestLiveSetWorkingManifests: which acks of the current attempt make a
// task's working manifest, and how certain each of its keys is.
func TestLiveSetWorkingManifests(t *testing.T) {
	f := func() *Final {
		return &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1}}}
	}
	for _, c := range []struct {
		name    string
		ops     []step
		key     string
		live    bool
		certain bool
	}{
		{"only an ack of unknown outcome", []step{{outcome(manAck("j", 1, 1, "agg-0", "u"), history.Unknown), 20, 30}}, "u", true, false},
		{"a failed ack after the last ok one: the ok one's key", []step{{manAck("j", 1, 1, "agg-0", "w"), 20, 30}, {outcome(manAck("j", 1, 2, "agg-0", "x"), history.Fail), 40, 50}}, "w", true, true},
		{"a failed ack after the last ok one: its own key", []step{{manAck("j", 1, 1, "agg-0", "w"), 20, 30}, {outcome(manAck("j", 1, 2, "agg-0", "x"), history.Fail), 40, 50}}, "x", false, false},
		{"an ack without a manifest after the last one with", []step{{manAck("j", 1, 1, "agg-0", "w"), 20, 30}, {ack("j", 2, "agg-0", "a2", false), 40, 50}}, "w", true, true},
		// agg-0 (looked at first) may hold s, agg-1 certainly does.
		{"possible in one task, certain in another", []step{{outcome(manAck("j", 1, 1, "agg-0", "s"), history.Unknown), 20, 30}, {manAck("j", 1, 1, "agg-1", "s"), 20, 30}}, "s", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHB()
			for _, s := range c.ops {
				b.add(s.op, s.from, s.to)
			}
			l, ok := LiveSet(b.ops, f())[c.key]
			if ok != c.live || l.Certain != c.certain {
				t.Fatalf("%s: live %v %+v, want live %v certain %v", c.key, ok, l, c.live, c.certain)
			}
		})
	}
}

// TestGCLivenessCases: what the bucket may hold at the end beyond the
// live set, and what makes no verdict.
func TestGCLivenessCases(t *testing.T) {
	ahead := func(f *Final) *time.Time { t := f.GCStart.Add(time.Minute); return &t }
	recent := func(f *Final) *time.Time { t := f.GCStart.Add(-time.Second); return &t }
	for _, c := range []struct {
		name string
		key  string
		rec  func(*Final) BlobRecord
		skew time.Duration
		want string // empty: ok
	}{
		{"record not readable", "j/x1", func(*Final) BlobRecord { return BlobRecord{Err: "timeout"} }, 0, "no usable record (timeout)"},
		{"possibly live but deleting", "j/b6", func(*Final) BlobRecord { return BlobRecord{State: "deleting", Refs: 1} }, 0, "leak: object j/b6"},
		{"deleting with a recent lease", "j/x2", func(f *Final) BlobRecord { return BlobRecord{State: "deleting", LeaseUntil: recent(f)} }, 0, "leak: object j/x2"},
		{"deleting, unreferenced by a leader ahead", "j/x3", func(f *Final) BlobRecord { return BlobRecord{State: "deleting", UnreferencedAt: ahead(f)} }, 90 * time.Second, "leak: object j/x3"},
		{"referenced, unreferenced by a leader ahead", "j/x4", func(f *Final) BlobRecord { return BlobRecord{State: "live", Refs: 1, UnreferencedAt: ahead(f)} }, 90 * time.Second, "leak: object j/x4"},
		{"unreferenced inside its grace under skew", "j/x5", func(f *Final) BlobRecord { return BlobRecord{State: "live", UnreferencedAt: recent(f)} }, 90 * time.Second, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, f := liveRun()
			f.Bucket = append(f.Bucket, c.key)
			f.Records[c.key] = c.rec(f)
			v := GCLiveness(&Input{Ops: ops, Final: f, ClockSkew: c.skew})
			if v.OK != (c.want == "") || c.want != "" && !strings.Contains(strings.Join(v.Problems, "\n"), c.want) {
				t.Fatalf("%s %v", v.Summary, v.Problems)
			}
		})
	}
	for _, c := range []struct {
		name string
		f    *Final
		want string
	}{
		{"no final state", nil, "no final state"},
		{"bucket not listed", &Final{BucketErr: "list: timeout"}, "bucket not listed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v := GCLiveness(&Input{Final: c.f}); v.OK || !strings.Contains(v.Summary, c.want) {
				t.Fatalf("%s %v", v.Summary, v.Problems)
			}
		})
	}
}
