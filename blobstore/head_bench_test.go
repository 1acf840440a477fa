package blobstore_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// cannedHead is an HTTP transport that answers every request at once, in
// memory, as S3 answers the HEAD of an object: what is measured through it
// is the client's own work.
type cannedHead struct{}

func (cannedHead) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Length":   {"1048576"},
			"Etag":             {`"9b2cf535f27731c974343645a3985328"`},
			"Last-Modified":    {"Mon, 05 Jan 2026 15:04:05 GMT"},
			"X-Amz-Request-Id": {"0123456789ABCDEF"},
		},
		ContentLength: 1048576, Body: http.NoBody, Request: r,
	}, nil
}

// BenchmarkS3Head measures one HEAD of an object through the SDK's
// HeadObject and through the direct path, in the same run: "sdk" and
// "direct" with a transport that answers in memory (the CPU the leader
// spends per observed blob), "sdk-server" and "direct-server" against the
// S3 server process over loopback.
func BenchmarkS3Head(b *testing.B) {
	b.Setenv("AWS_CA_BUNDLE", "") // a plain *http.Client below
	ctx := context.Background()
	cfg := blobtest.Config("http://127.0.0.1:9", testBucket, "bench")
	cfg.HTTPClient = &http.Client{Transport: cannedHead{}}
	mem, err := blobstore.NewS3(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	endpoint := blobtest.StartS3Server(b, testBucket)
	srv := blobtest.NewS3Store(b, endpoint, testBucket, "bench")
	put(b, srv, "job/t/0123456789abcdef", "a blob")
	for _, c := range []struct {
		name string
		head func(context.Context, string) (blobstore.Info, error)
	}{
		{"sdk", mem.HeadSDK}, {"direct", mem.Head},
		{"sdk-server", srv.HeadSDK}, {"direct-server", srv.Head},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.head(ctx, "job/t/0123456789abcdef"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
