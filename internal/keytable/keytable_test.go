package keytable

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
)

type rec struct {
	Size  uint64
	Refs  int32
	State uint8
	Tag   [4]byte
}

// snap is a view and what the table held when it was taken.
type snap struct {
	v    *View[rec]
	want map[string]rec
}

func viewContents(t *testing.T, v *View[rec]) map[string]rec {
	t.Helper()
	got := map[string]rec{}
	v.Each(func(k string, r rec) bool {
		if _, dup := got[k]; dup {
			t.Fatalf("the view lists %q twice", k)
		}
		got[k] = r
		return true
	})
	return got
}

// TestTableMatchesMap: through random puts, deletes, reads and
// compactions, the table answers as a Go map does, and every view answers
// what the table held when it was taken, however the table changed since,
// until it is released. The index keeps 8 bits of each hash, so that keys
// share chains (of about a dozen), free entries are reused, and views
// overlap.
func TestTableMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := New[rec]()
	tb.mask = 0xff
	model := map[string]rec{}
	garbage := 0
	var live []snap
	var taken, compactions int
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d/task-%d/%s", i%7, i%13, strings.Repeat("k", r.IntN(60)))
	}
	for step := range 200_000 {
		k := keys[r.IntN(len(keys))]
		switch op := r.IntN(100); {
		case op < 45:
			v := rec{Size: r.Uint64(), Refs: int32(step), State: uint8(op)}
			tb.Put(k, v)
			model[k] = v
		case op < 70:
			_, had := model[k]
			if got := tb.Delete(k); got != had {
				t.Fatalf("step %d: Delete(%q) = %v, the map held it: %v", step, k, got, had)
			}
			if had {
				garbage += len(k)
			}
			delete(model, k)
		case op < 90:
			want, had := model[k]
			got, ok := tb.Get(k)
			if ok != had || got != want {
				t.Fatalf("step %d: Get(%q) = %v, %v; the map holds %v, %v", step, k, got, ok, want, had)
			}
			if tb.Has(k) != had {
				t.Fatalf("step %d: Has(%q) = %v", step, k, !had)
			}
		case op < 93:
			live = append(live, snap{tb.Snapshot(), maps.Clone(model)})
			taken++
		case op < 97:
			if len(live) > 0 {
				i := r.IntN(len(live))
				s := live[i]
				if got := viewContents(t, s.v); !maps.Equal(got, s.want) {
					t.Fatalf("step %d: a view holds %d keys, want the %d the table held when it was taken", step, len(got), len(s.want))
				}
				if s.v.Len() != len(s.want) {
					t.Fatalf("step %d: a view's Len is %d, want %d", step, s.v.Len(), len(s.want))
				}
				s.v.Release()
				s.v.Release()
				live = append(live[:i], live[i+1:]...)
			}
		case op < 98:
			if r.IntN(20) == 0 {
				tb.Compact()
				compactions++
				garbage = 0
			}
		default:
			for _, s := range live {
				for _, c := range s.v.chunks {
					for _, tc := range tb.chunks {
						if c == tc && c.gen >= tb.gen {
							t.Fatalf("step %d: a chunk a view shares is newer than the view", step)
						}
					}
				}
			}
		}
		if tb.Len() != len(model) {
			t.Fatalf("step %d: Len %d, the map holds %d", step, tb.Len(), len(model))
		}
		if tb.Garbage() != garbage {
			t.Fatalf("step %d: Garbage %d, want %d", step, tb.Garbage(), garbage)
		}
	}
	got := map[string]rec{}
	tb.Each(func(k string, v rec) bool { got[k] = v; return true })
	if !maps.Equal(got, model) {
		t.Fatalf("Each lists %d keys, the map holds %d", len(got), len(model))
	}
	for _, s := range live {
		if got := viewContents(t, s.v); !maps.Equal(got, s.want) {
			t.Fatalf("at the end, a view holds %d keys, want %d", len(got), len(s.want))
		}
		s.v.Release()
	}
	if tb.views != 0 {
		t.Fatalf("%d views counted after all were released", tb.views)
	}
	longest := 0
	for _, head := range tb.index {
		n := 0
		for i := head; i != 0; i = tb.at(i).next {
			n++
		}
		longest = max(longest, n)
	}
	t.Logf("%d views taken, %d compactions, %d keys at the end, chains of up to %d", taken, compactions, tb.Len(), longest)
	if longest < 3 {
		t.Fatalf("the longest chain holds %d keys: the test does not exercise chains", longest)
	}
	if taken == 0 || compactions == 0 {
		t.Fatal("the test took no view or made no compaction")
	}
}

