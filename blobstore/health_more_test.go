package blobstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// TestHealthIgnoresCallsThatNeverReachTheStore: a Put refused for its body
// size (nothing was sent, or the upload was cut short by the store itself)
// and a presign of the local store say nothing about the object store.
func TestHealthIgnoresCallsThatNeverReachTheStore(t *testing.T) {
	h := blobstore.NewHealth()
	h.Observe(blobstore.OpPut, 1, fmt.Errorf("blobstore: s3 put %q: %w", "k", blobstore.ErrSizeMismatch), time.Millisecond)
	h.Observe(blobstore.OpGet, 1, fmt.Errorf("%w: -1", blobstore.ErrInvalidRange), time.Millisecond)
	h.Observe(blobstore.OpPresign, 1, blobstore.ErrPresignUnsupported, time.Millisecond)
	if s := h.Snapshot(); s.Calls != 0 || s.Failures != 0 || s.LastError != "" {
		t.Fatalf("after calls that never reached the store: %+v", s)
	}
}
