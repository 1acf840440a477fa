package blobstore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// do sends method to u with header and body, and returns the status.
func do(t *testing.T, method, u string, header http.Header, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestS3PresignedURLMethodAndExpiry: against the S3 server process, an
// upload URL is refused for any other method than PUT, and once its
// validity has passed; within it, it uploads.
func TestS3PresignedURLMethodAndExpiry(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	s := blobtest.NewS3Store(t, endpoint, testBucket, "expiry")
	put(t, s, "existing", "kept")

	// Signed two minutes ago, valid for one: expired.
	s.SetPresignClock(func() time.Time { return time.Now().Add(-2 * time.Minute) })
	u, header, err := s.PresignPut(ctx, "late", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code := do(t, http.MethodPut, u, header, "too late"); code != http.StatusForbidden {
		t.Errorf("PUT with an expired URL answered %d, want 403", code)
	}
	if _, err := s.Head(ctx, "late"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Head(late) after the expired PUT: %v, want ErrNotFound", err)
	}

	s.SetPresignClock(time.Now)
	for _, key := range []string{"fresh", "existing"} {
		u, header, err := s.PresignPut(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodPost} {
			if code := do(t, method, u, header, ""); code != http.StatusForbidden {
				t.Errorf("%s of %s with its PUT URL answered %d, want 403", method, key, code)
			}
		}
	}
	if got := get(t, s, "existing", 0, -1); got != "kept" {
		t.Fatalf("existing after the other methods: %q", got)
	}
	if code := do(t, http.MethodPut, u, header, "in time"); code != http.StatusForbidden {
		t.Fatalf("the expired URL answered %d on a second try, want 403", code)
	}
	u, header, err = s.PresignPut(ctx, "fresh", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code := do(t, http.MethodPut, u, header, "in time"); code != http.StatusOK {
		t.Fatalf("PUT within the validity answered %d", code)
	}
	if got := get(t, s, "fresh", 0, -1); got != "in time" {
		t.Fatalf("fresh = %q", got)
	}
}
