package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/manifests"
)

// The tests in this file run metastore processes against an S3-protocol
// server process on loopback (cmd/s3server), so the SDK's real signing,
// HTTP, XML, presigned PUT and batch delete paths run.

const s3Bucket = "checkpoints"

// s3Env gives the metastore processes the test server's credentials through
// the AWS SDK's default chain.
func s3Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + blobtest.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + blobtest.SecretAccessKey, "AWS_REGION=" + blobtest.Region}
}

func s3Flags(endpoint string, extra ...string) []string {
	return append([]string{"--blob-store", "s3://" + s3Bucket + "/ms", "--s3-endpoint", endpoint, "--s3-path-style"}, extra...)
}

// httpWorker is a stream task that keeps its manifest whole and talks to
// the store over HTTP: upload slots, presigned PUTs, acks with deltas.
type httpWorker struct {
	c         *clCluster
	job, task string
	gen       uint64
	seq       uint64
	m         manifests.Manifest
	base      map[string]any // the restore point, sent with the first ack of an attempt
}

type uploadSlot struct {
	Key    string      `json:"key"`
	URL    string      `json:"url"`
	Header http.Header `json:"header"`
}

func (w *httpWorker) upload(body []byte) string {
	t := w.c.t
	t.Helper()
	var ans struct {
		Uploads []uploadSlot `json:"uploads"`
	}
	raw := w.c.send("POST", "/v1/jobs/"+w.job+"/uploads", map[string]any{"generation": w.gen, "task": w.task, "count": 1})
	if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Uploads) != 1 {
		t.Fatalf("uploads: %s %v", raw, err)
	}
	slot := ans.Uploads[0]
	req, err := http.NewRequest("PUT", slot.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range slot.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.ContentLength = int64(len(body))
	resp, err := clHTTP.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", slot.URL, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", slot.URL, resp.StatusCode, out)
	}
	return slot.Key
}

// step uploads a changelog blob of two segments (and, on materialize, a
// base that truncates the changelog) and acknowledges epoch with the delta.
func (w *httpWorker) step(epoch uint64, materialize bool) {
	t := w.c.t
	t.Helper()
	logKey := w.upload(bytes.Repeat([]byte{'l'}, 100))
	blobs := []map[string]any{{"key": logKey, "size": 100}}
	var d manifests.Delta
	if materialize {
		baseKey := w.upload(bytes.Repeat([]byte{'b'}, 300))
		blobs = append(blobs, map[string]any{"key": baseKey, "size": 300})
		d.Materialize = &manifests.Materialization{Bases: []manifests.Base{{Key: baseKey, Length: 300}}, TruncateBefore: w.seq + 1}
	}
	d.AddSegments = []manifests.Segment{
		{Key: logKey, Offset: 0, Length: 50, FirstSeq: w.seq + 1, LastSeq: w.seq + 3},
		{Key: logKey, Offset: 50, Length: 50, FirstSeq: w.seq + 4, LastSeq: w.seq + 6},
	}
	next, err := manifests.Apply(w.m, d)
	if err != nil {
		t.Fatalf("model: %v", err)
	}
	manifest := map[string]any{"blobs": blobs, "delta": d}
	if w.base != nil {
		manifest["base"] = w.base
		w.base = nil
	}
	w.c.send("PUT", fmt.Sprintf("/v1/jobs/%s/epochs/%d/acks/%s", w.job, epoch, w.task), map[string]any{"generation": w.gen, "manifest": manifest})
	w.seq += 6
	w.m = next
}

