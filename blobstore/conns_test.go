package blobstore_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/metastore/metastore/blobstore"
)

// TestS3KeepsConnectionsForConcurrentHeads: HEADs sent 16 at a time (the
// collector's observation and verify concurrency) reuse their connections
// round after round instead of closing those above the idle limit and
// dialing again. The endpoint is a loopback server that answers every HEAD
// as S3 answers an existing object, and counts the connections it accepts.
func TestS3KeepsConnectionsForConcurrentHeads(t *testing.T) {
	const concurrency, rounds = 16, 8
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	s, err := blobstore.NewS3(ctx, blobstore.S3Config{
		Bucket: "conns", Endpoint: srv.URL, PathStyle: true, Region: "us-east-1",
		AccessKeyID: "test", SecretAccessKey: "test-secret",
	})
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		// Every HEAD of a round is in flight together: each needs its own
		// connection, and all of them go idle before the next round.
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range concurrency {
			wg.Go(func() {
				<-ready
				if _, err := s.Head(ctx, "k/"+string(rune('a'+i))); err != nil {
					t.Error(err)
				}
			})
		}
		close(ready)
		wg.Wait()
	}
	// At most one connection per concurrent HEAD; with the SDK's idle limit
	// of 10, each round above the first dialed about 6 again (about 58).
	if n := conns.Load(); n > concurrency+2 {
		t.Fatalf("%d rounds of %d concurrent HEADs opened %d connections, want at most %d", rounds, concurrency, n, concurrency+2)
	}
}
