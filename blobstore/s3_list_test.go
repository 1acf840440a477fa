package blobstore_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3ListInfo: List reports each object's ETag as Head does (the MD5
// of the body, without quotes) and tells the observer how many keys it
// listed.
func TestS3ListInfo(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	var (
		mu     sync.Mutex
		listed []int
	)
	cfg := blobtest.Config(endpoint, testBucket, "listinfo")
	cfg.Observer = func(op string, n int, err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if op == blobstore.OpList {
			listed = append(listed, n)
		}
	}
	s, err := blobstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "a/one", "first body")
	put(t, s, "a/two", "second body")
	put(t, s, "b/three", "third")
	var infos []blobstore.Info
	if err := s.List(ctx, "", func(i blobstore.Info) error {
		infos = append(infos, i)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(infos) != 3 {
		t.Fatalf("List gave %d objects, want 3", len(infos))
	}
	for _, i := range infos {
		h, err := s.Head(ctx, i.Key)
		if err != nil {
			t.Fatal(err)
		}
		body := map[string]string{"a/one": "first body", "a/two": "second body", "b/three": "third"}[i.Key]
		sum := md5.Sum([]byte(body))
		if i.ETag != hex.EncodeToString(sum[:]) || i.ETag != h.ETag || i.Size != h.Size {
			t.Fatalf("List's %+v, Head's %+v: want the same ETag, the MD5 of %q, unquoted", i, h, body)
		}
	}
	if got := listKeys(t, s, "a/"); len(got) != 2 {
		t.Fatalf("List(a/) = %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(listed, []int{3, 2}) {
		t.Fatalf("list observed with counts %v, want [3 2]", listed)
	}
}