// referencedKeys lists the blobs the job's retained and pinned checkpoints
// reference, from their manifests.
func (c *clCluster) referencedKeys(jobs ...string) []string {
	c.t.Helper()
	var keys []string
	for _, job := range jobs {
		var j struct {
			Retained []uint64 `json:"retained"`
		}
		if err := json.Unmarshal(c.send("GET", "/v1/jobs/"+job, nil), &j); err != nil {
			c.t.Fatal(err)
		}
		for _, e := range j.Retained {
			var ep struct {
				Acks []struct {
					Task    string `json:"task"`
					Lineage uint64 `json:"lineage"`
				} `json:"acks"`
			}
			if err := json.Unmarshal(c.send("GET", fmt.Sprintf("/v1/jobs/%s/epochs/%d", job, e), nil), &ep); err != nil {
				c.t.Fatal(err)
			}
			for _, a := range ep.Acks {
				if a.Lineage == 0 {
					continue
				}
				var mf struct {
					Manifest manifests.Manifest `json:"manifest"`
				}
				if err := json.Unmarshal(c.send("GET", fmt.Sprintf("/v1/jobs/%s/epochs/%d/manifests/%s", job, e, a.Task), nil), &mf); err != nil {
					c.t.Fatal(err)
				}
				keys = append(keys, mf.Manifest.Blobs()...)
			}
		}
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

func bucketKeys(t *testing.T, store blobstore.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(context.Background(), "", func(i blobstore.Info) error {
		keys = append(keys, i.Key)
		return nil
	}); err != nil {
		t.Fatalf("list bucket: %v", err)
	}
	sort.Strings(keys)
	return keys
}

// gcRun runs one collection cycle on the leader and returns its report.
func (c *clCluster) gcRun(orphans bool) map[string]any {
	var rep map[string]any
	if err := json.Unmarshal(c.send("POST", fmt.Sprintf("/v1/gc/run?orphans=%v", orphans), nil), &rep); err != nil {
		c.t.Fatal(err)
	}
	return rep
}

func (c *clCluster) fsckOK() {
	c.t.Helper()
	var f struct {
		OK     bool            `json:"ok"`
		Report json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal(c.send("GET", "/v1/fsck", nil), &f); err != nil || !f.OK {
		c.t.Fatalf("fsck: %s %v", f.Report, err)
	}
}

func (c *clCluster) verifyOK(job string) {
	c.t.Helper()
	var v struct {
		Missing []any `json:"missing"`
		Errors  []any `json:"errors"`
	}
	raw := c.send("GET", "/v1/jobs/"+job+"/verify", nil)
	if err := json.Unmarshal(raw, &v); err != nil || len(v.Missing) != 0 || len(v.Errors) != 0 {
		c.t.Fatalf("verify %s: %s %v", job, raw, err)
	}
}

// startSingleS3 starts one metastore process on the S3 server.
func startSingleS3(t *testing.T, endpoint string, extra ...string) *clCluster {
	t.Helper()
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(t.TempDir(), "n1")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr, "--raft-addr", p.raftAddr}, s3Flags(endpoint, extra...)...)
	p.env = s3Env()
	c := &clCluster{t: t, procs: []*clProc{p}}
	p.start(t)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- n1 stderr (last 4 KiB):\n%s", tail(p.stderr.String(), 4096))
		}
	})
	c.leader(30 * time.Second)
	return c
}

