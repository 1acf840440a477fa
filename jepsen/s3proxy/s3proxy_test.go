package s3proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

func last(p *Proxy, op Op) []Request {
	var out []Request
	for _, r := range p.Requests() {
		if r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// TestProxyFaultsAgainstS3Server runs the SDK (through blobstore.S3)
// against the real S3 server process behind the proxy.
func TestProxyFaultsAgainstS3Server(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the S3 server process; skipped in -short mode")
	}
	upstream := blobtest.StartS3Server(t, "bkt")
	p, err := Start("127.0.0.1:0", upstream, Options{
		LogPath:    filepath.Join(t.TempDir(), "requests.jsonl"),
		ClientName: func(ip string) string { return map[string]string{"127.0.0.1": "me"}[ip] },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	store := blobtest.NewS3Store(t, p.Endpoint(), "bkt", "pfx")
	direct := blobtest.NewS3Store(t, upstream, "bkt", "pfx")
	ctx := context.Background()

	// Plain PUT and GET are forwarded and logged.
	if err := store.Put(ctx, "k1", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	puts := last(p, OpPut)
	if len(puts) != 1 || puts[0].Key != "pfx/k1" || puts[0].Status != 200 || puts[0].Client != "me" || !puts[0].Forwarded {
		t.Fatalf("put log %+v", puts)
	}

	// A 503 once: the SDK retries and succeeds.
	if _, err := p.AddRule(Rule{Name: "get503", Ops: []Op{OpGet}, Key: `k1$`, Action: ActError, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rc, err := store.Get(ctx, "k1", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "hello" {
		t.Fatalf("get %q", got)
	}
	gets := last(p, OpGet)
	if len(gets) != 2 || gets[0].Status != 503 || gets[0].Forwarded || gets[0].Fault != "get503: error" || gets[1].Status != 200 {
		t.Fatalf("get log %+v", gets)
	}

	// A timeout once (held, then dropped): the retry succeeds.
	if _, err := p.AddRule(Rule{Ops: []Op{OpHead}, Action: ActTimeout, Hold: 200 * time.Millisecond, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Head(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	heads := last(p, OpHead)
	if len(heads) != 2 || heads[0].Status != 0 || heads[0].Latency < 200*time.Millisecond || heads[1].Status != 200 {
		t.Fatalf("head log %+v", heads)
	}

	// A PUT applied upstream whose reply is lost: the client sees a reset
	// (and retries: the SDK cannot know), the object exists.
	if _, err := p.AddRule(Rule{Ops: []Op{OpPut}, Action: ActLoseReply, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_ = store.Put(ctx, "k2", strings.NewReader("x"), 1)
	puts = last(p, OpPut)
	if len(puts) < 2 || puts[1].Status != 0 || puts[1].Upstream != 200 || !puts[1].Forwarded {
		t.Fatalf("lost put log %+v", puts)
	}
	if _, err := direct.Head(ctx, "k2"); err != nil {
		t.Fatalf("lost-reply PUT not applied: %v", err)
	}

	// A batch delete applied upstream, reply lost as a 503: the keys are
	// gone, the log lists them as deleted, the SDK retry succeeds.
	if _, err := p.AddRule(Rule{Ops: []Op{OpDeleteBatch}, Key: `k1`, Action: ActLoseReply, Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if failed, err := store.Delete(ctx, []string{"k1", "k2"}); err != nil || len(failed) != 0 {
		t.Fatalf("delete: %v %v", failed, err)
	}
	dels := last(p, OpDeleteBatch)
	if len(dels) != 2 || dels[0].Status != 503 || dels[0].Upstream != 200 || len(dels[0].Deleted) != 2 || len(dels[0].Keys) != 2 {
		t.Fatalf("delete log %+v", dels)
	}
	if _, err := direct.Head(ctx, "k1"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("k1 after delete: %v", err)
	}

	// A delay applies to LIST; then rules are cleared.
	if _, err := p.AddRule(Rule{Ops: []Op{OpList}, Action: ActDelay, Delay: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := store.List(ctx, "", func(blobstore.Info) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if l := last(p, OpList); len(l) != 1 || l[0].Latency < 150*time.Millisecond {
		t.Fatalf("list log %+v", l)
	}
	p.ClearRules()

	// Presigned PUTs through the proxy verify upstream (Host kept).
	url, hdr, err := store.PresignPut(ctx, "k3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", url, bytes.NewReader([]byte("abc")))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("presigned put: %d", resp.StatusCode)
	}
	if n := len(p.Since(p.LastSeq() - 1)); n != 1 {
		t.Fatalf("Since: %d entries", n)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// TestLateCorruptAndSlowAgainstS3Server checks the actions of the faults
// s3-late-put, s3-corrupt-get and s3-slow against the real S3 server.
func TestLateCorruptAndSlowAgainstS3Server(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the S3 server process; skipped in -short mode")
	}
	upstream := blobtest.StartS3Server(t, "bkt")
	p, err := Start("127.0.0.1:0", upstream, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	store := blobtest.NewS3Store(t, p.Endpoint(), "bkt", "pfx")
	direct := blobtest.NewS3Store(t, upstream, "bkt", "pfx")
	ctx := context.Background()

	// A late PUT: the proxy holds it until the client gives up, then the
	// server applies it.
	late, err := p.AddRule(Rule{Name: "late", Ops: []Op{OpPut}, Action: ActLate, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	url, hdr, err := store.PresignPut(ctx, "late", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(cctx, "PUT", url, bytes.NewReader([]byte("landed late")))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, 10*time.Second, "the proxy to hold the PUT", func() bool { return p.Holding(late) == 1 })
	if _, err := direct.Head(ctx, "late"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("a held PUT reached the server before its client gave up: %v", err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the client's PUT succeeded; it should have given up")
	}
	waitFor(t, 10*time.Second, "the held PUT to be forwarded", func() bool { return p.Holding(late) == 0 })
	rc, err := direct.Get(ctx, "late", 0, -1)
	if err != nil {
		t.Fatalf("the late PUT did not land: %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "landed late" {
		t.Fatalf("late object %q", got)
	}
	if n := len(last(p, OpPut)); n != 1 {
		t.Fatalf("%d PUTs logged once none is held, want 1", n)
	}
	if l := last(p, OpPut)[0]; !l.Late || l.Upstream != 200 || l.Status != 0 || l.Fault != "late: late" || p.Fired(late) != 1 {
		t.Fatalf("late put log %+v, fired %d", l, p.Fired(late))
	}

	// A corrupt GET: same length, different bytes; the next GET is intact.
	body := strings.Repeat("0123456789", 100)
	if err := store.Put(ctx, "c", strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddRule(Rule{Ops: []Op{OpGet}, Action: ActCorrupt, Count: 1}); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		rc, err := store.Get(ctx, "c", 100, 500)
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
	if bad := read(); len(bad) != 500 || bad == body[100:600] {
		t.Fatalf("corrupt GET: %d bytes, equal to the object: %v", len(bad), bad == body[100:600])
	}
	if good := read(); good != body[100:600] {
		t.Fatal("the GET after the corrupt one differs from the object")
	}
	if gets := last(p, OpGet); len(gets) != 2 || gets[0].Flipped < 1 || gets[0].Flipped > 3 || gets[1].Flipped != 0 {
		t.Fatalf("corrupt get log %+v", gets)
	}

	// A delay with jitter: between Delay and Delay+Jitter.
	if _, err := p.AddRule(Rule{Ops: []Op{OpHead}, Action: ActDelay, Delay: 100 * time.Millisecond, Jitter: 100 * time.Millisecond, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Head(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if h := last(p, OpHead); len(h) != 1 || h[0].Latency < 100*time.Millisecond || h[0].Fault == "" {
		t.Fatalf("slow head log %+v", h)
	}
}
