package blobstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// Open returns the store a --blob-store value names:
//
//   - "s3://BUCKET" or "s3://BUCKET/PREFIX": an S3 store; the bucket and
//     prefix replace those of s3cfg, whose other settings (endpoint, region,
//     path style, credentials, retries) apply;
//   - "file:///DIR" or a plain path: a local directory store at DIR.
func Open(ctx context.Context, spec string, s3cfg S3Config) (Store, error) {
	if spec == "" {
		return nil, fmt.Errorf("blobstore: empty store location")
	}
	scheme, rest, ok := strings.Cut(spec, "://")
	if !ok {
		return NewLocal(spec, WithLocalObserver(s3cfg.Observer))
	}
	switch scheme {
	case "s3":
		bucket, prefix, _ := strings.Cut(rest, "/")
		s3cfg.Bucket = bucket
		s3cfg.Prefix = prefix
		return NewS3(ctx, s3cfg)
	case "file":
		u, err := url.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("blobstore: store location %q: %w", spec, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("blobstore: store location %q: a file URL names no host (file:///dir)", spec)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("blobstore: store location %q: no directory", spec)
		}
		return NewLocal(u.Path, WithLocalObserver(s3cfg.Observer))
	default:
		return nil, fmt.Errorf("blobstore: store location %q: unknown scheme %q (want s3:// or file://)", spec, scheme)
	}
}