// TestViewWhileTableChanges: a view is read on another goroutine while the
// table's owner keeps writing (the race detector watches the shared
// chunks), and reads what the table held when it was taken.
func TestViewWhileTableChanges(t *testing.T) {
	tb := New[rec]()
	want := map[string]rec{}
	for i := range 20_000 {
		k := fmt.Sprintf("blob/%08d", i)
		tb.Put(k, rec{Size: uint64(i)})
		want[k] = rec{Size: uint64(i)}
	}
	v := tb.Snapshot()
	var wg sync.WaitGroup
	var got map[string]rec
	wg.Go(func() {
		got = map[string]rec{}
		v.Each(func(k string, r rec) bool { got[k] = r; return true })
	})
	for i := range 20_000 {
		k := fmt.Sprintf("blob/%08d", i)
		switch i % 3 {
		case 0:
			tb.Delete(k)
		case 1:
			tb.Put(k, rec{Size: 1})
		default:
			tb.Put(fmt.Sprintf("new/%08d", i), rec{Refs: 1})
		}
	}
	wg.Wait()
	v.Release()
	if !maps.Equal(got, want) {
		t.Fatalf("the view read %d keys, want the %d of the table when taken", len(got), len(want))
	}
}

func TestNewRefusesPointers(t *testing.T) {
	refused := func(name string, fn func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("New[%s] did not panic", name)
			}
		}()
		fn()
	}
	refused("string", func() { New[string]() })
	refused("*int", func() { New[*int]() })
	refused("struct with a string", func() {
		New[struct {
			A uint64
			S string
		}]()
	})
	refused("array of slices", func() { New[[2][]byte]() })
	refused("interface", func() { New[any]() })
	New[rec]()
	New[struct {
		A [3]uint64
		B [0]*int
	}]()
}

func TestKeyLimits(t *testing.T) {
	tb := New[rec]()
	for _, k := range []string{"", strings.Repeat("k", MaxKey+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Put of a key of %d bytes did not panic", len(k))
				}
			}()
			tb.Put(k, rec{})
		}()
	}
	long := strings.Repeat("k", MaxKey)
	tb.Put("a", rec{Size: 1})
	tb.Put(long, rec{Size: 2})
	if v, ok := tb.Get(long); !ok || v.Size != 2 {
		t.Fatalf("the longest key reads %v, %v", v, ok)
	}
	if v, ok := tb.Get("a"); !ok || v.Size != 1 {
		t.Fatalf("a key before the longest reads %v, %v", v, ok)
	}
}

// TestReadsAllocateNothing: Get, Has and the Put of a present key make no
// allocation.
func TestReadsAllocateNothing(t *testing.T) {
	tb := New[rec]()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("job/task/%06d", i)
		tb.Put(keys[i], rec{})
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		k := keys[i%len(keys)]
		i++
		tb.Get(k)
		tb.Has(k)
		tb.Put(k, rec{Size: uint64(i)})
	}); n != 0 {
		t.Fatalf("%v allocations per Get, Has and Put of a present key", n)
	}
}

// TestFootprint: the heap the table takes per key of a blob's length, and
// that the collector has next to nothing to scan in it.
func TestFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 200,000 keys")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := New[rec]()
	const n = 200_000
	for i := range n {
		tb.Put(fmt.Sprintf("job-%04d/t0/%056x", i%1000, i), rec{Size: uint64(i)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f heap bytes per key of 68 bytes", perKey)
	if perKey > 200 {
		t.Fatalf("%.0f heap bytes per key of 68 bytes (an entry of 40, the key, its place in the index)", perKey)
	}
	runtime.KeepAlive(tb)
}

func BenchmarkGet(b *testing.B) {
	tb := New[rec]()
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%04d/t0/%056x", i%1000, i)
		tb.Put(keys[i], rec{Size: uint64(i)})
	}
	b.ResetTimer()
	for i := range b.N {
		tb.Get(keys[i&(len(keys)-1)])
	}
}
