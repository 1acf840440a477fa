package blobstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// recorder is an HTTP transport that records every request and passes it
// on to the real one; it can answer the next requests with a 503 itself.
type recorder struct {
	next http.RoundTripper

	mu   sync.Mutex
	reqs []*http.Request
	fail int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Clone(context.Background()))
	fail := r.fail > 0
	if fail {
		r.fail--
	}
	r.mu.Unlock()
	if fail {
		return &http.Response{
			Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"X-Amz-Request-Id": {"injected"}}, Body: http.NoBody, Request: req,
		}, nil
	}
	return r.next.RoundTrip(req)
}

// take returns the requests recorded since the last take, and makes the
// next fail requests fail with a 503.
func (r *recorder) take(fail int) []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs, r.fail = nil, fail
	return reqs
}

var requestIDs = regexp.MustCompile(`RequestID: [^,]*, HostID: [^,]*,`)

// sameAnswer fails unless the direct HEAD's answer is the SDK's: the same
// Info, or errors that are the same sentinels with the same message (the
// server's request ids aside).
func sameAnswer(t *testing.T, what string, sdkInfo blobstore.Info, sdkErr error, info blobstore.Info, err error) {
	t.Helper()
	if (sdkErr == nil) != (err == nil) {
		t.Fatalf("%s: direct HEAD answered %+v, %v; the SDK %+v, %v", what, info, err, sdkInfo, sdkErr)
	}
	if err == nil {
		if info != sdkInfo {
			t.Fatalf("%s: direct HEAD answered %+v, the SDK %+v", what, info, sdkInfo)
		}
		return
	}
	for _, sentinel := range []error{blobstore.ErrNotFound, blobstore.ErrAccessDenied, blobstore.ErrBucketNotFound, blobstore.ErrInvalidKey, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) != errors.Is(sdkErr, sentinel) {
			t.Fatalf("%s: direct HEAD's error %q is %v: %v, the SDK's %q: %v", what, err, sentinel, errors.Is(err, sentinel), sdkErr, errors.Is(sdkErr, sentinel))
		}
	}
	got, want := requestIDs.ReplaceAllString(err.Error(), "IDS"), requestIDs.ReplaceAllString(sdkErr.Error(), "IDS")
	if got != want {
		t.Fatalf("%s: direct HEAD's error\n %s\nthe SDK's\n %s", what, err, sdkErr)
	}
}

// TestDirectHeadMatchesSDK: the request the direct HEAD sends is the one
// the SDK's HeadObject sends, header for header, and signed alike: with and
// without a prefix, with a session token, for an object and a missing
// key, on a first attempt and on a retry after a 503. The requests are
// recorded on their way to the S3 server process, which answers both.
func TestDirectHeadMatchesSDK(t *testing.T) {
	// The SDK cannot add a CA bundle to a plain *http.Client's transport;
	// the server is plain HTTP anyway.
	t.Setenv("AWS_CA_BUNDLE", "")
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	for name, mod := range map[string]func(*blobstore.S3Config){
		"no prefix":     func(c *blobstore.S3Config) { c.Prefix = "" },
		"prefix":        func(c *blobstore.S3Config) { c.Prefix = "hdr/p" },
		"session token": func(c *blobstore.S3Config) { c.SessionToken = "tok/en+==" },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := blobtest.Config(endpoint, testBucket, "hdr")
			mod(&cfg)
			rec := &recorder{next: http.DefaultTransport}
			cfg.HTTPClient = &http.Client{Transport: rec}
			s, err := blobstore.NewS3(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SessionToken == "" {
				put(t, s, "obj", "some bytes")
			}
			for _, key := range []string{"obj", "absent"} {
				for _, failFirst := range []int{0, 1} {
					what := key
					if failFirst > 0 {
						what += " after a 503"
					}
					rec.take(failFirst)
					sdkInfo, sdkErr := s.HeadSDK(ctx, key)
					sdkReqs := rec.take(failFirst)
					info, err := s.Head(ctx, key)
					reqs := rec.take(0)
					sameAnswer(t, what, sdkInfo, sdkErr, info, err)
					if len(reqs) != failFirst+1 || len(sdkReqs) != len(reqs) {
						t.Fatalf("%s: the direct HEAD sent %d requests, the SDK %d, want %d", what, len(reqs), len(sdkReqs), failFirst+1)
					}
					for i := range reqs {
						sameRequest(t, s, what, key, i+1, sdkReqs[i], reqs[i])
					}
					if id := reqs[0].Header.Get("Amz-Sdk-Invocation-Id"); id != reqs[len(reqs)-1].Header.Get("Amz-Sdk-Invocation-Id") || id == sdkReqs[0].Header.Get("Amz-Sdk-Invocation-Id") {
						t.Fatalf("%s: invocation ids %q (SDK %q): want one per call, the same for its retries", what, id, sdkReqs[0].Header.Get("Amz-Sdk-Invocation-Id"))
					}
				}
			}
		})
	}
}

