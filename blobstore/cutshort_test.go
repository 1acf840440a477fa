package blobstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// cutShort delivers its text, then fails as an HTTP server's request body
// does when the client stops sending before Content-Length.
type cutShort struct{ r io.Reader }

func (c *cutShort) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestPutOfABodyCutShortIsTheCallersFailure: a Put whose body ends early
// with io.ErrUnexpectedEOF (an upload the client cut short) fails with
// ErrSizeMismatch, on S3 and on a directory, stores nothing, and is not
// counted against the store's health: a client cannot make the store look
// failing.
func TestPutOfABodyCutShortIsTheCallersFailure(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	for name, open := range map[string]func(*blobstore.Health) blobstore.Store{
		"s3": func(h *blobstore.Health) blobstore.Store {
			cfg := blobtest.Config(endpoint, testBucket, "cut")
			cfg.Observer = h.Observe
			s, err := blobstore.NewS3(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"local": func(h *blobstore.Health) blobstore.Store {
			s, err := blobstore.NewLocal(t.TempDir(), blobstore.WithLocalObserver(h.Observe))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := blobstore.NewHealth()
			s := open(h)
			err := s.Put(context.Background(), "j/t/cut", &cutShort{strings.NewReader("12345")}, 10)
			if !errors.Is(err, blobstore.ErrSizeMismatch) {
				t.Fatalf("Put of a body cut short: %v, want ErrSizeMismatch", err)
			}
			if _, err := s.Get(context.Background(), "j/t/cut", 0, -1); !errors.Is(err, blobstore.ErrNotFound) {
				t.Fatalf("the body cut short was stored (Get: %v)", err)
			}
			if snap := h.Snapshot(); snap.Failures != 0 || snap.ConsecutiveFailures != 0 {
				t.Fatalf("the store counted failing for a body cut short: %+v", snap)
			}
		})
	}
}
