package blobstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

const testBucket = "blobs"

// implementation is one Store under test: fresh returns an empty store.
type implementation struct {
	name  string
	fresh func(t *testing.T) blobstore.Store
	// bulk is the key count of the pagination and batch-delete test: over
	// 2,000 for S3, so ListObjectsV2 returns several pages and Delete sends
	// several DeleteObjects requests (the server refuses more than 1,000
	// keys in one).
	bulk    int
	presign bool
}

func implementations(t *testing.T) []implementation {
	endpoint := blobtest.StartS3Server(t, testBucket)
	// The same server keeping its objects on disk (bbolt) instead of memory.
	boltEndpoint := blobtest.StartS3ServerProcess(t, "--bucket", testBucket, "--dir", t.TempDir()).Endpoint
	var n atomic.Int64
	return []implementation{
		{
			name: "local",
			fresh: func(t *testing.T) blobstore.Store {
				s, err := blobstore.NewLocal(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			bulk: 150,
		},
		{
			name: "s3",
			fresh: func(t *testing.T) blobstore.Store {
				// Each test gets its own prefix in the shared bucket.
				return blobtest.NewS3Store(t, endpoint, testBucket, fmt.Sprintf("conformance/t%03d", n.Add(1)))
			},
			bulk:    2500,
			presign: true,
		},
		{
			name: "s3-bolt",
			fresh: func(t *testing.T) blobstore.Store {
				return blobtest.NewS3Store(t, boltEndpoint, testBucket, fmt.Sprintf("conformance/t%03d", n.Add(1)))
			},
			bulk:    2500,
			presign: true,
		},
	}
}

// TestConformance runs the same contract against every Store.
func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, im implementation, s blobstore.Store)
	}{
		{"PutGetOverwrite", testPutGetOverwrite},
		{"EmptyObject", testEmptyObject},
		{"RangeGet", testRangeGet},
		{"Head", testHead},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"DeleteMissingKeys", testDeleteMissing},
		{"ListOrderAndPrefix", testListOrderAndPrefix},
		{"ListStopsOnCallbackError", testListCallbackError},
		{"BulkListAndBatchDelete", testBulk},
		{"SizeMismatch", testSizeMismatch},
		{"UnseekableBody", testUnseekableBody},
		{"SeekableBodyFromItsOffset", testSeekableBodyFromItsOffset},
		{"InvalidKeysRejectedEverywhere", testInvalidKeys},
		{"ConcurrentOverwriteIsAtomic", testAtomicOverwrite},
		{"CancelledContext", testCancelled},
		{"Presign", testPresign},
	}
	for _, im := range implementations(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, im, im.fresh(t))
				})
			}
		})
	}
}

func put(t testing.TB, s blobstore.Store, key, body string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func get(t *testing.T, s blobstore.Store, key string, offset, length int64) string {
	t.Helper()
	rc, err := s.Get(context.Background(), key, offset, length)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, offset, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q) read: %v", key, err)
	}
	return string(b)
}

func listKeys(t *testing.T, s blobstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), prefix, func(i blobstore.Info) error {
		keys = append(keys, i.Key)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

func testPutGetOverwrite(t *testing.T, _ implementation, s blobstore.Store) {
	put(t, s, "job-1/epoch-7/task-3.seg", "first version")
	if got := get(t, s, "job-1/epoch-7/task-3.seg", 0, -1); got != "first version" {
		t.Fatalf("got %q", got)
	}
	put(t, s, "job-1/epoch-7/task-3.seg", "second")
	if got := get(t, s, "job-1/epoch-7/task-3.seg", 0, -1); got != "second" {
		t.Fatalf("after overwrite got %q", got)
	}
	// A 1 MiB blob round-trips byte for byte.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := s.Put(context.Background(), "big", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "big", 0, -1); got != string(big) {
		t.Fatalf("big blob differs (len %d)", len(got))
	}
}

func testEmptyObject(t *testing.T, _ implementation, s blobstore.Store) {
	put(t, s, "empty", "")
	if got := get(t, s, "empty", 0, -1); got != "" {
		t.Fatalf("got %q", got)
	}
	if got := get(t, s, "empty", 0, 10); got != "" {
		t.Fatalf("range got %q", got)
	}
	info, err := s.Head(context.Background(), "empty")
	if err != nil || info.Size != 0 {
		t.Fatalf("Head = %+v, %v", info, err)
	}
	if _, err := s.Get(context.Background(), "empty", 1, -1); !errors.Is(err, blobstore.ErrInvalidRange) {
		t.Fatalf("offset past the end of an empty object: %v, want ErrInvalidRange", err)
	}
}

