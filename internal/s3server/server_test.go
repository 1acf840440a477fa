package s3server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/metastore/metastore/internal/s3server"
)

const (
	keyID  = "test-key"
	secret = "test-secret"
	bucket = "bkt"
)

// clock is an adjustable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func start(t *testing.T, opts s3server.Options) (*s3server.Server, string) {
	t.Helper()
	srv, err := s3server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv, hs.URL
}

func client(endpoint, id, key string) *s3.Client {
	return s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(id, key, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           1,
	})
}

func putObject(ctx context.Context, c *s3.Client, key, body string) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
	return err
}

func getObject(ctx context.Context, c *s3.Client, key string, rng *string) (string, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Range: rng})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return string(b), err
}

func TestSignedRequests(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Now()}
	_, endpoint := start(t, s3server.Options{Buckets: []string{bucket}, AccessKeyID: keyID, SecretAccessKey: secret, Now: clk.Now})

	good := client(endpoint, keyID, secret)
	if err := putObject(ctx, good, "dir/key with space+plus", "hello"); err != nil {
		t.Fatalf("signed put: %v", err)
	}
	if got, err := getObject(ctx, good, "dir/key with space+plus", aws.String("bytes=1-3")); err != nil || got != "ell" {
		t.Fatalf("signed ranged get = %q, %v", got, err)
	}
	list, err := good.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("dir/"), MaxKeys: aws.Int32(5)})
	if err != nil || len(list.Contents) != 1 {
		t.Fatalf("signed list with query parameters: %v, %v", list, err)
	}

	for name, c := range map[string]*s3.Client{
		"wrong secret": client(endpoint, keyID, "wrong"),
		"unknown key":  client(endpoint, "nobody", secret),
	} {
		err := putObject(ctx, c, "k", "x")
		if err == nil {
			t.Errorf("%s: put accepted", name)
		}
	}

	resp, err := http.Get(endpoint + "/" + bucket + "/dir/key%20with%20space%2Bplus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "AccessDenied") {
		t.Fatalf("anonymous get: %s %s", resp.Status, body)
	}
}

func TestPayloadHashChecked(t *testing.T) {
	ctx := context.Background()
	_, endpoint := start(t, s3server.Options{Buckets: []string{bucket}, AccessKeyID: keyID, SecretAccessKey: secret})
	signed := func(body, claimed string) *http.Response {
		req, err := http.NewRequest(http.MethodPut, endpoint+"/"+bucket+"/obj", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(claimed))
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		creds := aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}
		if err := v4.NewSigner().SignHTTP(ctx, creds, req, hash, "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := signed("tampered", "original")
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "XAmzContentSHA256Mismatch") {
		t.Fatalf("body not matching its signed hash: %s %s", resp.Status, body)
	}
	resp = signed("original", "original")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("matching body: %s", resp.Status)
	}
	if got, err := getObject(ctx, client(endpoint, keyID, secret), "obj", nil); err != nil || got != "original" {
		t.Fatalf("stored %q, %v", got, err)
	}
}

func TestPresignedURLExpires(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Now()}
	_, endpoint := start(t, s3server.Options{Buckets: []string{bucket}, AccessKeyID: keyID, SecretAccessKey: secret, Now: clk.Now})
	ps := s3.NewPresignClient(client(endpoint, keyID, secret))
	req, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("up")},
		s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	do := func() int {
		r, err := http.NewRequest(req.Method, req.URL, strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := do(); code != http.StatusOK {
		t.Fatalf("fresh presigned PUT: %d", code)
	}
	clk.advance(2 * time.Minute)
	if code := do(); code != http.StatusForbidden {
		t.Fatalf("expired presigned PUT: %d, want 403", code)
	}
}

func TestDeleteObjectsLimit(t *testing.T) {
	ctx := context.Background()
	_, endpoint := start(t, s3server.Options{Buckets: []string{bucket}, AccessKeyID: keyID, SecretAccessKey: secret})
	c := client(endpoint, keyID, secret)
	del := func(n int) error {
		objs := make([]types.ObjectIdentifier, n)
		for i := range objs {
			objs[i].Key = aws.String(fmt.Sprintf("k%04d", i))
		}
		_, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket), Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
		return err
	}
	if err := putObject(ctx, c, "k0000", "x"); err != nil {
		t.Fatal(err)
	}
	if err := del(s3server.MaxDeleteObjects + 1); err == nil || !strings.Contains(err.Error(), "MalformedXML") {
		t.Fatalf("DeleteObjects of %d keys: %v, want MalformedXML", s3server.MaxDeleteObjects+1, err)
	}
	if _, err := getObject(ctx, c, "k0000", nil); err != nil {
		t.Fatalf("a refused DeleteObjects deleted something: %v", err)
	}
	if err := del(s3server.MaxDeleteObjects); err != nil {
		t.Fatalf("DeleteObjects of %d keys: %v", s3server.MaxDeleteObjects, err)
	}
	var nsk *types.NoSuchKey
	if _, err := getObject(ctx, c, "k0000", nil); !errors.As(err, &nsk) {
		t.Fatalf("after delete: %v, want NoSuchKey", err)
	}
}

