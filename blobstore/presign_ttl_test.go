package blobstore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3PresignRefusesSubSecondTTL: X-Amz-Expires counts whole seconds,
// so a TTL under a second cannot be signed: PresignPut refuses it instead
// of handing out a URL with X-Amz-Expires=0, which the server refuses for
// every request (as S3 does). A TTL of one second is the shortest.
func TestS3PresignRefusesSubSecondTTL(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	s := blobtest.NewS3Store(t, endpoint, testBucket, "subsecond")
	for _, ttl := range []time.Duration{time.Nanosecond, 500 * time.Millisecond, time.Second - 1} {
		u, header, err := s.PresignPut(ctx, "k", ttl)
		if err == nil {
			code := do(t, http.MethodPut, u, header, "x")
			t.Errorf("PresignPut with ttl %s gave %s, which the server answers %d; want an error", ttl, u, code)
		}
	}
	if _, _, err := s.PresignPut(ctx, "k", time.Second); err != nil {
		t.Fatalf("PresignPut with ttl 1s: %v", err)
	}
}
