package blobstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3ListNames: ListNames lists the objects whose keys start with its
// prefix, the start of a name included, in byte order; a prefix that is
// not a valid key is refused with ErrInvalidKey before anything is listed
// (an empty one would list the whole store, "../" what lies outside it).
func TestS3ListNames(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	s := blobtest.NewS3Store(t, endpoint, testBucket, "names/in")
	outside := blobtest.NewS3Store(t, endpoint, testBucket, "names")
	put(t, outside, "sibling", "outside the store's prefix")
	for _, k := range []string{"j/t/0124", "j/t/0123", "j/t/02", "j/t/01/x", "j/u/0123", "j/t0123"} {
		put(t, s, k, k)
	}
	var got []string
	if err := s.ListNames(ctx, "j/t/01", func(i blobstore.Info) error {
		got = append(got, i.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"j/t/01/x", "j/t/0123", "j/t/0124"}; !slices.Equal(got, want) {
		t.Fatalf("ListNames(j/t/01) = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "../", "..", "j//t", "/j", "j/t/"} {
		called := 0
		err := s.ListNames(ctx, bad, func(blobstore.Info) error { called++; return nil })
		if !errors.Is(err, blobstore.ErrInvalidKey) || called != 0 {
			t.Errorf("ListNames(%q) = %v after %d objects, want ErrInvalidKey before any", bad, err, called)
		}
	}
}
