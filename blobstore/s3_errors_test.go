package blobstore_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3ServerErrorsAreNotMissingObjects: an object store that answers
// 503 to every attempt (the answers injected between the store and the S3
// server process, which holds the object) fails each call after the
// retryer's attempts with an error that is neither ErrNotFound (a restore
// or the collector would take the blob for gone) nor ErrAccessDenied, and
// that the health counts as a failure.
func TestS3ServerErrorsAreNotMissingObjects(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "") // the SDK cannot add one to a plain *http.Client
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	rec := &recorder{next: http.DefaultTransport}
	health := blobstore.NewHealth()
	cfg := blobtest.Config(endpoint, testBucket, "unavailable")
	cfg.MaxAttempts = 2
	cfg.HTTPClient = &http.Client{Transport: rec}
	cfg.Observer = health.Observe
	s, err := blobstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "obj", "present")
	ops := []struct {
		name string
		call func() error
	}{
		{"head", func() error { _, err := s.Head(ctx, "obj"); return err }},
		{"get", func() error {
			rc, err := s.Get(ctx, "obj", 0, -1)
			if err == nil {
				_ = rc.Close()
			}
			return err
		}},
		{"get of nothing", func() error {
			rc, err := s.Get(ctx, "obj", 3, 0)
			if err == nil {
				_ = rc.Close()
			}
			return err
		}},
		{"list", func() error { return s.List(ctx, "", func(blobstore.Info) error { return nil }) }},
		{"delete", func() error { _, err := s.Delete(ctx, []string{"obj"}); return err }},
	}
	for _, op := range ops {
		rec.take(100)
		err := op.call()
		sent := rec.take(0)
		if err == nil || errors.Is(err, blobstore.ErrNotFound) || errors.Is(err, blobstore.ErrAccessDenied) {
			t.Errorf("%s answered 503: %v, want an error that is not ErrNotFound or ErrAccessDenied", op.name, err)
		}
		if len(sent) != cfg.MaxAttempts {
			t.Errorf("%s: %d attempts, want %d (the retryer's)", op.name, len(sent), cfg.MaxAttempts)
		}
		if h := health.Snapshot(); h.ConsecutiveFailures == 0 || h.LastErrorOp != strings.Fields(op.name)[0] {
			t.Errorf("%s: health %+v, want the failure counted", op.name, h)
		}
	}
	if got := get(t, s, "obj", 0, -1); got != "present" {
		t.Fatalf("obj after the outage: %q", got)
	}
}
