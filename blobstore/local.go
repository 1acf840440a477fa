package blobstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

const (
	localFileMode = 0o640
	localDirMode  = 0o750
	// tempPrefix starts the name of a file being written. "~" is outside the
	// key alphabet, so no key can name a temporary file and List skips them.
	tempPrefix = "~put-"
	// putAttempts bounds the retries of a Put that lost a race with a Delete
	// removing the (empty) directory it was about to write into.
	putAttempts = 5
)

// Local is a Store that keeps each object as a file under a root directory:
// key "a/b/c" is the file ROOT/a/b/c. It is the embedded default and the
// store for tests that need no S3.
//
// Every file access goes through an os.Root, so no key, not even through a
// symbolic link placed inside the root, reads or writes outside it: such an
// access fails. List reports regular files only; it neither follows nor
// reports symbolic links.
//
// Two keys where one is a directory of the other ("a" and "a/b") cannot both
// exist here, although S3 allows it: the second Put fails.
type Local struct {
	root     string
	observer Observer
}

// LocalOption configures a Local store.
type LocalOption func(*Local)

// WithLocalObserver sets the Observer of a Local store.
func WithLocalObserver(o Observer) LocalOption {
	return func(l *Local) { l.observer = o }
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at dir, creating the directory if needed.
func NewLocal(dir string, opts ...LocalOption) (*Local, error) {
	if dir == "" {
		return nil, errors.New("blobstore: local store needs a directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blobstore: local root %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, localDirMode); err != nil {
		return nil, fmt.Errorf("blobstore: local root: %w", err)
	}
	r, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("blobstore: local root: %w", err)
	}
	if err := r.Close(); err != nil {
		return nil, fmt.Errorf("blobstore: local root: %w", err)
	}
	l := &Local{root: abs}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Root returns the absolute directory the store keeps its objects in.
func (l *Local) Root() string { return l.root }

// String returns the store's file URL, e.g. "file:///var/lib/metastore/blobs".
func (l *Local) String() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(l.root)}).String()
}

// rel maps a valid key to its path relative to the root, and checks, in
// defence of the key rules, that the cleaned absolute path stays inside it.
func (l *Local) rel(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	full := filepath.Join(l.root, filepath.FromSlash(key))
	rel, err := filepath.Rel(l.root, full)
	if err != nil || rel == "." || rel == ".." || filepath.IsAbs(rel) ||
		strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", invalidKey(key, "resolves outside the store root")
	}
	return rel, nil
}

func (l *Local) open() (*os.Root, error) {
	r, err := os.OpenRoot(l.root)
	if err != nil {
		return nil, fmt.Errorf("blobstore: open local root: %w", err)
	}
	return r, nil
}

// missing reports whether err means that no object exists at a path: the
// file is absent, or a parent is a file rather than a directory.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Put writes body to a temporary file next to the key's file, syncs it,
// renames it into place and syncs the directory.
func (l *Local) Put(ctx context.Context, key string, body io.Reader, size int64) (err error) {
	start := time.Now()
	defer func() { l.observer.observe(OpPut, 1, err, start) }()
	rel, err := l.rel(key)
	if err != nil {
		return err
	}
	if err := checkSize(size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := l.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := l.put(ctx, r, rel, body, size); err != nil {
		return fmt.Errorf("blobstore: local put %q: %w", key, err)
	}
	return nil
}

func (l *Local) put(ctx context.Context, r *os.Root, rel string, body io.Reader, size int64) error {
	dir := filepath.Dir(rel)
	var (
		f       *os.File
		tmp     string
		created bool
	)
	for attempt := 1; ; attempt++ {
		var err error
		if dir != "." {
			if _, serr := r.Stat(dir); missing(serr) {
				created = true
			}
			err = r.MkdirAll(dir, localDirMode)
			// MkdirAll may also report "file exists" for a directory that a
			// concurrent Delete pruned between its mkdir and its check.
			if errors.Is(err, fs.ErrExist) && attempt < putAttempts {
				continue
			}
		}
		if err == nil {
			tmp = filepath.Join(dir, tempPrefix+randomHex())
			f, err = r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, localFileMode)
			if err == nil {
				break
			}
		}
		// A concurrent Delete may have pruned a directory, empty, while
		// MkdirAll created its children or before OpenFile: try again.
		if !missing(err) || attempt == putAttempts {
			return err
		}
	}
	if err := writeSync(ctx, f, body, size); err != nil {
		_ = r.Remove(tmp)
		return err
	}
	if err := r.Rename(tmp, rel); err != nil {
		_ = r.Remove(tmp)
		return err
	}
	// Make the rename durable, and the new directories' entries with it.
	for d := dir; ; d = filepath.Dir(d) {
		if err := syncDir(r, d); err != nil {
			return err
		}
		if d == "." || !created {
			return nil
		}
	}
}