func testRangeGet(t *testing.T, _ implementation, s blobstore.Store) {
	var b strings.Builder
	for i := range 100 {
		b.WriteByte(byte('a' + i%26))
	}
	body := b.String()
	put(t, s, "seg/changelog-0001", body)
	tests := []struct {
		offset, length int64
		want           string
	}{
		{0, -1, body},
		{0, 100, body},
		{0, 1000, body},
		{10, 5, body[10:15]},
		{10, -1, body[10:]},
		{95, 10, body[95:]},
		{99, 1, body[99:]},
		{100, -1, ""},
		{100, 5, ""},
		{0, 0, ""},
		{50, 0, ""},
		{1, 1<<63 - 1, body[1:]},
	}
	for _, tc := range tests {
		if got := get(t, s, "seg/changelog-0001", tc.offset, tc.length); got != tc.want {
			t.Errorf("Get(%d, %d) = %q, want %q", tc.offset, tc.length, got, tc.want)
		}
	}
	for _, r := range [][2]int64{{101, -1}, {101, 5}, {101, 0}, {-1, 5}, {-1, -1}} {
		if _, err := s.Get(context.Background(), "seg/changelog-0001", r[0], r[1]); !errors.Is(err, blobstore.ErrInvalidRange) {
			t.Errorf("Get(%d, %d): %v, want ErrInvalidRange", r[0], r[1], err)
		}
	}
}

func testHead(t *testing.T, im implementation, s blobstore.Store) {
	before := time.Now().Add(-time.Minute)
	put(t, s, "a/b/base.sst", "materialized")
	info, err := s.Head(context.Background(), "a/b/base.sst")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "a/b/base.sst" || info.Size != int64(len("materialized")) {
		t.Fatalf("Head = %+v", info)
	}
	if info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(time.Minute)) {
		t.Fatalf("ModTime %v is not about now", info.ModTime)
	}
	if im.presign { // the S3 stores
		sum := md5.Sum([]byte("materialized"))
		if info.ETag != hex.EncodeToString(sum[:]) {
			t.Fatalf("ETag %q, want the MD5 of the body", info.ETag)
		}
	}
}

func testMissing(t *testing.T, _ implementation, s blobstore.Store) {
	put(t, s, "dir/present", "x")
	ctx := context.Background()
	for _, key := range []string{"absent", "dir/absent", "dir/present/below", "dir"} {
		if _, err := s.Head(ctx, key); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("Head(%q): %v, want ErrNotFound", key, err)
		}
		for _, r := range [][2]int64{{0, -1}, {5, 10}, {0, 0}} {
			if _, err := s.Get(ctx, key, r[0], r[1]); !errors.Is(err, blobstore.ErrNotFound) {
				t.Errorf("Get(%q, %d, %d): %v, want ErrNotFound", key, r[0], r[1], err)
			}
		}
	}
}

func testDelete(t *testing.T, _ implementation, s blobstore.Store) {
	for _, k := range []string{"j/1/a", "j/1/b", "j/2/c", "keep"} {
		put(t, s, k, k)
	}
	failed, err := s.Delete(context.Background(), []string{"j/1/a", "j/2/c", "j/1/a", "never-there"})
	if err != nil || len(failed) != 0 {
		t.Fatalf("Delete: failed=%v err=%v", failed, err)
	}
	for _, k := range []string{"j/1/a", "j/2/c"} {
		if _, err := s.Head(context.Background(), k); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("Head(%q) after delete: %v", k, err)
		}
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"j/1/b", "keep"}) {
		t.Fatalf("left: %q", got)
	}
	if failed, err := s.Delete(context.Background(), nil); err != nil || len(failed) != 0 {
		t.Fatalf("Delete(nil): %v %v", failed, err)
	}
}

func testDeleteMissing(t *testing.T, _ implementation, s blobstore.Store) {
	failed, err := s.Delete(context.Background(), []string{"no/such/key", "nothing", "a/b/c/d"})
	if err != nil || len(failed) != 0 {
		t.Fatalf("deleting missing keys: failed=%v err=%v", failed, err)
	}
}