// sameRequest fails unless direct, the direct HEAD's request of key at
// attempt, is sdk's but for its time and invocation id, and unless the
// direct request made with sdk's time and id is sdk, byte for byte.
func sameRequest(t *testing.T, s *blobstore.S3, what, key string, attempt int, sdk, direct *http.Request) {
	t.Helper()
	host := func(r *http.Request) string { return cmp.Or(r.Host, r.URL.Host) } // what goes on the wire
	if direct.Method != sdk.Method || direct.URL.String() != sdk.URL.String() || host(direct) != host(sdk) {
		t.Fatalf("%s, attempt %d: direct %s %s (host %q), SDK %s %s (host %q)", what, attempt, direct.Method, direct.URL, host(direct), sdk.Method, sdk.URL, host(sdk))
	}
	names := func(h http.Header) []string {
		return slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				yield(k)
			}
		})
	}
	if got, want := names(direct.Header), names(sdk.Header); !slices.Equal(got, want) {
		t.Fatalf("%s, attempt %d: direct headers %q, the SDK's %q", what, attempt, got, want)
	}
	for k, v := range sdk.Header {
		switch k {
		case "X-Amz-Date", "Authorization", "Amz-Sdk-Invocation-Id":
			continue
		}
		if !slices.Equal(direct.Header[k], v) {
			t.Fatalf("%s, attempt %d: %s: direct %q, SDK %q", what, attempt, k, direct.Header[k], v)
		}
	}
	at, err := time.Parse("20060102T150405Z", sdk.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.DirectHeadRequest(context.Background(), key, sdk.Header.Get("Amz-Sdk-Invocation-Id"), attempt, at)
	if err != nil {
		t.Fatal(err)
	}
	if again.URL.String() != sdk.URL.String() || len(again.Header) != len(sdk.Header) {
		t.Fatalf("%s, attempt %d: at the SDK's time: %s %v, SDK %s %v", what, attempt, again.URL, again.Header, sdk.URL, sdk.Header)
	}
	for k, v := range sdk.Header {
		if !slices.Equal(again.Header[k], v) {
			t.Fatalf("%s, attempt %d: at the SDK's time and id, %s: direct %q, SDK %q", what, attempt, k, again.Header[k], v)
		}
	}
}

