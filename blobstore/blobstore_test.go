package blobstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

func TestValidateKey(t *testing.T) {
	good := []string{
		"a",
		"job-1/epoch-00000042/task-7/state.changelog",
		"A.B_C-d/0",
		"...",    // three dots is a name, not a parent reference
		"a/.b/c", // hidden names are fine
		"a..b",
		strings.Repeat("k", blobstore.MaxKeyLen),
		strings.Repeat("ab/", 170) + "x",
	}
	for _, k := range good {
		if err := blobstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}

	bad := []struct{ key, problem string }{
		{"", "empty"},
		{"../x", `".." segment`},
		{"a/../../b", `".." segment`},
		{"..", `".." segment`},
		{"a/..", `".." segment`},
		{".", `"." segment`},
		{"./a", `"." segment`},
		{"a/./b", `"." segment`},
		{"/abs", `starts with "/"`},
		{"/", `starts with "/"`},
		{"a/", `ends with "/"`},
		{"a//b", "empty segment"},
		{`a\b`, "backslash"},
		{`..\..\windows`, "backslash"},
		{"über", "outside"},
		{"ключ", "outside"},
		{"emoji-\U0001F600", "outside"},
		{"nul\x00byte", "outside"},
		{"new\nline", "outside"},
		{"tab\there", "outside"},
		{"del\x7f", "outside"},
		{"%2e%2e/x", "outside"},
		{"a b", "outside"},
		{"a:b", "outside"},
		{"a~b", "outside"},
		{"a*b", "outside"},
		{"a?b", "outside"},
		{"a+b", "outside"},
		{strings.Repeat("k", blobstore.MaxKeyLen+1), "longer than 512 bytes"},
	}
	for _, tc := range bad {
		err := blobstore.ValidateKey(tc.key)
		if !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", tc.key, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("ValidateKey(%q) = %q, want it to name %q", tc.key, err, tc.problem)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a/", "job-1/epoch-2/"} {
		if err := blobstore.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"a", "/", "/a/", "a//", "../", "a/../", "./", "ü/"} {
		if err := blobstore.ValidatePrefix(p); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestS3ConfigValidate(t *testing.T) {
	ok := blobstore.S3Config{Bucket: "blobs", Region: "eu-west-1"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(c *blobstore.S3Config)
		want   string
	}{
		{"no bucket", func(c *blobstore.S3Config) { c.Bucket = "" }, "bucket is required"},
		{"upper-case bucket", func(c *blobstore.S3Config) { c.Bucket = "Blobs" }, "invalid bucket name"},
		{"short bucket", func(c *blobstore.S3Config) { c.Bucket = "ab" }, "invalid bucket name"},
		{"bucket with slash", func(c *blobstore.S3Config) { c.Bucket = "a/b" }, "invalid bucket name"},
		{"escaping prefix", func(c *blobstore.S3Config) { c.Prefix = "../up" }, "prefix"},
		{"absolute prefix", func(c *blobstore.S3Config) { c.Prefix = "/p" }, "prefix"},
		{"endpoint without scheme", func(c *blobstore.S3Config) { c.Endpoint = "127.0.0.1:9000" }, "endpoint"},
		{"ftp endpoint", func(c *blobstore.S3Config) { c.Endpoint = "ftp://host" }, "endpoint"},
		{"half credentials", func(c *blobstore.S3Config) { c.AccessKeyID = "id" }, "both"},
		{"token alone", func(c *blobstore.S3Config) { c.SessionToken = "tok" }, "session token"},
		{"negative attempts", func(c *blobstore.S3Config) { c.MaxAttempts = -1 }, "max attempts"},
	}
	for _, tc := range tests {
		c := ok
		tc.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error about %q", tc.name, err, tc.want)
		}
		if _, nerr := blobstore.NewS3(context.Background(), c); nerr == nil {
			t.Errorf("%s: NewS3 accepted an invalid config", tc.name)
		}
	}
}

func TestS3PrefixNormalised(t *testing.T) {
	for prefix, want := range map[string]string{
		"":          "s3://blobs",
		"ckpt":      "s3://blobs/ckpt",
		"ckpt/":     "s3://blobs/ckpt",
		"a/b/c":     "s3://blobs/a/b/c",
		"a/b/c/":    "s3://blobs/a/b/c",
		"prod-east": "s3://blobs/prod-east",
	} {
		s, err := blobstore.NewS3(context.Background(), blobstore.S3Config{
			Bucket: "blobs", Prefix: prefix, Region: "us-east-1",
			AccessKeyID: "id", SecretAccessKey: "secret",
		})
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != want {
			t.Errorf("prefix %q: String() = %q, want %q", prefix, s.String(), want)
		}
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s3cfg := blobstore.S3Config{Region: "us-east-1", AccessKeyID: "id", SecretAccessKey: "secret"}

	for _, spec := range []string{"file://" + filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		s, err := blobstore.Open(ctx, spec, s3cfg)
		if err != nil {
			t.Fatalf("Open(%q): %v", spec, err)
		}
		if _, ok := s.(*blobstore.Local); !ok {
			t.Fatalf("Open(%q) = %T, want *Local", spec, s)
		}
		if !strings.HasPrefix(s.String(), "file:///") {
			t.Errorf("String() = %q", s.String())
		}
	}
	s, err := blobstore.Open(ctx, "s3://my-bucket/ckpt/prod", s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*blobstore.S3); !ok || s.String() != "s3://my-bucket/ckpt/prod" {
		t.Fatalf("Open(s3://...) = %T %q", s, s)
	}
	for _, spec := range []string{"", "ftp://x/y", "file://otherhost/dir", "s3://", "s3://Bad_Bucket/x", "s3://bucket/../x"} {
		if _, err := blobstore.Open(ctx, spec, s3cfg); err == nil {
			t.Errorf("Open(%q): no error", spec)
		}
	}
}

func TestHealthClassifiesCalls(t *testing.T) {
	h := blobstore.NewHealth()
	if s := h.Snapshot(); s.Calls != 0 || !s.LastSuccess.IsZero() {
		t.Fatalf("new: %+v", s)
	}
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, c := range []struct {
		op  string
		err error
	}{
		{blobstore.OpHead, fmt.Errorf("%w: k", blobstore.ErrNotFound)}, // answered
		{blobstore.OpList, down},
		{blobstore.OpPut, fmt.Errorf("%w: x", blobstore.ErrInvalidKey)},    // never sent
		{blobstore.OpGet, fmt.Errorf("%w: -1", blobstore.ErrInvalidRange)}, // never sent
		{blobstore.OpGet, context.Canceled},                                // the caller left
		{blobstore.OpPresign, down},                                        // no request
		{blobstore.OpDelete, down},
	} {
		h.Observe(c.op, 1, c.err, time.Millisecond)
	}
	s := h.Snapshot()
	if s.Calls != 3 || s.Failures != 2 || s.ConsecutiveFailures != 2 || s.LastSuccessOp != blobstore.OpHead ||
		s.LastErrorOp != blobstore.OpDelete || s.LastError != down.Error() || s.LastErrorAt.Before(s.LastSuccess) {
		t.Fatalf("after the calls: %+v", s)
	}
	h.Observe(blobstore.OpPing, 1, nil, time.Millisecond)
	if s := h.Snapshot(); s.ConsecutiveFailures != 0 || s.LastSuccessOp != blobstore.OpPing || s.Failures != 2 || s.LastError != down.Error() {
		t.Fatalf("after a success: %+v", s)
	}
}
