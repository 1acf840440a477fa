package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// s3Member starts a single member whose blobs live in S3: the S3 client
// over HTTP to a cmd/s3server process (internal/s3server) on loopback.
func s3Member(t *testing.T) (*member, *blobstore.S3) {
	t.Helper()
	endpoint := blobtest.StartS3Server(t, "ckpt")
	store := blobtest.NewS3Store(t, endpoint, "ckpt", "ms")
	return testmember.StartSingleStore(t, store, nil), store
}

func slot(t *testing.T, m *member, job string, gen uint64) wire.Upload {
	t.Helper()
	var ans struct {
		Uploads []wire.Upload `json:"uploads"`
	}
	ok(t, "POST", m.URL+"/v1/jobs/"+job+"/uploads", fmt.Sprintf(`{"generation":%d,"task":"t"}`, gen), &ans)
	if len(ans.Uploads) != 1 {
		t.Fatalf("uploads: %+v", ans)
	}
	return ans.Uploads[0]
}

// putSlot PUTs body to an upload slot the way a worker does (its URL and
// headers); withHeader false drops the headers the slot asks for.
func putSlot(t *testing.T, u wire.Upload, body string, withHeader bool) int {
	t.Helper()
	req, err := http.NewRequest(u.Method, u.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if withHeader {
		for k, v := range u.Header {
			req.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func ackBlob(key string, declared, length uint64, seq int) string {
	return fmt.Sprintf(`{"blobs":[{"key":%q,"size":%d}],"delta":{"add_segments":[{"key":%q,"offset":0,"length":%d,"first_seq":%d,"last_seq":%d}]}}`,
		key, declared, key, length, seq, seq)
}

func readObject(t *testing.T, s blobstore.Store, key string) string {
	t.Helper()
	rc, err := s.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBlobsWrittenOnce is the attack of issue 13, item 4, against S3: the
// presigned upload URL of a committed checkpoint's blob is replayed within
// its lease. The replay is refused (If-None-Match: * is signed into the
// URL), the blob's size and ETag are recorded right after the ack, a blob
// whose object does not match its declared size is flagged in its record
// and in restore plans, verify reports a blob rewritten behind the store's
// back (same size, other bytes), and a superseded attempt's slot cannot be
// committed.
func TestBlobsWrittenOnce(t *testing.T) {
	m, store := s3Member(t)
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)

	up := slot(t, m, "j", 1)
	state := "committed state of t"
	if code := putSlot(t, up, state, true); code != http.StatusOK {
		t.Fatalf("upload answered %d", code)
	}
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", `{"generation":1,"manifest":`+ackBlob(up.Key, uint64(len(state)), uint64(len(state)), 1)+`}`, nil)

	// The attack: replay the URL with other bytes, with and without the
	// headers it came with.
	if code := putSlot(t, up, "rewritten state!!!!!", true); code != http.StatusPreconditionFailed {
		t.Fatalf("replayed upload URL answered %d, want 412", code)
	}
	if code := putSlot(t, up, "rewritten state!!!!!", false); code != http.StatusForbidden {
		t.Fatalf("replayed upload URL without its signed condition answered %d, want 403", code)
	}
	if got := readObject(t, store, up.Key); got != state {
		t.Fatalf("the committed blob now holds %q", got)
	}

	// Right after the ack the leader recorded what S3 holds.
	waitFor(t, 10*time.Second, "observation of "+up.Key, func() bool {
		b, _, err := m.FSM.Blob(up.Key)
		return err == nil && b.Observed != nil
	})
	info, err := store.Head(context.Background(), up.Key)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := m.FSM.Blob(up.Key)
	if b.Flagged || b.Observed.Size != uint64(len(state)) || b.Observed.ETag == "" || b.Observed.ETag != info.ETag {
		t.Fatalf("observed %+v, object %+v", b.Observed, info)
	}

	// A worker that declares another size than it uploaded: flagged.
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":2}`, nil)
	short := slot(t, m, "j", 1)
	if code := putSlot(t, short, "0123456789", true); code != http.StatusOK {
		t.Fatalf("upload answered %d", code)
	}
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/2/acks/t", `{"generation":1,"manifest":`+ackBlob(short.Key, 12, 12, 2)+`}`, nil)
	waitFor(t, 10*time.Second, "observation of "+short.Key, func() bool {
		b, _, err := m.FSM.Blob(short.Key)
		return err == nil && b.Observed != nil
	})
	if b, _, _ := m.FSM.Blob(short.Key); !b.Flagged || b.Observed.Size != 10 {
		t.Fatalf("a blob of 10 bytes declared as 12: %+v", b)
	}
	var plan wire.RestorePlan
	ok(t, "GET", m.URL+"/v1/jobs/j/tasks/t/restore", nil, &plan)
	if len(plan.FlaggedBlobs) != 1 || plan.FlaggedBlobs[0].Key != short.Key || plan.FlaggedBlobs[0].Declared != 12 || plan.FlaggedBlobs[0].Observed.Size != 10 {
		t.Fatalf("restore plan flags %+v", plan.FlaggedBlobs)
	}

	// Rewritten behind the store's back (credentials to the bucket, or a
	// store without conditional writes), at the same size: verify reports
	// it, by its ETag.
	forged := strings.Repeat("X", len(state))
	if err := store.Put(context.Background(), up.Key, strings.NewReader(forged), int64(len(forged))); err != nil {
		t.Fatal(err)
	}
	var rep gc.VerifyReport
	ok(t, "GET", m.URL+"/v1/jobs/j/verify", nil, &rep)
	var changed []string
	for _, c := range rep.Changed {
		changed = append(changed, c.Key)
		if c.Key == up.Key && (c.ObservedETag != b.Observed.ETag || c.ETag == c.ObservedETag || c.Size != int64(len(state))) {
			t.Fatalf("changed blob reported as %+v", c)
		}
	}
	if rep.OK() || !containsAll(changed, up.Key, short.Key) || len(rep.Missing) != 0 {
		t.Fatalf("verify after the rewrite: %+v", rep)
	}

	// A new attempt: the old attempt's slot is refused at ack.
	old := slot(t, m, "j", 1)
	if code := putSlot(t, old, "zombie", true); code != http.StatusOK {
		t.Fatalf("upload answered %d", code)
	}
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a2","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":2,"epoch":3}`, nil)
	r := do(t, "PUT", m.URL+"/v1/jobs/j/epochs/3/acks/t", `{"generation":2,"manifest":`+ackBlob(old.Key, 6, 6, 3)+`}`)
	var e apiError
	r.decode(t, &e)
	if r.status != http.StatusConflict || e.Error.Code != wire.CodeFenced || e.Error.Field != "manifest.blobs" {
		t.Fatalf("ack of generation 2 committing a slot of generation 1: %d %s", r.status, r.body)
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// TestSupersededSlotUploadRefused: with the local store, a worker of a
// superseded attempt cannot even upload to the slot it was handed.
func TestSupersededSlotUploadRefused(t *testing.T) {
	m := startSingle(t)
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	up := slot(t, m, "j", 1)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a2","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	r := do(t, "PUT", up.URL, "zombie bytes")
	var e apiError
	r.decode(t, &e)
	if r.status != http.StatusConflict || e.Error.Code != wire.CodeFenced {
		t.Fatalf("upload to a slot of a superseded attempt: %d %s", r.status, r.body)
	}
}