// TestS3HeadAnswersAsSDK: against the S3 server process, with the store's
// own HTTP client and timeouts, Head answers what the SDK's HeadObject
// answered (an object, a missing one, a missing bucket, a wrong secret, an
// unknown access key id, an invalid key, a canceled call), and the health
// and the observer count the calls alike.
func TestS3HeadAnswersAsSDK(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for name, mod := range map[string]func(*blobstore.S3Config){
		"right credentials": func(*blobstore.S3Config) {},
		"wrong secret":      func(c *blobstore.S3Config) { c.SecretAccessKey = "not-the-secret-0123" },
		"unknown key id":    func(c *blobstore.S3Config) { c.AccessKeyID = "stranger" },
		"missing bucket":    func(c *blobstore.S3Config) { c.Bucket = "no-such-bucket" },
	} {
		t.Run(name, func(t *testing.T) {
			var stores [2]*blobstore.S3
			var health [2]*blobstore.Health
			var ops [2][]string
			for i := range stores {
				cfg := blobtest.Config(endpoint, testBucket, "answers")
				mod(&cfg)
				health[i] = blobstore.NewHealth()
				cfg.Observer = blobstore.Observers(health[i].Observe, func(op string, n int, err error, _ time.Duration) {
					ops[i] = append(ops[i], op)
				})
				s, err := blobstore.NewS3(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			writer := blobtest.NewS3Store(t, endpoint, testBucket, "answers")
			put(t, writer, "obj", "twelve bytes")
			sdk, direct := stores[0], stores[1]
			for _, c := range []struct {
				key string
				ctx context.Context
			}{{"obj", ctx}, {"absent", ctx}, {"../bad", ctx}, {"obj", canceled}, {"obj", ctx}} {
				sdkInfo, sdkErr := sdk.HeadSDK(c.ctx, c.key)
				info, err := direct.Head(c.ctx, c.key)
				sameAnswer(t, c.key, sdkInfo, sdkErr, info, err)
				if name == "right credentials" && c.key == "obj" && c.ctx == ctx && (err != nil || info.Size != 12 || info.ETag == "" || info.ModTime.IsZero() || info.Key != "obj") {
					t.Fatalf("Head of obj: %+v, %v", info, err)
				}
			}
			a, b := health[0].Snapshot(), health[1].Snapshot()
			if a.Calls != b.Calls || a.Failures != b.Failures || a.ConsecutiveFailures != b.ConsecutiveFailures || a.LastErrorOp != b.LastErrorOp || a.LastSuccessOp != b.LastSuccessOp ||
				requestIDs.ReplaceAllString(a.LastError, "") != requestIDs.ReplaceAllString(b.LastError, "") {
				t.Fatalf("health after the SDK's HEADs %+v, after the direct ones %+v", a, b)
			}
			if !slices.Equal(ops[0], ops[1]) || len(ops[1]) != 5 {
				t.Fatalf("observed %q, the SDK's %q", ops[1], ops[0])
			}
		})
	}
}

// TestS3HeadFrozenServerAsSDK: against a server process that accepts and
// never answers, the direct HEAD fails as the SDK's did: each attempt ends
// at the attempt timeout, the retryer tries MaxAttempts times, the same
// error, within the same bound, counted a failure by the health.
func TestS3HeadFrozenServerAsSDK(t *testing.T) {
	srv := blobtest.StartS3ServerProcess(t, "--bucket", testBucket)
	cfg := blobtest.Config(srv.Endpoint, testBucket, "frozen")
	cfg.Timeout = 30 * time.Second
	cfg.AttemptTimeout = 300 * time.Millisecond
	cfg.MaxAttempts = 2
	health := blobstore.NewHealth()
	cfg.Observer = health.Observe
	s, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put(t, s, "k", "before the freeze")
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Thaw() }()
	const bound = 10 * time.Second
	start := time.Now()
	sdkInfo, sdkErr := s.HeadSDK(ctx, "k")
	sdkTook := time.Since(start)
	start = time.Now()
	info, err := s.Head(ctx, "k")
	took := time.Since(start)
	sameAnswer(t, "frozen", sdkInfo, sdkErr, info, err)
	if err == nil || !strings.Contains(err.Error(), "exceeded maximum number of attempts, 2") || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("Head of a frozen server: %v, want two attempts ended by the attempt timeout", err)
	}
	if took > bound || sdkTook > bound {
		t.Fatalf("Head took %s (the SDK's %s) against a frozen server, want under %s", took, sdkTook, bound)
	}
	if h := health.Snapshot(); h.ConsecutiveFailures != 2 || h.LastErrorOp != blobstore.OpHead {
		t.Fatalf("health after two failed HEADs: %+v", h)
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Head(ctx, "k"); err != nil || info.Size != int64(len("before the freeze")) {
		t.Fatalf("after the thaw: %+v, %v", info, err)
	}
}

// TestS3HeadConcurrent: HEADs of a fresh store from many goroutines at
// once (the first ones learn the request template together) all answer
// right; run with -race.
func TestS3HeadConcurrent(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, testBucket)
	s := blobtest.NewS3Store(t, endpoint, testBucket, "concurrent")
	put(t, blobtest.NewS3Store(t, endpoint, testBucket, "concurrent"), "obj", "12345")
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			key := "obj"
			if i%2 == 1 {
				key = "absent"
			}
			info, err := s.Head(context.Background(), key)
			switch {
			case key == "obj" && (err != nil || info.Size != 5):
				errs <- fmt.Errorf("Head(obj): %+v, %v", info, err)
			case key == "absent" && !errors.Is(err, blobstore.ErrNotFound):
				errs <- fmt.Errorf("Head(absent): %+v, %v", info, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