func testListOrderAndPrefix(t *testing.T, _ implementation, s blobstore.Store) {
	// Chosen so that per-directory order differs from byte order of keys:
	// '-' and '.' sort before '/', digits and letters after it.
	keys := []string{"a-c", "a/b", "a.b", "a0", "ab/c", "b/x/y", "b/x.z", "b/x-1/q", "z"}
	for _, k := range keys {
		put(t, s, k, "v:"+k)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := listKeys(t, s, ""); !slices.Equal(got, want) {
		t.Fatalf("List(\"\") = %q\nwant           %q", got, want)
	}
	for prefix, want := range map[string][]string{
		"b/":   {"b/x-1/q", "b/x.z", "b/x/y"},
		"b/x/": {"b/x/y"},
		"a/":   {"a/b"},
		"zz/":  nil,
		"z/":   nil,
	} {
		if got := listKeys(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	var sizes []int64
	_ = s.List(context.Background(), "b/x/", func(i blobstore.Info) error {
		sizes = append(sizes, i.Size)
		if i.ModTime.IsZero() {
			t.Errorf("List: zero ModTime for %q", i.Key)
		}
		return nil
	})
	if !slices.Equal(sizes, []int64{int64(len("v:b/x/y"))}) {
		t.Errorf("sizes %v", sizes)
	}
	for _, bad := range []string{"b", "/b/", "b//", "../", "b/../", "b\\"} {
		err := s.List(context.Background(), bad, func(blobstore.Info) error { return nil })
		if !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("List(%q): %v, want ErrInvalidKey", bad, err)
		}
	}
}

func testListCallbackError(t *testing.T, _ implementation, s blobstore.Store) {
	for _, k := range []string{"x/1", "x/2", "x/3"} {
		put(t, s, k, k)
	}
	stop := errors.New("stop here")
	calls := 0
	err := s.List(context.Background(), "", func(blobstore.Info) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("List = %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func testBulk(t *testing.T, im implementation, s blobstore.Store) {
	ctx := context.Background()
	keys := make([]string, im.bulk)
	for i := range keys {
		keys[i] = fmt.Sprintf("bulk/seg-%05d", i)
	}
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		errs  []error
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				if err := s.Put(ctx, keys[i], strings.NewReader(keys[i]), int64(len(keys[i]))); err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d puts failed, first: %v", len(errs), errs[0])
	}
	put(t, s, "other/keep", "k")

	if got := listKeys(t, s, "bulk/"); !slices.Equal(got, keys) {
		t.Fatalf("List(bulk/) returned %d keys, want %d in order", len(got), len(keys))
	}
	// Half of the keys twice, plus missing ones: still one success.
	doomed := append(slices.Clone(keys), keys[:len(keys)/2]...)
	doomed = append(doomed, "bulk/missing-1", "bulk/missing-2")
	failed, err := s.Delete(ctx, doomed)
	if err != nil || len(failed) != 0 {
		t.Fatalf("Delete(%d keys): %d failed, err %v", len(doomed), len(failed), err)
	}
	if got := listKeys(t, s, "bulk/"); len(got) != 0 {
		t.Fatalf("%d keys left after delete, first %q", len(got), got[0])
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"other/keep"}) {
		t.Fatalf("left: %q", got)
	}
}

// unseekable hides a reader's Seek method.
type unseekable struct{ io.Reader }

func testSizeMismatch(t *testing.T, _ implementation, s blobstore.Store) {
	ctx := context.Background()
	bodies := map[string]func(string) io.Reader{
		"seekable":   func(b string) io.Reader { return strings.NewReader(b) },
		"unseekable": func(b string) io.Reader { return unseekable{strings.NewReader(b)} },
	}
	for name, mk := range bodies {
		for _, tc := range []struct {
			body string
			size int64
		}{{"abc", 5}, {"abcdefgh", 5}, {"abc", -1}, {"", 1}, {"x", 0}} {
			err := s.Put(ctx, "mismatch", mk(tc.body), tc.size)
			if !errors.Is(err, blobstore.ErrSizeMismatch) {
				t.Errorf("%s body %q size %d: %v, want ErrSizeMismatch", name, tc.body, tc.size, err)
			}
		}
	}
	if _, err := s.Head(ctx, "mismatch"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("a failed put left an object: %v", err)
	}
	// A failed overwrite keeps the old object.
	put(t, s, "mismatch", "old")
	if err := s.Put(ctx, "mismatch", unseekable{strings.NewReader("new!")}, 10); !errors.Is(err, blobstore.ErrSizeMismatch) {
		t.Fatalf("short body: %v", err)
	}
	if got := get(t, s, "mismatch", 0, -1); got != "old" {
		t.Fatalf("after failed overwrite got %q", got)
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"mismatch"}) {
		t.Fatalf("List after failed puts = %q (temporary files must not show)", got)
	}
}

func testUnseekableBody(t *testing.T, _ implementation, s blobstore.Store) {
	body := strings.Repeat("changelog-entry;", 4096)
	r := iotest.OneByteReader(strings.NewReader(body))
	if err := s.Put(context.Background(), "stream/seg", r, int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "stream/seg", 0, -1); got != body {
		t.Fatalf("stream round trip: got %d bytes", len(got))
	}
}

// A seekable body is read from where it stands: Put stores the size bytes
// from its current offset, and size counts the bytes left from there.
func testSeekableBodyFromItsOffset(t *testing.T, _ implementation, s blobstore.Store) {
	ctx := context.Background()
	r := strings.NewReader("header|payload")
	if _, err := r.Seek(int64(len("header|")), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "offset", r, int64(len("payload"))); err != nil {
		t.Fatalf("Put of the rest of a reader: %v", err)
	}
	if got := get(t, s, "offset", 0, -1); got != "payload" {
		t.Fatalf("got %q, want the bytes from the reader's offset", got)
	}
	r = strings.NewReader("header|payload")
	if _, err := r.Seek(int64(len("header|")), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "offset", r, int64(len("header|payload"))); !errors.Is(err, blobstore.ErrSizeMismatch) {
		t.Fatalf("Put declaring the whole reader's size from its offset: %v, want ErrSizeMismatch", err)
	}
	if got := get(t, s, "offset", 0, -1); got != "payload" {
		t.Fatalf("after the refused Put got %q", got)
	}
}

func testInvalidKeys(t *testing.T, _ implementation, s blobstore.Store) {
	ctx := context.Background()
	put(t, s, "good", "g")
	for _, key := range []string{"../x", "a/../../b", "/abs", "a//b", `a\b`, "", "a/", "x\x00y", "ключ"} {
		if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("Put(%q): %v", key, err)
		}
		if _, err := s.Get(ctx, key, 0, -1); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("Get(%q): %v", key, err)
		}
		if _, err := s.Head(ctx, key); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("Head(%q): %v", key, err)
		}
		if _, _, err := s.PresignPut(ctx, key, time.Minute); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("PresignPut(%q): %v", key, err)
		}
		// One bad key refuses the whole batch: the good key survives.
		failed, err := s.Delete(ctx, []string{"good", key})
		if !errors.Is(err, blobstore.ErrInvalidKey) || failed != nil {
			t.Errorf("Delete(good, %q) = %v, %v", key, failed, err)
		}
	}
	if got := get(t, s, "good", 0, -1); got != "g" {
		t.Fatalf("good key damaged: %q", got)
	}
}

