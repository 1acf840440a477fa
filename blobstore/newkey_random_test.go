package blobstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// randomDigitsVary fails unless every one of the hex digits of names at
// [from, to) takes more than one value over names: the random part of a
// key is random all through, not partly constant. (For n names of one
// instant, a random digit is constant with probability 16^-(n-1).)
func randomDigitsVary(t *testing.T, what string, names []string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		first := names[0][i]
		varies := false
		for _, n := range names[1:] {
			if n[i] != first {
				varies = true
				break
			}
		}
		if !varies {
			t.Fatalf("%s: hex digit %d is %q in all %d names made at one instant, want random", what, i, first, len(names))
		}
	}
}

// TestNewKeyRandomPart: of the 40 hex digits of a key's name, the first 16
// are the time and all 24 after them random; of a batch id's 32, the first
// 16 the time and all 16 after them random.
func TestNewKeyRandomPart(t *testing.T) {
	at := time.Unix(1_800_000_000, 123)
	var keys, ids []string
	for range 64 {
		k := blobstore.NewKey("j/t", at)
		keys = append(keys, strings.TrimPrefix(k, "j/t/"))
		ids = append(ids, blobstore.NewBatchID(at))
	}
	for _, k := range keys {
		if k[:16] != keys[0][:16] {
			t.Fatalf("keys of one instant differ in their time digits: %q, %q", k, keys[0])
		}
	}
	randomDigitsVary(t, "NewKey", keys, 16, 40)
	for _, id := range ids {
		if len(id) != 32 || id[:16] != keys[0][:16] {
			t.Fatalf("batch id %q: want 32 hex digits, the time's 16 (%s) first", id, keys[0][:16])
		}
	}
	randomDigitsVary(t, "NewBatchID", ids, 16, 32)
}

// TestTimeWindowOfUploadSlotsAndBareNames: an upload slot's name (56 hex
// digits, fsm.UploadKey) has a window like NewKey's; a name of NewKey's
// shape with no directory before it, or of its length but not hex, is not
// a key NewKey made.
func TestTimeWindowOfUploadSlotsAndBareNames(t *testing.T) {
	slot := "j/t/" + blobstore.NewBatchID(time.Unix(0, 1<<40)) + "0000002a" + strings.Repeat("0", 16)
	if p, ok := blobstore.TimeWindow(slot); !ok || p != "j/t/00000100" {
		t.Fatalf("TimeWindow(%q) = %q, %v; want j/t/00000100, true", slot, p, ok)
	}
	bare := strings.TrimPrefix(blobstore.NewKey("j", time.Unix(0, 1<<40)), "j/")
	if p, ok := blobstore.TimeWindow(bare); ok {
		t.Fatalf("TimeWindow(%q) = %q, true; want false for a name without a directory", bare, p)
	}
	for _, name := range []string{strings.Repeat("g", 40), "0123456789abcdef" + strings.Repeat("z", 24), strings.Repeat("-", 56)} {
		if p, ok := blobstore.TimeWindow("j/t/" + name); ok {
			t.Errorf("TimeWindow(j/t/%s) = %q, true; want false for a name that is not hex", name, p)
		}
	}
}