func TestDirBackendPersists(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := s3server.New(s3server.Options{Dir: dir, Buckets: []string{bucket}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	c := client(hs.URL, "any", "thing") // no credentials configured: anything goes
	if err := putObject(ctx, c, "a/b", "persisted"); err != nil {
		t.Fatal(err)
	}
	hs.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	srv2, endpoint := start(t, s3server.Options{Dir: dir, Buckets: []string{bucket}})
	if err := srv2.CreateBucket(bucket); err != nil {
		t.Fatalf("CreateBucket of an existing bucket: %v", err)
	}
	if got, err := getObject(ctx, client(endpoint, "x", "y"), "a/b", aws.String("bytes=2-")); err != nil || got != "rsisted" {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

func TestBuckets(t *testing.T) {
	ctx := context.Background()
	srv, endpoint := start(t, s3server.Options{})
	c := client(endpoint, "x", "y")
	var api smithy.APIError
	if err := putObject(ctx, c, "k", "v"); !errors.As(err, &api) || api.ErrorCode() != "NoSuchBucket" {
		t.Fatalf("put to a missing bucket: %v, want NoSuchBucket", err)
	}
	if err := srv.CreateBucket("Not_Valid"); err == nil {
		t.Fatal("CreateBucket accepted an invalid name")
	}
	if err := srv.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	if err := putObject(ctx, c, "k", "v"); err != nil {
		t.Fatal(err)
	}

	_, autoEndpoint := start(t, s3server.Options{AutoBucket: true})
	if err := putObject(ctx, client(autoEndpoint, "x", "y"), "k", "v"); err != nil {
		t.Fatalf("auto-bucket put: %v", err)
	}

	if _, err := s3server.New(s3server.Options{AccessKeyID: "only-id"}); err == nil {
		t.Fatal("New accepted half the credentials")
	}
}

// An SDK client with its default checksum settings sends aws-chunked bodies
// with a trailing CRC over HTTPS; the server refuses them instead of storing
// the framing as content. With checksums only when required, it works.
func TestChunkedTrailerRefused(t *testing.T) {
	ctx := context.Background()
	srv, err := s3server.New(s3server.Options{Buckets: []string{bucket}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewTLSServer(srv)
	defer hs.Close()
	mk := func(calc aws.RequestChecksumCalculation) *s3.Client {
		return s3.New(s3.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(hs.URL), UsePathStyle: true, HTTPClient: hs.Client(),
			Credentials:                credentials.NewStaticCredentialsProvider("x", "y", ""),
			RequestChecksumCalculation: calc, RetryMaxAttempts: 1,
		})
	}
	err = putObject(ctx, mk(aws.RequestChecksumCalculationWhenSupported), "k", "hello")
	if err == nil || !strings.Contains(err.Error(), "NotImplemented") {
		t.Fatalf("trailing-checksum upload: %v, want NotImplemented", err)
	}
	good := mk(aws.RequestChecksumCalculationWhenRequired)
	if err := putObject(ctx, good, "k", "hello"); err != nil {
		t.Fatal(err)
	}
	if got, err := getObject(ctx, good, "k", nil); err != nil || got != "hello" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// GETs stream object contents while PUTs grow the database file (and so
// remap its memory map): every GET must return the object's bytes. Without
// the backend's copy under a read lock the contents alias the old mapping
// and the process dies with SIGSEGV, or a GET returns garbage.
func TestDirBackendConcurrentGetsDuringGrowth(t *testing.T) {
	ctx := context.Background()
	_, endpoint := start(t, s3server.Options{Dir: t.TempDir(), Buckets: []string{bucket}})
	c := client(endpoint, "any", "thing")
	want := strings.Repeat("0123456789abcdef", 4096) // 64 KiB
	if err := putObject(ctx, c, "hot", want); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		writing atomic.Bool
	)
	writing.Store(true)
	wg.Go(func() {
		defer writing.Store(false)
		big := strings.Repeat("x", 256<<10)
		for i := range 80 { // ~20 MiB: the file grows and is remapped several times
			if err := putObject(ctx, c, fmt.Sprintf("grow/%03d", i), big); err != nil {
				t.Errorf("put grow/%03d: %v", i, err)
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for n := 0; writing.Load() || n < 5; n++ {
				got, err := getObject(ctx, c, "hot", nil)
				if err != nil {
					t.Errorf("get hot: %v", err)
					return
				}
				if got != want {
					t.Errorf("get hot returned %d bytes that differ from the %d put", len(got), len(want))
					return
				}
			}
		})
	}
	wg.Wait()
}
