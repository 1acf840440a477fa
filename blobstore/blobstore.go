package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// NameLister is implemented by stores that list the objects whose keys
// start with any prefix, the start of a name included, at a cost that does
// not grow with the objects outside it (S3: ListObjectsV2's Prefix). The
// collector's observer learns the sizes of a task's new blobs with one
// such request instead of a HEAD each (gc/observe.go): keys from NewKey
// made within seconds of each other share the start of their names.
type NameLister interface {
	ListNames(ctx context.Context, prefix string, fn func(Info) error) error
}

// Sentinel errors, for errors.Is. Errors returned by the stores wrap them
// with the operation and the key.
var (
	// ErrNotFound is returned by Get and Head when the object does not exist.
	ErrNotFound = errors.New("blobstore: object not found")
	// ErrPresignUnsupported is returned by PresignPut of a store that cannot
	// hand out upload URLs (the local directory store).
	ErrPresignUnsupported = errors.New("blobstore: presigned upload URLs are not supported by this store")
	// ErrInvalidKey is a key (or list prefix) that breaks the key rules of
	// ValidateKey, or that resolves outside the store's root.
	ErrInvalidKey = errors.New("blobstore: invalid key")
	// ErrInvalidRange is a Get whose offset is negative or past the end of
	// the object.
	ErrInvalidRange = errors.New("blobstore: invalid range")
	// ErrSizeMismatch is a Put whose body does not hold exactly the declared
	// number of bytes (or a negative size). Nothing is stored.
	ErrSizeMismatch = errors.New("blobstore: body length does not match declared size")
	// ErrBucketNotFound is an S3 bucket that does not exist.
	ErrBucketNotFound = errors.New("blobstore: bucket not found")
	// ErrAccessDenied is an S3 request refused for its credentials (403:
	// a wrong secret, an unknown access key, missing permissions). The
	// error names where the credentials came from, never the secret.
	ErrAccessDenied = errors.New("blobstore: access denied")
)

// MaxKeyLen is the longest key, in bytes, that ValidateKey accepts. It leaves
// room under S3's 1,024-byte limit for the store's prefix.
const MaxKeyLen = 512

// MaxDeleteBatch is the most keys one S3 DeleteObjects request carries.
const MaxDeleteBatch = 1000

// Info describes one stored object.
type Info struct {
	// Key is relative to the store's prefix or root: the key Put was given.
	Key     string
	Size    int64
	ModTime time.Time
	// ETag is the object's entity tag without quotes (S3), or empty (local).
	ETag string
}

// Store is an object store holding checkpoint blobs under one prefix (S3) or
// root directory (local). All keys are relative to it and must pass
// ValidateKey; every method checks its keys before doing anything.
type Store interface {
	// Put stores body under key, replacing any object there. body must hold
	// exactly size bytes, else Put fails with ErrSizeMismatch and the key is
	// left as it was. A reader may see the old or the new object, never a
	// partial one.
	Put(ctx context.Context, key string, body io.Reader, size int64) error
	// Get reads length bytes of key from offset (length < 0: to the end; a
	// range past the end is cut at the end). It returns ErrNotFound if the
	// object is missing and ErrInvalidRange if offset is negative or beyond
	// the object's size (offset == size reads nothing). The caller closes
	// the reader.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Head returns the object's Info, or ErrNotFound.
	Head(ctx context.Context, key string) (Info, error)
	// Delete removes keys (any count; duplicates are fine). Implementations
	// batch: S3 sends at most MaxDeleteBatch keys per DeleteObjects request.
	// Deleting a missing key is success. failed holds the keys that could
	// not be deleted with their errors (partial failure); err is non-nil
	// only when the whole call failed (an invalid key, which deletes
	// nothing, or no batch getting through).
	Delete(ctx context.Context, keys []string) (failed map[string]error, err error)
	// List calls fn with every object under prefix, in ascending byte order
	// of keys, paginating internally. prefix is empty or a valid key followed
	// by "/"; Info.Key is relative to the store (prefix included). An error
	// from fn stops the listing and is returned as is.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// PresignPut returns a URL, and headers to send with it, that a worker
	// can PUT the blob to without credentials, valid for ttl. The local
	// store returns ErrPresignUnsupported (the API then offers its own
	// upload endpoint).
	PresignPut(ctx context.Context, key string, ttl time.Duration) (url string, header http.Header, err error)
	// String names the store for logs and status, e.g. "s3://bucket/prefix"
	// or "file:///dir".
	String() string
}

