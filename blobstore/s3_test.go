package blobstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// TestS3AgainstServerProcess groups the S3-only behaviour, sharing one
// server process.
func TestS3AgainstServerProcess(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()

	t.Run("PrefixIsolation", func(t *testing.T) {
		a := blobtest.NewS3Store(t, endpoint, testBucket, "iso/a")
		b := blobtest.NewS3Store(t, endpoint, testBucket, "iso/b/")
		whole := blobtest.NewS3Store(t, endpoint, testBucket, "")
		put(t, a, "k", "from a")
		put(t, b, "k", "from b")
		if got := get(t, a, "k", 0, -1); got != "from a" {
			t.Errorf("a sees %q", got)
		}
		if got := listKeys(t, b, ""); !slices.Equal(got, []string{"k"}) {
			t.Errorf("b lists %q", got)
		}
		if got := listKeys(t, whole, "iso/"); !slices.Equal(got, []string{"iso/a/k", "iso/b/k"}) {
			t.Errorf("the bucket holds %q", got)
		}
		if failed, err := a.Delete(ctx, []string{"k"}); err != nil || failed != nil {
			t.Fatal(failed, err)
		}
		if got := get(t, b, "k", 0, -1); got != "from b" {
			t.Errorf("deleting a/k touched b/k: %q", got)
		}
	})

	t.Run("ListSkipsForeignKeys", func(t *testing.T) {
		s := blobtest.NewS3Store(t, endpoint, testBucket, "foreign")
		for _, raw := range []string{"foreign/", "foreign/with space", "foreign/dir/", "foreign/ü"} {
			if _, err := s.Client().PutObject(ctx, &s3.PutObjectInput{
				Bucket: aws.String(testBucket), Key: aws.String(raw), Body: strings.NewReader("x"),
			}); err != nil {
				t.Fatalf("raw put %q: %v", raw, err)
			}
		}
		put(t, s, "fine", "y")
		if got := listKeys(t, s, ""); !slices.Equal(got, []string{"fine"}) {
			t.Fatalf("List = %q, want only the valid key", got)
		}
	})

	t.Run("MissingBucket", func(t *testing.T) {
		s := blobtest.NewS3Store(t, endpoint, "no-such-bucket", "")
		if err := s.Ping(ctx); !errors.Is(err, blobstore.ErrBucketNotFound) {
			t.Errorf("Ping: %v, want ErrBucketNotFound", err)
		}
		if err := s.Put(ctx, "k", strings.NewReader("x"), 1); !errors.Is(err, blobstore.ErrBucketNotFound) {
			t.Errorf("Put: %v, want ErrBucketNotFound", err)
		}
		if err := s.List(ctx, "", func(blobstore.Info) error { return nil }); !errors.Is(err, blobstore.ErrBucketNotFound) {
			t.Errorf("List: %v, want ErrBucketNotFound", err)
		}
		if _, err := s.Delete(ctx, []string{"k"}); !errors.Is(err, blobstore.ErrBucketNotFound) {
			t.Errorf("Delete: %v, want ErrBucketNotFound", err)
		}
		good := blobtest.NewS3Store(t, endpoint, testBucket, "")
		if err := good.Ping(ctx); err != nil {
			t.Errorf("Ping of the real bucket: %v", err)
		}
	})

	t.Run("WrongCredentialsRefused", func(t *testing.T) {
		cfg := blobtest.Config(endpoint, testBucket, "creds")
		cfg.SecretAccessKey = "not-the-secret"
		s, err := blobstore.NewS3(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Put(ctx, "k", strings.NewReader("x"), 1)
		if err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
			t.Fatalf("Put with a wrong secret: %v, want SignatureDoesNotMatch", err)
		}
		cfg = blobtest.Config(endpoint, testBucket, "creds")
		cfg.AccessKeyID = "stranger"
		s, err = blobstore.NewS3(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Head(ctx, "k"); err == nil || errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("Head with an unknown key id: %v, want an access error", err)
		}
	})

	t.Run("PresignedURLIsBound", func(t *testing.T) {
		s := blobtest.NewS3Store(t, endpoint, testBucket, "presign")
		u, header, err := s.PresignPut(ctx, "target", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		// Another key with the same signature, no signature at all, and a
		// longer validity than signed are all refused.
		other := *parsed
		other.Path = strings.Replace(other.Path, "target", "elsewhere", 1)
		unsigned := *parsed
		unsigned.RawQuery = ""
		longer := *parsed
		q := longer.Query()
		q.Set("X-Amz-Expires", "600")
		longer.RawQuery = q.Encode()
		for name, bad := range map[string]string{"other key": other.String(), "unsigned": unsigned.String(), "longer ttl": longer.String()} {
			if code := httpPutHeader(t, bad, header, "evil"); code != http.StatusForbidden {
				t.Errorf("%s: PUT answered %d, want 403", name, code)
			}
		}
		// The condition is signed: without If-None-Match the URL is refused.
		if header.Get("If-None-Match") != "*" {
			t.Fatalf("presigned PUT headers %v carry no If-None-Match: *", header)
		}
		if code := httpPut(t, u, "no condition"); code != http.StatusForbidden {
			t.Errorf("PUT without the signed If-None-Match answered %d, want 403", code)
		}
		if code := httpPutHeader(t, u, header, "good"); code != http.StatusOK {
			t.Fatalf("presigned PUT answered %d", code)
		}
		if got := listKeys(t, s, ""); !slices.Equal(got, []string{"target"}) {
			t.Fatalf("objects: %q", got)
		}
	})

	// Issue 13, item 4: a presigned upload URL writes its blob once. A
	// replay within its validity, after the object exists, is refused and
	// leaves the object as it was.
	t.Run("PresignedURLWritesOnce", func(t *testing.T) {
		s := blobtest.NewS3Store(t, endpoint, testBucket, "once")
		u, header, err := s.PresignPut(ctx, "blob", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code := httpPutHeader(t, u, header, "committed state"); code != http.StatusOK {
			t.Fatalf("first PUT answered %d", code)
		}
		if code := httpPutHeader(t, u, header, "rewritten!"); code != http.StatusPreconditionFailed {
			t.Fatalf("replayed PUT answered %d, want 412", code)
		}
		rc, err := s.Get(ctx, "blob", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "committed state" {
			t.Fatalf("object after the replay: %q", got)
		}
	})

	t.Run("Observer", func(t *testing.T) {
		var (
			mu  sync.Mutex
			ops []string
		)
		cfg := blobtest.Config(endpoint, testBucket, "observed")
		cfg.Observer = func(op string, n int, err error, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, op)
		}
		s, err := blobstore.NewS3(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		put(t, s, "k", "v")
		_ = get(t, s, "k", 0, -1)
		_, _ = s.Delete(ctx, []string{"k"})
		if want := []string{"put", "get", "delete"}; !slices.Equal(ops, want) {
			t.Fatalf("observed %q, want %q", ops, want)
		}
	})

	// The observer (metastore_blobstore_objects_total{op="delete"}) is told
	// how many distinct keys a Delete removed, over several DeleteObjects
	// batches: 3 objects and 1,200 keys that do not exist (a delete of a
	// missing key succeeds), each given twice.
	t.Run("ObserverCountsDeletedKeys", func(t *testing.T) {
		var (
			mu      sync.Mutex
			deleted []int
		)
		cfg := blobtest.Config(endpoint, testBucket, "counted")
		cfg.Observer = func(op string, n int, err error, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if op == blobstore.OpDelete {
				deleted = append(deleted, n)
			}
		}
		s, err := blobstore.NewS3(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for i := range 3 {
			k := fmt.Sprintf("real-%d", i)
			put(t, s, k, "v")
			keys = append(keys, k)
		}
		for i := range 1200 {
			keys = append(keys, fmt.Sprintf("absent-%04d", i))
		}
		keys = append(keys, keys...)
		if failed, err := s.Delete(ctx, keys); err != nil || failed != nil {
			t.Fatal(failed, err)
		}
		if got := listKeys(t, s, ""); len(got) != 0 {
			t.Fatalf("left %q", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(deleted, []int{1203}) {
			t.Fatalf("delete observed with counts %v, want [1203]", deleted)
		}
	})
}

func httpPut(t *testing.T, u, body string) int {
	t.Helper()
	return httpPutHeader(t, u, nil, body)
}

func httpPutHeader(t *testing.T, u string, header http.Header, body string) int {
	t.Helper()
	return do(t, http.MethodPut, u, header, body)
}

// A store whose server is down, or never answers, fails within a bounded
// time instead of hanging.
func TestS3UnreachableServerFailsFast(t *testing.T) {
	// A port nothing listens on: connections are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	_ = ln.Close()

	// A listener that never accepts: connections complete in the kernel's
	// backlog, requests are never answered.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	const timeout = 500 * time.Millisecond
	const bound = 10 * time.Second
	for name, endpoint := range map[string]string{"refused": refused, "silent": "http://" + silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			cfg := blobtest.Config(endpoint, testBucket, "down")
			cfg.MaxAttempts = 2
			cfg.Timeout = timeout
			s, err := blobstore.NewS3(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ops := map[string]func() error{
				"put": func() error { return s.Put(ctx, "k", strings.NewReader("x"), 1) },
				"get": func() error {
					rc, err := s.Get(ctx, "k", 0, -1)
					if err == nil {
						_ = rc.Close()
					}
					return err
				},
				"head":   func() error { _, err := s.Head(ctx, "k"); return err },
				"list":   func() error { return s.List(ctx, "", func(blobstore.Info) error { return nil }) },
				"delete": func() error { _, err := s.Delete(ctx, []string{"k"}); return err },
				"ping":   func() error { return s.Ping(ctx) },
			}
			for op, call := range ops {
				start := time.Now()
				err := call()
				took := time.Since(start)
				if err == nil {
					t.Errorf("%s succeeded against a dead server", op)
				}
				if errors.Is(err, blobstore.ErrNotFound) {
					t.Errorf("%s: %v must not look like a missing object", op, err)
				}
				if took > bound {
					t.Errorf("%s took %s, want under %s", op, took, bound)
				}
			}
		})
	}
}

// TestS3FrozenServerFailsWithinAttemptTimeout: a server that accepts and
// never answers (the S3 server process stopped with SIGSTOP, on loopback)
// fails each store call within the configured attempt timeouts, although
// the whole-call bound is 30s: the SDK's HTTP client gives up on each
// attempt, and its retryer stops after MaxAttempts.
func TestS3FrozenServerFailsWithinAttemptTimeout(t *testing.T) {
	srv := blobtest.StartS3ServerProcess(t, "--bucket", testBucket)
	cfg := blobtest.Config(srv.Endpoint, testBucket, "frozen")
	cfg.Timeout = 30 * time.Second
	cfg.AttemptTimeout = 300 * time.Millisecond
	cfg.MaxAttempts = 2
	s, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put(t, s, "k", "before the freeze") // a pooled connection exists too
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Thaw() }()

	// Two attempts of 300ms and the retryer's backoff between them (under
	// 2s for the first retry): well under the 30s call bound.
	const bound = 10 * time.Second
	ops := map[string]func() error{
		"get": func() error {
			rc, err := s.Get(ctx, "k", 0, -1)
			if err == nil {
				_ = rc.Close()
			}
			return err
		},
		"head":   func() error { _, err := s.Head(ctx, "k"); return err },
		"list":   func() error { return s.List(ctx, "", func(blobstore.Info) error { return nil }) },
		"delete": func() error { _, err := s.Delete(ctx, []string{"other"}); return err },
		"put":    func() error { return s.Put(ctx, "other", strings.NewReader("x"), 1) },
		"ping":   func() error { return s.Ping(ctx) },
	}
	for _, op := range []string{"get", "head", "list", "delete", "put", "ping"} {
		start := time.Now()
		err := ops[op]()
		took := time.Since(start)
		if err == nil || errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("%s against a frozen server: %v", op, err)
		}
		if took > bound {
			t.Fatalf("%s took %s against a frozen server, want under %s", op, took, bound)
		}
		if !strings.Contains(err.Error(), "timeout awaiting response headers") {
			t.Errorf("%s: %v, want the attempt timeout", op, err)
		}
	}

	// Thawed, the same store works again (the requests the kernel
	// buffered meanwhile may be served late: they touched only "other").
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "k", 0, -1); got != "before the freeze" {
		t.Fatalf("after the thaw: %q", got)
	}
}

// TestS3WrongSecretIsAccessDenied: a wrong secret is refused by the S3
// server (403), and the store says access denied, naming the credentials'
// source and access key id, never the secret.
func TestS3WrongSecretIsAccessDenied(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	cfg := blobtest.Config(endpoint, testBucket, "denied")
	cfg.SecretAccessKey = "not-the-secret-0123"
	s, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, headErr := s.Head(ctx, "k")
	for name, err := range map[string]error{"ping": s.Ping(ctx), "head": headErr} {
		if !errors.Is(err, blobstore.ErrAccessDenied) || errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("%s with a wrong secret: %v, want ErrAccessDenied", name, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "with credentials from static settings of the store, access key id "+blobtest.AccessKeyID) || strings.Contains(msg, cfg.SecretAccessKey) {
			t.Errorf("%s: %q does not name the credentials' source (or shows the secret)", name, msg)
		}
	}
	if err := blobtest.NewS3Store(t, endpoint, testBucket, "denied").Ping(ctx); err != nil {
		t.Fatalf("the right secret: %v", err)
	}
}
