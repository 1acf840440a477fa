package blobstore_test

import (
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// TestNewKeyOrderAndUniqueness: keys of one directory sort by the time
// they were made (the state machine's inserts stay at the end of a task's
// range), keys made at the same instant differ, and every key is valid.
func TestNewKeyOrderAndUniqueness(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		at := t0.Add(time.Duration(i/10) * time.Millisecond) // ten keys per instant
		k := blobstore.NewKey("job/task", at)
		if err := blobstore.ValidateKey(k); err != nil {
			t.Fatalf("NewKey made an invalid key: %v", err)
		}
		if len(k) != len("job/task/")+40 {
			t.Fatalf("key %q: want 40 hex digits after the directory", k)
		}
		if seen[k] {
			t.Fatalf("key %q made twice", k)
		}
		seen[k] = true
		if i%10 == 0 && k <= prev {
			t.Fatalf("key %q made later sorts before %q", k, prev)
		}
		prev = max(prev, k)
	}
}
