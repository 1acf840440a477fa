package blobstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3GetOfNothingSendsNoGet: a Get of zero bytes checks the offset
// against the object's size with a HEAD and sends no GetObject: HTTP has no
// range of zero bytes, and a server may ignore an invalid range such as
// "bytes=N-(N-1)" and answer the whole object (RFC 9110), although the
// test server refuses it. The requests are recorded on their way to the S3
// server process.
func TestS3GetOfNothingSendsNoGet(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "") // the SDK cannot add one to a plain *http.Client
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	rec := &recorder{next: http.DefaultTransport}
	cfg := blobtest.Config(endpoint, testBucket, "nothing")
	cfg.HTTPClient = &http.Client{Transport: rec}
	s, err := blobstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "obj", "0123456789")
	for _, offset := range []int64{0, 4, 10, 11} {
		rec.take(0)
		rc, err := s.Get(ctx, "obj", offset, 0)
		if offset > 10 {
			if !errors.Is(err, blobstore.ErrInvalidRange) {
				t.Errorf("Get(obj, %d, 0): %v, want ErrInvalidRange", offset, err)
			}
		} else if err != nil {
			t.Errorf("Get(obj, %d, 0): %v", offset, err)
		} else {
			_ = rc.Close()
		}
		for _, req := range rec.take(0) {
			if req.Method != http.MethodHead {
				t.Errorf("Get(obj, %d, 0) sent %s %s (Range %q), want only a HEAD", offset, req.Method, req.URL.Path, req.Header.Get("Range"))
			}
		}
	}
}
