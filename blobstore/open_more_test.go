package blobstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/metastore/metastore/blobstore"
)

// TestOpenFileURLOfLocalhost: "file://localhost/DIR" names the local
// directory DIR, as "file:///DIR" does (RFC 8089).
func TestOpenFileURLOfLocalhost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := blobstore.Open(context.Background(), "file://localhost"+dir, blobstore.S3Config{})
	if err != nil {
		t.Fatalf("Open(file://localhost%s): %v", dir, err)
	}
	if l, ok := s.(*blobstore.Local); !ok || l.Root() != dir {
		t.Fatalf("Open(file://localhost%s) = %T %v, want the local store at %s", dir, s, s, dir)
	}
}
