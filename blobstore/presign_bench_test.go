package blobstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// BenchmarkS3PresignPut measures presigning one upload URL (no network:
// presigning is local computation), the per-key cost of an upload-slots
// request on an S3 store.
func BenchmarkS3PresignPut(b *testing.B) {
	b.Setenv("AWS_ACCESS_KEY_ID", "bench")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret")
	s, err := blobstore.NewS3(context.Background(), blobstore.S3Config{
		Bucket: "bkt", Region: "us-east-1", Endpoint: "http://127.0.0.1:9", PathStyle: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.PresignPut(ctx, fmt.Sprintf("job/t/%032x", i), 15*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