func testAtomicOverwrite(t *testing.T, _ implementation, s blobstore.Store) {
	ctx := context.Background()
	a := strings.Repeat("A", 64<<10)
	b := strings.Repeat("B", 64<<10)
	put(t, s, "hot", a)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20 {
			body := a
			if i%2 == 0 {
				body = b
			}
			if err := s.Put(ctx, "hot", strings.NewReader(body), int64(len(body))); err != nil {
				t.Errorf("Put: %v", err)
				return
			}
		}
	})
	for range 20 {
		rc, err := s.Get(ctx, "hot", 0, -1)
		if err != nil {
			t.Fatalf("Get during overwrites: %v", err)
		}
		got, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != a && string(got) != b {
			t.Fatalf("read a torn object: %d bytes", len(got))
		}
	}
	wg.Wait()
}

func testCancelled(t *testing.T, _ implementation, s blobstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, "c", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put: %v, want context.Canceled", err)
	}
	if _, err := s.Head(ctx, "c"); !errors.Is(err, context.Canceled) {
		t.Errorf("Head: %v, want context.Canceled", err)
	}
	if rc, err := s.Get(ctx, "c", 0, -1); !errors.Is(err, context.Canceled) {
		if err == nil {
			_ = rc.Close()
		}
		t.Errorf("Get: %v, want context.Canceled", err)
	}
	if err := s.List(ctx, "", func(blobstore.Info) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("List: %v, want context.Canceled", err)
	}
	if _, err := s.Delete(ctx, []string{"c"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete: %v, want context.Canceled", err)
	}
}

func testPresign(t *testing.T, im implementation, s blobstore.Store) {
	ctx := context.Background()
	u, header, err := s.PresignPut(ctx, "upload/by-worker", 5*time.Minute)
	if !im.presign {
		if !errors.Is(err, blobstore.ErrPresignUnsupported) {
			t.Fatalf("PresignPut: %v, want ErrPresignUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	body := "uploaded without credentials"
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %s: %s", resp.Status, msg)
	}
	if got := get(t, s, "upload/by-worker", 0, -1); got != body {
		t.Fatalf("got %q", got)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 8 * 24 * time.Hour} {
		if _, _, err := s.PresignPut(ctx, "k", ttl); err == nil {
			t.Errorf("PresignPut ttl %s: no error", ttl)
		}
	}
}
