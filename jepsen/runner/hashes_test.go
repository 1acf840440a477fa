package runner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
)

// TestFinalHashesReadAgainAcrossAnEntry: an entry the leader commits
// between two reads of a round (its own tasks) does not make members at one
// state look apart: the next round finds them at one index. Members that
// stay apart, or a member that cannot answer, are answered as the last
// round found them when the time is up.
func TestFinalHashesReadAgainAcrossAnEntry(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	// n1 is read first, at 10; the leader n2 applies 11 just before it is
	// read; n1 reaches 11 by the second round.
	catchingUp := func(_ context.Context, id string) (cluster.StateHash, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if id == "n1" && reads == 1 {
			return cluster.StateHash{Index: 10, Hash: "h"}, nil
		}
		return cluster.StateHash{Index: 11, Hash: "h"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := finalHashes(ctx, []string{"n1", "n2", "n3"}, catchingUp)
	for _, id := range []string{"n1", "n2", "n3"} {
		if h := got[id]; h.err != nil || h.Index != 11 {
			t.Errorf("%s: %+v, want index 11", id, h)
		}
	}
	if reads != 6 {
		t.Errorf("%d reads, want two rounds of three", reads)
	}

	apart := func(_ context.Context, id string) (cluster.StateHash, error) {
		if id == "n3" {
			return cluster.StateHash{Index: 9, Hash: "old"}, nil
		}
		return cluster.StateHash{Index: 11, Hash: "h"}, nil
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	got = finalHashes(short, []string{"n1", "n2", "n3"}, apart)
	if got["n3"].Index != 9 || got["n1"].Index != 11 {
		t.Errorf("members apart: %+v, want n3 at 9 and n1 at 11", got)
	}

	down := errors.New("connection refused")
	failing := func(_ context.Context, id string) (cluster.StateHash, error) {
		if id == "n2" {
			return cluster.StateHash{}, down
		}
		return cluster.StateHash{Index: 11, Hash: "h"}, nil
	}
	short2, cancelShort2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort2()
	if got = finalHashes(short2, []string{"n1", "n2"}, failing); !errors.Is(got["n2"].err, down) {
		t.Errorf("a member that cannot answer: %+v, want its error", got["n2"])
	}
}
