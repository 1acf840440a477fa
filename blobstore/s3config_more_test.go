package blobstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// TestS3CallTimeoutDefault: a store call is bounded by S3Config.Timeout,
// by DefaultS3Timeout when it is zero, and by nothing but the caller's
// context when it is negative. (The bound itself is exercised against
// servers that do not answer in TestS3UnreachableServerFailsFast; waiting
// out the 30 s default there would make a slow test.)
func TestS3CallTimeoutDefault(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{0: blobstore.DefaultS3Timeout, 5 * time.Second: 5 * time.Second, -1: -1} {
		s, err := blobstore.NewS3(context.Background(), blobstore.S3Config{
			Bucket: "blobs", Region: "us-east-1", AccessKeyID: "id", SecretAccessKey: "secret", Timeout: timeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CallTimeout(); got != want && !(want < 0 && got <= 0) {
			t.Errorf("Timeout %s: calls bounded by %s, want %s", timeout, got, want)
		}
	}
}
