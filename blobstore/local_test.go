package blobstore_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

func newLocal(t *testing.T) (*blobstore.Local, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	s, err := blobstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	return s, root
}

// The local store never reads or writes outside its root, even through a
// symbolic link that someone placed inside it: every such access fails.
func TestLocalSymlinkCannotEscapeRoot(t *testing.T) {
	ctx := context.Background()
	s, root := newLocal(t)
	outside := filepath.Join(filepath.Dir(root), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("do not touch"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "evilfile")); err != nil {
		t.Fatal(err)
	}

	if err := s.Put(ctx, "evil/planted", strings.NewReader("x"), 1); err == nil {
		t.Error("Put through a directory symlink to outside succeeded")
	}
	if err := s.Put(ctx, "evil/sub/planted", strings.NewReader("x"), 1); err == nil {
		t.Error("Put below a directory symlink to outside succeeded")
	}
	if rc, err := s.Get(ctx, "evil/secret", 0, -1); err == nil {
		b, _ := io.ReadAll(rc)
		_ = rc.Close()
		t.Errorf("Get through a symlink read %q from outside the root", b)
	}
	if rc, err := s.Get(ctx, "evilfile", 0, -1); err == nil {
		b, _ := io.ReadAll(rc)
		_ = rc.Close()
		t.Errorf("Get of a file symlink read %q from outside the root", b)
	}
	if _, err := s.Head(ctx, "evil/secret"); err == nil {
		t.Error("Head through a symlink succeeded")
	}
	failed, err := s.Delete(ctx, []string{"evil/secret"})
	if err == nil && failed["evil/secret"] == nil {
		t.Error("Delete through a symlink reported success")
	}
	if got := listKeys(t, s, ""); len(got) != 0 {
		t.Errorf("List follows symlinks: %q", got)
	}
	if got := listKeys(t, s, "evil/"); len(got) != 0 {
		t.Errorf("List(evil/) follows the symlink: %q", got)
	}

	// Put onto a file symlink replaces the link inside the root; Delete
	// removes the link. The target is never written.
	put(t, s, "evilfile", "replaced")
	if got := get(t, s, "evilfile", 0, -1); got != "replaced" {
		t.Errorf("got %q", got)
	}
	if failed, err := s.Delete(ctx, []string{"evilfile"}); err != nil || len(failed) != 0 {
		t.Errorf("Delete(evilfile) = %v, %v", failed, err)
	}

	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret" {
		t.Errorf("outside the root now holds %v", entries)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "do not touch" {
		t.Errorf("outside file changed: %q, %v", b, err)
	}
}

func TestLocalDeletePrunesEmptyDirectories(t *testing.T) {
	ctx := context.Background()
	s, root := newLocal(t)
	put(t, s, "x/y/z/f", "1")
	put(t, s, "x/y/a", "2")
	put(t, s, "x/b", "3")

	if failed, err := s.Delete(ctx, []string{"x/y/z/f"}); err != nil || failed != nil {
		t.Fatal(failed, err)
	}
	if _, err := os.Stat(filepath.Join(root, "x/y/z")); !os.IsNotExist(err) {
		t.Errorf("x/y/z still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "x/y/a")); err != nil {
		t.Errorf("sibling gone: %v", err)
	}
	if failed, err := s.Delete(ctx, []string{"x/y/a", "x/b"}); err != nil || failed != nil {
		t.Fatal(failed, err)
	}
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) != 0 {
		t.Fatalf("root not empty after deleting everything: %v %v", entries, err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the root itself was removed: %v", err)
	}
}

func TestLocalDirectoryIsNotAnObject(t *testing.T) {
	ctx := context.Background()
	s, _ := newLocal(t)
	put(t, s, "d/inner", "x")
	if failed, err := s.Delete(ctx, []string{"d"}); err != nil || failed != nil {
		t.Fatalf("Delete(dir) = %v, %v", failed, err)
	}
	if got := get(t, s, "d/inner", 0, -1); got != "x" {
		t.Fatalf("Delete of a directory key removed its content: %q", got)
	}
	// A key cannot be both a file and a directory here.
	if err := s.Put(ctx, "d", strings.NewReader("y"), 1); err == nil {
		t.Error("Put over a directory succeeded")
	}
	if err := s.Put(ctx, "d/inner/deeper", strings.NewReader("y"), 1); err == nil {
		t.Error("Put below a file succeeded")
	}
}

func TestLocalLeavesNoTemporaryFiles(t *testing.T) {
	ctx := context.Background()
	s, root := newLocal(t)
	put(t, s, "a/ok", "fine")
	_ = s.Put(ctx, "a/short", strings.NewReader("abc"), 10)
	_ = s.Put(ctx, "a/long", strings.NewReader("abcdef"), 2)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = s.Put(cctx, "a/cancelled", strings.NewReader("abc"), 3)
	var names []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a/ok"}) {
		t.Fatalf("files under root: %q", names)
	}
}

// Puts and Deletes racing on one directory: a Put never fails because a
// Delete removed the directory it was writing into.
func TestLocalPutDeleteRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newLocal(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				key := "race/dir/k" + string(rune('a'+w)) + string(rune('a'+i%26))
				if err := s.Put(ctx, key, strings.NewReader("v"), 1); err != nil {
					t.Errorf("Put(%s): %v", key, err)
					return
				}
				if failed, err := s.Delete(ctx, []string{key}); err != nil || failed != nil {
					t.Errorf("Delete(%s): %v %v", key, failed, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestLocalObserver(t *testing.T) {
	type call struct {
		op  string
		n   int
		err bool
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	obs := func(op string, n int, err error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if d < 0 {
			t.Errorf("negative duration")
		}
		calls = append(calls, call{op, n, err != nil})
	}
	s, err := blobstore.NewLocal(t.TempDir(), blobstore.WithLocalObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put(t, s, "k", "v")
	_, _ = s.Head(ctx, "nope")
	_ = s.List(ctx, "", func(blobstore.Info) error { return nil })
	_, _ = s.Delete(ctx, []string{"k", "j"})
	_, _, _ = s.PresignPut(ctx, "k", time.Minute)
	want := []call{{"put", 1, false}, {"head", 1, true}, {"list", 1, false}, {"delete", 2, false}, {"presign", 1, true}}
	if !slices.Equal(calls, want) {
		t.Fatalf("observed %v, want %v", calls, want)
	}
}

func TestNewLocal(t *testing.T) {
	if _, err := blobstore.NewLocal(""); err == nil {
		t.Error("NewLocal(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := blobstore.NewLocal(file); err == nil {
		t.Error("NewLocal(a file) succeeded")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := blobstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "file://"+dir || s.Root() != dir {
		t.Errorf("String() = %q, Root() = %q", s.String(), s.Root())
	}
	if _, err := s.Head(context.Background(), "x"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Head on an empty store: %v", err)
	}
}
