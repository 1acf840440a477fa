package blobstore_test

import (
	"context"
	"strings"
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

// TestS3ConfigValidateMore: settings TestS3ConfigValidate does not try are
// refused too: a bucket name with "..", a secret without an access key id,
// negative attempt and connect timeouts.
func TestS3ConfigValidateMore(t *testing.T) {
	ok := blobstore.S3Config{Bucket: "blobs", Region: "eu-west-1"}
	for name, tc := range map[string]struct {
		change func(c *blobstore.S3Config)
		want   string
	}{
		"bucket with ..":           {func(c *blobstore.S3Config) { c.Bucket = "my..bucket" }, "invalid bucket name"},
		"secret alone":             {func(c *blobstore.S3Config) { c.SecretAccessKey = "secret" }, "both"},
		"negative attempt timeout": {func(c *blobstore.S3Config) { c.AttemptTimeout = -time.Second }, "attempt timeout"},
		"negative connect timeout": {func(c *blobstore.S3Config) { c.ConnectTimeout = -time.Second }, "connect timeout"},
	} {
		c := ok
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error about %q", name, err, tc.want)
		}
		if _, err := blobstore.NewS3(context.Background(), c); err == nil {
			t.Errorf("%s: NewS3 accepted an invalid config", name)
		}
	}
}
