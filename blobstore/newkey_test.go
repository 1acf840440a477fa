package blobstore_test

import (
	"strings"
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

// TestTimeWindow: keys NewKey made in one directory within 4.3 s share a
// window prefix; another directory, a later window and names NewKey does
// not make do not.
func TestTimeWindow(t *testing.T) {
	t0 := time.Unix(0, 1<<40) // at the start of a window
	a, okA := blobstore.TimeWindow(blobstore.NewKey("j/t", t0))
	b, okB := blobstore.TimeWindow(blobstore.NewKey("j/t", t0.Add(4*time.Second)))
	c, _ := blobstore.TimeWindow(blobstore.NewKey("j/t", t0.Add(5*time.Second)))
	d, _ := blobstore.TimeWindow(blobstore.NewKey("j/u", t0))
	if !okA || !okB || a != b || a != "j/t/00000100" || c == a || d == a {
		t.Fatalf("windows %q %v, %q %v, %q, %q", a, okA, b, okB, c, d)
	}
	for _, k := range []string{"j/t/log-1", "top", "j/t/" + strings.Repeat("A", 40), "j/t/" + strings.Repeat("0", 39), "j/t/" + strings.Repeat("0", 38)} {
		if p, ok := blobstore.TimeWindow(k); ok {
			t.Errorf("TimeWindow(%q) = %q, true; want false", k, p)
		}
	}
}