// TestS3IncrementalJobAndGC is the scenario end to end: a job with 4
// incremental tasks runs 60 epochs, writing segments every epoch and
// materializing every 10, retention 2, one pinned savepoint; after GC the
// bucket holds exactly the blobs the retained and pinned checkpoints
// reference, and every count equals its recount. An upload whose worker
// died is collected after lease and grace; an object uploaded with no
// intent is swept as an orphan; a job restored from the savepoint shares
// its blobs, which survive until both jobs stop referencing them.
func TestS3IncrementalJobAndGC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server and a metastore process; skipped in -short mode")
	}
	endpoint := blobtest.StartS3Server(t, s3Bucket)
	bucket := blobtest.NewS3Store(t, endpoint, s3Bucket, "ms")
	c := startSingleS3(t, endpoint, "--gc-interval", "1h", "--gc-grace", "0s", "--upload-lease", "3s",
		"--gc-orphan-grace", "2s", "--gc-orphan-every", "0s")

	c.send("PUT", "/v1/jobs/inc", map[string]any{"config": map[string]any{"retained": 2}})
	var specs []map[string]any
	var workers []*httpWorker
	for i := 0; i < 4; i++ {
		id := fmt.Sprintf("t%d", i)
		specs = append(specs, map[string]any{"id": id, "capabilities": []string{"state", "incremental"}})
		workers = append(workers, &httpWorker{c: c, job: "inc", task: id, gen: 1})
	}
	c.send("POST", "/v1/jobs/inc/attempts", map[string]any{"attempt_id": "a1", "tasks": specs})
	for epoch := uint64(1); epoch <= 60; epoch++ {
		c.send("POST", "/v1/jobs/inc/epochs", map[string]any{"generation": 1, "epoch": epoch})
		for _, w := range workers {
			w.step(epoch, epoch%10 == 0)
		}
		if epoch == 25 {
			c.send("PUT", "/v1/jobs/inc/epochs/25/pin", map[string]any{"name": "sp"})
		}
	}
	before := bucketKeys(t, bucket)
	c.gcRun(false)
	want := c.referencedKeys("inc")
	got := bucketKeys(t, bucket)
	t.Logf("bucket: %d objects before GC, %d after; %d referenced", len(before), len(got), len(want))
	if !slices.Equal(got, want) {
		t.Fatalf("bucket after GC holds %d objects, retained and pinned checkpoints reference %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	if len(before) <= len(got) {
		t.Fatalf("GC deleted nothing: %d objects before, %d after", len(before), len(got))
	}
	c.fsckOK()
	c.verifyOK("inc")

	// A worker uploads through an intent and dies before acking: the
	// object goes after lease and grace. An object with no intent at all
	// is an orphan, swept once older than the orphan grace.
	dead := workers[0].upload([]byte("never acknowledged"))
	if err := bucket.Put(context.Background(), "inc/t0/orphan-no-intent", strings.NewReader("orphan"), 6); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		c.gcRun(true)
		keys := bucketKeys(t, bucket)
		if slices.Contains(keys, dead) || slices.Contains(keys, "inc/t0/orphan-no-intent") {
			return fmt.Errorf("dead upload or orphan still in the bucket")
		}
		return nil
	})
	var blob struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(c.send("GET", "/v1/blobs/"+dead, nil), &blob)
	if blob.State != "gone" {
		t.Fatalf("dead upload's record is %q, want gone", blob.State)
	}

	// Another job restores t0 from the savepoint and shares its blobs.
	var sp struct {
		Manifest manifests.Manifest `json:"manifest"`
	}
	_ = json.Unmarshal(c.send("GET", "/v1/jobs/inc/epochs/25/manifests/t0", nil), &sp)
	shared := sp.Manifest.Blobs()
	c.send("PUT", "/v1/jobs/copy", map[string]any{"config": map[string]any{"retained": 1}})
	c.send("POST", "/v1/jobs/copy/attempts", map[string]any{"attempt_id": "c1", "tasks": specs[:1]})
	cw := &httpWorker{c: c, job: "copy", task: "t0", gen: 1, m: sp.Manifest, seq: 10_000, base: map[string]any{"job": "inc", "task": "t0", "epoch": 25}}
	c.send("POST", "/v1/jobs/copy/epochs", map[string]any{"generation": 1, "epoch": 1})
	cw.step(1, false)
	c.send("DELETE", "/v1/jobs/inc/epochs/25/pin", nil)
	c.gcRun(false)
	keys := bucketKeys(t, bucket)
	for _, k := range shared {
		if !slices.Contains(keys, k) {
			t.Fatalf("blob %s shared with the copy job was deleted", k)
		}
	}
	c.verifyOK("copy")
	// The copy job materializes twice: nothing holds the savepoint's
	// blobs any more, and they go.
	for e := uint64(2); e <= 3; e++ {
		c.send("POST", "/v1/jobs/copy/epochs", map[string]any{"generation": 1, "epoch": e})
		cw.step(e, true)
	}
	c.gcRun(false)
	keys = bucketKeys(t, bucket)
	for _, k := range shared {
		if slices.Contains(keys, k) {
			t.Fatalf("savepoint blob %s survived after both jobs let go", k)
		}
	}
	if want := c.referencedKeys("inc", "copy"); !slices.Equal(keys, want) {
		t.Fatalf("bucket at the end:\n got %v\nwant %v", keys, want)
	}
	c.fsckOK()
}

