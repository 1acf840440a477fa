package memkv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// model is what a bucket should hold: a map, sorted when asked.
type model map[string]string

func (m model) sorted() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// randKey draws from a small space so that puts overwrite and deletes hit,
// with shared prefixes for prefix scans.
func randKey(r *rand.Rand) []byte {
	return fmt.Appendf(nil, "%c/%03d", 'a'+r.IntN(4), r.IntN(300))
}

// TestAgainstBolt applies the same random operations to a bucket of this
// store and to one of a bbolt file, in the patterns the state machine uses
// (point reads, puts, deletes, prefix scans, prefix deletes by re-seeking,
// a cursor's delete of the key it found), and compares every answer.
func TestAgainstBolt(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "f.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := New()
	name := []byte("b")
	mb, err := s.CreateBucketIfNotExists(name)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		err := db.Update(func(tx *bolt.Tx) error {
			bb, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			for op := range 500 {
				where := fmt.Sprintf("round %d op %d", round, op)
				k := randKey(r)
				switch n := r.IntN(100); {
				case n < 40:
					v := fmt.Appendf(nil, "v%d-%d", round, op)
					if n < 4 {
						v = nil // an empty value
					}
					if err := bb.Put(k, v); err != nil {
						return err
					}
					if err := mb.Put(k, v); err != nil {
						return err
					}
				case n < 55:
					if err := bb.Delete(k); err != nil {
						return err
					}
					if err := mb.Delete(k); err != nil {
						return err
					}
				case n < 75:
					// A point read by seek, as the state machine's get does.
					bk, bv := bb.Cursor().Seek(k)
					mk, mv := mb.Cursor().Seek(k)
					if !bytes.Equal(bk, mk) || !bytes.Equal(bv, mv) {
						return fmt.Errorf("%s: seek %q: bolt %q=%q, memkv %q=%q", where, k, bk, bv, mk, mv)
					}
					if g := mb.Get(k); (g == nil) != (bk == nil || !bytes.Equal(bk, k)) {
						return fmt.Errorf("%s: get %q = %q, seek found %q", where, k, g, bk)
					}
				case n < 90:
					// A prefix scan.
					prefix := k[:1+r.IntN(3)]
					var got, want [][]byte
					bc, mc := bb.Cursor(), mb.Cursor()
					for k, v := bc.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = bc.Next() {
						want = append(want, k, v)
					}
					for k, v := mc.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = mc.Next() {
						got = append(got, k, v)
					}
					if !slices.EqualFunc(got, want, bytes.Equal) {
						return fmt.Errorf("%s: scan %q: got %q, want %q", where, prefix, got, want)
					}
				case n < 93:
					// A prefix delete, re-seeking after each delete.
					prefix := k[:3]
					bc, mc := bb.Cursor(), mb.Cursor()
					for k, _ := bc.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = bc.Seek(prefix) {
						if err := bc.Delete(); err != nil {
							return err
						}
					}
					for k, _ := mc.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = mc.Seek(prefix) {
						if err := mc.Delete(); err != nil {
							return err
						}
					}
				default:
					// A cursor's delete of the key a seek found.
					bc, mc := bb.Cursor(), mb.Cursor()
					if bk, _ := bc.Seek(k); bk != nil && bytes.Equal(bk, k) {
						if err := bc.Delete(); err != nil {
							return err
						}
					}
					if mk, _ := mc.Seek(k); mk != nil && bytes.Equal(mk, k) {
						if err := mc.Delete(); err != nil {
							return err
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Every key and value, after the commit.
		err = db.View(func(tx *bolt.Tx) error {
			var want, got [][]byte
			if err := tx.Bucket(name).ForEach(func(k, v []byte) error {
				want = append(want, k, v)
				return nil
			}); err != nil {
				return err
			}
			if err := mb.ForEach(func(k, v []byte) error {
				got = append(got, k, v)
				return nil
			}); err != nil {
				return err
			}
			if !slices.EqualFunc(got, want, bytes.Equal) {
				return fmt.Errorf("round %d: contents differ:\n got %q\nwant %q", round, got, want)
			}
			// bbolt counts keys from its pages: committed ones only.
			if n := tx.Bucket(name).Stats().KeyN; n != mb.KeyN() {
				return fmt.Errorf("round %d: bolt holds %d keys, memkv %d", round, n, mb.KeyN())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCursorAcrossChanges walks a bucket while deleting and adding keys
// behind and ahead of the cursor: Next goes to the first key after the
// one it was at, as the bucket is now.
func TestCursorAcrossChanges(t *testing.T) {
	s := New()
	b, _ := s.CreateBucketIfNotExists([]byte("b"))
	m := model{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		k := fmt.Sprintf("%05d", i*2)
		m[k] = k
		if err := b.Put([]byte(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Cursor()
	steps := 0
	k, v := c.First()
	for k != nil {
		steps++
		if !bytes.Equal(k, v) || m[string(k)] != string(v) {
			t.Fatalf("at %q read %q; the model says %q", k, v, m[string(k)])
		}
		at := string(k)
		switch r.IntN(4) {
		case 0:
			if err := c.Delete(); err != nil {
				t.Fatal(err)
			}
			delete(m, at)
		case 1:
			// A key just after this one, which Next must land on.
			nk := at + "x"
			m[nk] = nk
			if err := b.Put([]byte(nk), []byte(nk)); err != nil {
				t.Fatal(err)
			}
		case 2:
			// Delete some other key, ahead or behind.
			keys := m.sorted()
			if o := keys[r.IntN(len(keys))]; o != at {
				delete(m, o)
				if err := b.Delete([]byte(o)); err != nil {
					t.Fatal(err)
				}
			}
		}
		// What Next must answer: the model's first key above at.
		keys := m.sorted()
		i, found := slices.BinarySearch(keys, at)
		if found {
			i++
		}
		k, v = c.Next()
		if i == len(keys) {
			if k != nil {
				t.Fatalf("after %q: Next = %q, want the end", at, k)
			}
			break
		}
		if string(k) != keys[i] {
			t.Fatalf("after %q: Next = %q, want %q", at, k, keys[i])
		}
	}
	if steps < 100 {
		t.Fatalf("walked only %d keys", steps)
	}
	if b.KeyN() != len(m) {
		t.Fatalf("KeyN %d, model %d", b.KeyN(), len(m))
	}
}

// TestSnapshotIsolation: a snapshot reads as the store was when it was
// taken, on another goroutine, while the store changes (run with -race),
// and cannot be changed.
func TestSnapshotIsolation(t *testing.T) {
	s := New()
	names := [][]byte{[]byte("one"), []byte("two")}
	models := []model{{}, {}}
	for _, n := range names {
		if _, err := s.CreateBucketIfNotExists(n); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	change := func(n int) {
		for range n {
			i := r.IntN(2)
			k := randKey(r)
			if r.IntN(3) == 0 {
				delete(models[i], string(k))
				if err := s.Bucket(names[i]).Delete(k); err != nil {
					t.Fatal(err)
				}
				continue
			}
			v := fmt.Sprint(r.Uint64())
			models[i][string(k)] = v
			if err := s.Bucket(names[i]).Put(k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 30 {
		change(400)
		snap := s.Snapshot()
		want := []model{maps(models[0]), maps(models[1])}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, n := range names {
				got := model{}
				if err := snap.Bucket(n).ForEach(func(k, v []byte) error {
					got[string(k)] = string(v)
					return nil
				}); err != nil {
					errs <- err
					return
				}
				if len(got) != len(want[i]) || snap.Bucket(n).KeyN() != len(want[i]) {
					errs <- fmt.Errorf("bucket %s: snapshot holds %d keys (KeyN %d), want %d", n, len(got), snap.Bucket(n).KeyN(), len(want[i]))
					return
				}
				for k, v := range want[i] {
					if got[k] != v {
						errs <- fmt.Errorf("bucket %s key %q: snapshot reads %q, want %q", n, k, got[k], v)
						return
					}
				}
			}
			if err := snap.Bucket(names[0]).Put([]byte("k"), nil); !errors.Is(err, ErrReadOnly) {
				errs <- fmt.Errorf("put into a snapshot: %v, want ErrReadOnly", err)
			}
			if err := snap.Bucket(names[0]).Delete([]byte("k")); !errors.Is(err, ErrReadOnly) {
				errs <- fmt.Errorf("delete from a snapshot: %v, want ErrReadOnly", err)
			}
		}()
	}
	change(400)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func maps(m model) model {
	out := make(model, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestValuesAreCopied: the store keeps its own copies of keys and values.
func TestValuesAreCopied(t *testing.T) {
	s := New()
	b, _ := s.CreateBucketIfNotExists([]byte("b"))
	k, v := []byte("key"), []byte("value")
	if err := b.Put(k, v); err != nil {
		t.Fatal(err)
	}
	k[0], v[0] = 'X', 'X'
	if got := b.Get([]byte("key")); string(got) != "value" {
		t.Fatalf("Get after the caller changed its slices = %q", got)
	}
	if err := b.Put([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if got := b.Get([]byte("empty")); got == nil || len(got) != 0 {
		t.Fatalf("an empty value reads %#v, want an empty non-nil slice", got)
	}
	if err := b.Put(nil, v); !errors.Is(err, ErrKeyRequired) {
		t.Fatalf("empty key: %v", err)
	}
	if err := b.Put(make([]byte, MaxKeySize+1), v); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatalf("long key: %v", err)
	}
}