func writeSync(ctx context.Context, f *os.File, body io.Reader, size int64) error {
	src := newExactReader(ctxReader{ctx: ctx, r: body}, size)
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func syncDir(r *os.Root, dir string) error {
	d, err := r.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ctxReader fails reads once ctx is done, so a long copy can be cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Get opens the key's file and returns a reader over the requested range.
func (l *Local) Get(ctx context.Context, key string, offset, length int64) (rc io.ReadCloser, err error) {
	start := time.Now()
	defer func() { l.observer.observe(OpGet, 1, err, start) }()
	rel, err := l.rel(key)
	if err != nil {
		return nil, err
	}
	if err := checkRange(offset); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := l.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Stat before opening: opening a FIFO for reading would block.
	if _, err := l.statFile(r, key, rel); err != nil {
		return nil, err
	}
	f, err := r.Open(rel)
	if missing(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("blobstore: local get %q: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("blobstore: local get %q: %w", key, err)
	}
	if offset > st.Size() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: offset %d is past the end of %s (%d bytes)", ErrInvalidRange, offset, key, st.Size())
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("blobstore: local get %q: %w", key, err)
	}
	var src io.Reader = f
	if length >= 0 {
		src = io.LimitReader(f, length)
	}
	return readCloser{Reader: src, close: f.Close}, nil
}

// statFile stats the key's file, following symbolic links inside the root;
// anything but a regular file is not an object.
func (l *Local) statFile(r *os.Root, key, rel string) (fs.FileInfo, error) {
	st, err := r.Stat(rel)
	if missing(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("blobstore: local %q: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s (not a regular file)", ErrNotFound, key)
	}
	return st, nil
}

// Head stats the key's file.
func (l *Local) Head(ctx context.Context, key string) (info Info, err error) {
	start := time.Now()
	defer func() { l.observer.observe(OpHead, 1, err, start) }()
	rel, err := l.rel(key)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	r, err := l.open()
	if err != nil {
		return Info{}, err
	}
	defer r.Close()
	st, err := l.statFile(r, key, rel)
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// Delete removes the keys' files, then each directory left empty, up to the
// root. A key naming a directory, not a file, is not an object and is left
// alone.
func (l *Local) Delete(ctx context.Context, keys []string) (failed map[string]error, err error) {
	start := time.Now()
	deleted := 0
	defer func() { l.observer.observe(OpDelete, deleted, err, start) }()
	rels := make(map[string]string, len(keys))
	for _, k := range keys {
		rel, err := l.rel(k)
		if err != nil {
			return nil, err
		}
		rels[k] = rel
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := l.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	unique := uniqueKeys(keys)
	defer func() { deleted = len(unique) - len(failed) }()
	for _, k := range unique {
		if err := ctx.Err(); err != nil {
			if failed == nil {
				failed = make(map[string]error)
			}
			failed[k] = err
			continue
		}
		if err := l.remove(r, rels[k]); err != nil {
			if failed == nil {
				failed = make(map[string]error)
			}
			failed[k] = fmt.Errorf("blobstore: local delete %q: %w", k, err)
		}
	}
	return failed, nil
}

func (l *Local) remove(r *os.Root, rel string) error {
	st, err := r.Lstat(rel)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return nil
	}
	if err := r.Remove(rel); err != nil && !missing(err) {
		return err
	}
	// Prune directories the removal left empty; the first that is not
	// empty (or is gone, or is not a real directory) ends it.
	for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
		st, err := r.Lstat(d)
		if err != nil || !st.IsDir() {
			return nil
		}
		if r.Remove(d) != nil {
			return nil
		}
	}
	return nil
}

// List walks the directory of prefix depth first, visiting each directory's
// entries in the order that makes keys come out in ascending byte order.
func (l *Local) List(ctx context.Context, prefix string, fn func(Info) error) (err error) {
	start := time.Now()
	n := 0
	defer func() { l.observer.observe(OpList, n, err, start) }()
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	dir := strings.TrimSuffix(prefix, "/")
	if dir != "" {
		if _, err := l.rel(dir); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := l.open()
	if err != nil {
		return err
	}
	defer r.Close()
	return l.walk(ctx, r, dir, func(info Info) error {
		n++
		return fn(info)
	})
}

type dirEntry struct {
	name    string
	sortKey string
	isDir   bool
	entry   fs.DirEntry
}

// walk lists dir ("" for the root). Among siblings, a directory sorts as its
// name followed by "/", which is where all its keys sort.
func (l *Local) walk(ctx context.Context, r *os.Root, dir string, fn func(Info) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := "."
	if dir != "" {
		name = filepath.FromSlash(dir)
	}
	st, err := r.Lstat(name)
	if missing(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blobstore: local list %q: %w", dir, err)
	}
	if !st.IsDir() {
		return nil
	}
	f, err := r.Open(name)
	if missing(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blobstore: local list %q: %w", dir, err)
	}
	entries, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil && !missing(err) {
		return fmt.Errorf("blobstore: local list %q: %w", dir, err)
	}
	list := make([]dirEntry, 0, len(entries))
	for _, e := range entries {
		key := path.Join(dir, e.Name())
		if ValidateKey(key) != nil {
			continue // a temporary file, or nothing Put could have written
		}
		switch t := e.Type(); {
		case t.IsDir():
			list = append(list, dirEntry{name: e.Name(), sortKey: e.Name() + "/", isDir: true})
		case t.IsRegular():
			list = append(list, dirEntry{name: e.Name(), sortKey: e.Name(), entry: e})
		}
	}
	slices.SortFunc(list, func(a, b dirEntry) int { return cmp.Compare(a.sortKey, b.sortKey) })
	for _, e := range list {
		key := path.Join(dir, e.name)
		if e.isDir {
			if err := l.walk(ctx, r, key, fn); err != nil {
				return err
			}
			continue
		}
		fi, err := e.entry.Info()
		if missing(err) {
			continue // deleted while we listed
		}
		if err != nil {
			return fmt.Errorf("blobstore: local list %q: %w", key, err)
		}
		if err := fn(Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// PresignPut returns ErrPresignUnsupported: a directory has no URLs.
func (l *Local) PresignPut(ctx context.Context, key string, ttl time.Duration) (string, http.Header, error) {
	start := time.Now()
	err := ValidateKey(key)
	if err == nil {
		err = ErrPresignUnsupported
	}
	l.observer.observe(OpPresign, 1, err, start)
	return "", nil, err
}
