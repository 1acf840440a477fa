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

// filesUnder lists the regular files below root, relative, with "/".
func filesUnder(t *testing.T, root string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A Put whose final rename fails (the key is a directory here) leaves no
// temporary file behind.
func TestLocalFailedRenameLeavesNoTemporaryFile(t *testing.T) {
	ctx := context.Background()
	s, root := newLocal(t)
	put(t, s, "d/inner", "x")
	if err := s.Put(ctx, "d", strings.NewReader("over a directory"), 16); err == nil {
		t.Fatal("Put over a directory succeeded")
	}
	if got := filesUnder(t, root); !slices.Equal(got, []string{"d/inner"}) {
		t.Fatalf("files under the root after the failed Put: %q", got)
	}
}

// Files in the root that no Put could have written (a name outside the key
// alphabet, a temporary file a crash left, anything below a directory with
// such a name) are not listed.
func TestLocalListSkipsForeignNames(t *testing.T) {
	s, root := newLocal(t)
	put(t, s, "a/ok", "fine")
	for _, name := range []string{"bad name", "a/~put-0123456789abcdef", "a/ü", "bad dir/x", "a/bad dir/y"} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("foreign"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"a/ok"}) {
		t.Fatalf("List = %q, want only the key Put wrote", got)
	}
	if got := listKeys(t, s, "a/"); !slices.Equal(got, []string{"a/ok"}) {
		t.Fatalf("List(a/) = %q, want only the key Put wrote", got)
	}
}

// Symbolic links inside the root: Get and Head follow a link to a file
// inside the root; List neither reports nor follows links, not even as a
// listing's prefix; a Delete through a directory link removes the file and
// leaves the link.
func TestLocalSymlinksInsideRoot(t *testing.T) {
	ctx := context.Background()
	s, root := newLocal(t)
	put(t, s, "real/f", "inside")
	if err := os.Symlink("real", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("real", "f"), filepath.Join(root, "flink")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "flink", 0, -1); got != "inside" {
		t.Fatalf("Get(flink) = %q", got)
	}
	if info, err := s.Head(ctx, "flink"); err != nil || info.Size != int64(len("inside")) {
		t.Fatalf("Head(flink) = %+v, %v", info, err)
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"real/f"}) {
		t.Fatalf("List = %q, want only real/f", got)
	}
	if got := listKeys(t, s, "link/"); len(got) != 0 {
		t.Fatalf("List(link/) = %q, want nothing: links are not followed", got)
	}
	if failed, err := s.Delete(ctx, []string{"link/f"}); err != nil || failed != nil {
		t.Fatalf("Delete(link/f) = %v, %v", failed, err)
	}
	if st, err := os.Lstat(filepath.Join(root, "link")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link itself after Delete(link/f): %v, %v; want it left alone", st, err)
	}
	if _, err := s.Head(ctx, "real/f"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Head(real/f) after Delete(link/f): %v", err)
	}
}

// The observer is told how many distinct keys a Delete removed.
func TestLocalObserverCountsDistinctKeys(t *testing.T) {
	var (
		mu sync.Mutex
		n  []int
	)
	s, err := blobstore.NewLocal(t.TempDir(), blobstore.WithLocalObserver(func(op string, k int, err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if op == blobstore.OpDelete {
			n = append(n, k)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v")
	if failed, err := s.Delete(context.Background(), []string{"k", "k", "j", "k"}); err != nil || failed != nil {
		t.Fatal(failed, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(n, []int{2}) {
		t.Fatalf("delete observed with counts %v, want [2]", n)
	}
}

// gateReader tells started when it is first read, then waits for release
// before it reads on.
type gateReader struct {
	r       io.Reader
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (g *gateReader) Read(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.release
	})
	return g.r.Read(p)
}

// While a Put is writing its temporary file, neither List nor Head nor Get
// shows anything of it: the object appears whole when the Put returns.
func TestLocalPutInProgressIsInvisible(t *testing.T) {
	ctx := context.Background()
	s, _ := newLocal(t)
	put(t, s, "a/other", "o")
	g := &gateReader{r: strings.NewReader("data"), started: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(g.release) })
	defer release() // if the test fails before the Put is let go
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "a/k", g, 4) }()
	<-g.started
	got := listKeys(t, s, "")
	_, herr := s.Head(ctx, "a/k")
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a/other"}) {
		t.Fatalf("List during the Put = %q, want only a/other", got)
	}
	if !errors.Is(herr, blobstore.ErrNotFound) {
		t.Fatalf("Head(a/k) during the Put: %v, want ErrNotFound", herr)
	}
	if got := get(t, s, "a/k", 0, -1); got != "data" {
		t.Fatalf("a/k after the Put: %q", got)
	}
}

// A Put whose caller gives up while the body is being copied fails with
// the context's error and leaves nothing: no object, no temporary file.
func TestLocalPutCancelledWhileCopying(t *testing.T) {
	s, root := newLocal(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := &gateReader{r: strings.NewReader("data"), started: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(g.release) })
	defer release()
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "a/k", g, 4) }()
	<-g.started
	cancel()
	release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled while copying: %v, want context.Canceled", err)
	}
	if _, err := s.Head(context.Background(), "a/k"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Head(a/k) after the cancelled Put: %v, want ErrNotFound", err)
	}
	if got := filesUnder(t, root); len(got) != 0 {
		t.Fatalf("files under the root after the cancelled Put: %q", got)
	}
}