// Operation names passed to an Observer.
const (
	OpPut     = "put"
	OpGet     = "get"
	OpHead    = "head"
	OpDelete  = "delete"
	OpList    = "list"
	OpPresign = "presign"
	// OpPing is S3.Ping: HEAD of the bucket.
	OpPing = "ping"
)

// Observer, when set in a store's configuration, is called once after every
// store operation with its name (one of the Op constants), the number of
// objects it handled (distinct keys deleted, keys listed, else 1), its error and its
// duration. It must be safe for concurrent use and must not block; it is the
// seam for metrics.
type Observer func(op string, n int, err error, d time.Duration)

func (o Observer) observe(op string, n int, err error, start time.Time) {
	if o != nil {
		o(op, n, err, time.Since(start))
	}
}

// ValidateKey reports whether key may name an object. A key is 1 to
// MaxKeyLen bytes of [A-Za-z0-9._-] in "/"-separated segments, with no
// leading or trailing "/", no empty, "." or ".." segment. The rules keep a key
// inside the store's prefix or root and make it the same file name or S3 key
// on every platform. The error wraps ErrInvalidKey and names the problem.
func ValidateKey(key string) error {
	if problem := keyProblem(key); problem != "" {
		return invalidKey(key, problem)
	}
	return nil
}

// ValidatePrefix reports whether prefix may be given to List: empty, or a
// valid key followed by "/".
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	dir, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		return invalidKey(prefix, `list prefix must be empty or end with "/"`)
	}
	if problem := keyProblem(dir); problem != "" {
		return invalidKey(prefix, "list prefix: "+problem)
	}
	return nil
}

func keyProblem(key string) string {
	switch {
	case key == "":
		return "empty"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("longer than %d bytes", MaxKeyLen)
	case key[0] == '/':
		return `starts with "/"`
	case key[len(key)-1] == '/':
		return `ends with "/"`
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == '-', c == '/':
		case c == '\\':
			return fmt.Sprintf("backslash at byte %d", i)
		default:
			return fmt.Sprintf("character %q at byte %d is outside [A-Za-z0-9._-/]", c, i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return `empty segment ("//")`
		case ".", "..":
			return fmt.Sprintf("%q segment", seg)
		}
	}
	return ""
}

func invalidKey(key, problem string) error {
	const show = 80
	if len(key) > show {
		key = key[:show] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, problem)
}

// validateKeys checks every key before a batch operation touches any.
func validateKeys(keys []string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	return nil
}

// uniqueKeys returns keys without duplicates, in first-seen order.
func uniqueKeys(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, k)
	}
	return out
}

func checkRange(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("%w: negative offset %d", ErrInvalidRange, offset)
	}
	return nil
}

// exactReader passes through exactly n bytes of r and fails with
// ErrSizeMismatch if r holds fewer or more. It withholds the last bytes
// until it has seen that r ends there, so a transport never sends a complete
// body that was in fact too long. The error is also kept in err, for callers
// whose transport hides the reader's error.
type exactReader struct {
	r       io.Reader
	left    int64
	size    int64
	checked bool
	err     error
}

func newExactReader(r io.Reader, size int64) *exactReader {
	return &exactReader{r: r, left: size, size: size}
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left == 0 {
		if !e.checked {
			if err := e.checkEnd(); err != nil {
				return 0, err
			}
		}
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if e.left == 0 {
		if cerr := e.checkEnd(); cerr != nil {
			return 0, cerr
		}
		return n, nil
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		// The body ended early (io.ErrUnexpectedEOF: an HTTP client's
		// upload cut short): the caller's body, not the store, failed.
		e.err = fmt.Errorf("%w: body ended after %d of %d bytes", ErrSizeMismatch, e.size-e.left, e.size)
		return n, e.err
	}
	if err != nil {
		e.err = err
	}
	return n, err
}

// checkEnd reads one byte past the declared size, expecting end of file.
func (e *exactReader) checkEnd() error {
	e.checked = true
	var one [1]byte
	switch _, err := io.ReadFull(e.r, one[:]); err {
	case io.EOF:
		return nil
	case nil:
		e.err = fmt.Errorf("%w: body is longer than %d bytes", ErrSizeMismatch, e.size)
	default:
		e.err = err
	}
	return e.err
}

func checkSize(size int64) error {
	if size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrSizeMismatch, size)
	}
	return nil
}

// readCloser joins a reader with a close function.
type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
