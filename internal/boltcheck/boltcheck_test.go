package boltcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func makeDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		nested, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		for i := range 2000 {
			if err := nested.Put(fmt.Appendf(nil, "k%05d", i), make([]byte, 100+i%300)); err != nil {
				return err
			}
		}
		return b.Put([]byte("big"), make([]byte, 64<<10))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	if err := Check(filepath.Join(t.TempDir(), "missing.db"), nil); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	good := makeDB(t)
	var buckets []string
	if err := Check(good, func(name []byte, _ *bolt.Bucket) error { buckets = append(buckets, string(name)); return nil }); err != nil {
		t.Fatalf("good file: %v", err)
	}
	if len(buckets) != 1 || buckets[0] != "b" {
		t.Fatalf("verify saw buckets %v", buckets)
	}
	if err := Check(good, func([]byte, *bolt.Bucket) error { return errors.New("no") }); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `bucket "b": no`) {
		t.Fatalf("verify error: %v", err)
	}

	for name, damage := range map[string]func(path string) error{
		"empty":     func(p string) error { return os.Truncate(p, 0) },
		"truncated": func(p string) error { return os.Truncate(p, 3*4096) },
		"garbage pages": func(p string) error {
			info, err := os.Stat(p)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			junk := make([]byte, info.Size()-2*4096)
			for i := range junk {
				junk[i] = byte(i*7 + 13)
			}
			_, err = f.WriteAt(junk, 2*4096)
			return err
		},
		"both meta pages": func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(make([]byte, 2*4096), 0)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := makeDB(t)
			if err := damage(path); err != nil {
				t.Fatal(err)
			}
			err := Check(path, nil)
			var e *Error
			if !errors.As(err, &e) || e.Path != path || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Check = %v, want an *Error for %s", err, path)
			}
			t.Log(err)
		})
	}
}
