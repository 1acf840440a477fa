package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/client"
)

// TestPutObjectRetryAfterLandedPut: a presigned S3 upload URL creates its
// object once (If-None-Match: *). When the first PUT lands but its answer
// is lost, the client's retry is answered 412; that is the earlier
// attempt's success, not a failure.
func TestPutObjectRetryAfterLandedPut(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, "ckpt")
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var puts atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && puts.Add(1) == 1 {
			// Forward the PUT, then lose its answer.
			rec := httptest.NewRecorder()
			forward.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Errorf("first PUT answered %d: %s", rec.Code, rec.Body)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	store := blobtest.NewS3Store(t, proxy.URL, "ckpt", "p")
	u, header, err := store.PresignPut(context.Background(), "j/t/k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{Endpoints: []string{proxy.URL}, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("the state, uploaded once")
	if err := c.PutObject(context.Background(), client.UploadSlot{Key: "j/t/k", Method: http.MethodPut, URL: u, Header: header}, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("PutObject after a landed PUT whose answer was lost: %v", err)
	}
	if n := puts.Load(); n != 2 {
		t.Fatalf("%d PUTs, want 2 (the lost answer, then the conditional retry)", n)
	}
	rc, err := store.Get(context.Background(), "j/t/k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("object holds %q", got)
	}
}