// TestS3GCLeaderKilledWhileDeleting kills the leader while a GC batch is
// deleting: after re-election no referenced blob is missing and the batch
// completes.
func TestS3GCLeaderKilledWhileDeleting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server and a cluster of processes; skipped in -short mode")
	}
	endpoint := blobtest.StartS3Server(t, s3Bucket)
	bucket := blobtest.NewS3Store(t, endpoint, s3Bucket, "ms")
	c := startClusterWith(t, 3, s3Env(), s3Flags(endpoint, "--gc-interval", "100ms", "--gc-grace", "0s", "--gc-rate", "10", "--gc-batch", "1000")...)
	c.leader(30 * time.Second)

	c.send("PUT", "/v1/jobs/g", map[string]any{"config": map[string]any{"retained": 1}})
	c.send("POST", "/v1/jobs/g/attempts", map[string]any{"attempt_id": "a1", "tasks": []map[string]any{{"id": "t", "capabilities": []string{"state", "incremental"}}}})
	w := &httpWorker{c: c, job: "g", task: "t", gen: 1}
	// Every epoch materializes: the previous epoch's blobs become garbage
	// when it is subsumed.
	for epoch := uint64(1); epoch <= 40; epoch++ {
		c.send("POST", "/v1/jobs/g/epochs", map[string]any{"generation": 1, "epoch": epoch})
		w.step(epoch, true)
	}
	type gcStatus struct {
		Leading  bool `json:"leading"`
		Deleting int  `json:"deleting"`
	}
	// Ask whoever leads at each poll: on a loaded machine leadership can
	// move before the collector gets going.
	var leader *clProc
	waitFor(t, 30*time.Second, func() error {
		leader = c.leader(30 * time.Second)
		var st gcStatus
		if err := clGet(leader.url("/v1/gc"), &st); err != nil {
			return err
		}
		if !st.Leading || st.Deleting == 0 {
			return fmt.Errorf("no batch deleting yet on the leader %s", leader.id)
		}
		return nil
	})
	t.Logf("killing leader %s while a GC batch is deleting", leader.id)
	leader.kill(t)
	next := c.leader(30 * time.Second)
	waitFor(t, 60*time.Second, func() error {
		var st gcStatus
		if err := clGet(next.url("/v1/gc"), &st); err != nil {
			return err
		}
		if st.Deleting != 0 {
			return fmt.Errorf("%d blobs still deleting", st.Deleting)
		}
		want := c.referencedKeys("g")
		if got := bucketKeys(t, bucket); !slices.Equal(got, want) {
			return fmt.Errorf("bucket holds %d objects, %d referenced", len(got), len(want))
		}
		return nil
	})
	c.verifyOK("g")
	c.fsckOK()
	var rp struct {
		Kinds map[string]struct {
			Manifest manifests.Manifest `json:"manifest"`
		} `json:"kinds"`
	}
	_ = json.Unmarshal(c.send("GET", "/v1/jobs/g/tasks/t/restore", nil), &rp)
	for _, k := range rp.Kinds["state"].Manifest.Blobs() {
		if _, err := bucket.Head(context.Background(), k); err != nil {
			t.Fatalf("referenced blob %s: %v", k, err)
		}
	}
}
