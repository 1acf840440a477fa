package blobstore

import (
	"context"
	"net/http"
	"time"
)

// HeadSDK is Head through the SDK's client, as Head was before the direct
// HEAD (head.go): the reference the direct path is compared with.
func (s *S3) HeadSDK(ctx context.Context, key string) (info Info, err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpHead, 1, err, start) }()
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	return s.head(ctx, key)
}

// DirectHeadRequest returns the request the direct HEAD of key sends at
// attempt (of the retryer's maximum), with invocation id id, signed at at.
func (s *S3) DirectHeadRequest(ctx context.Context, key, id string, attempt int, at time.Time) (*http.Request, error) {
	t, err := s.dhead.template(ctx, s)
	if err != nil {
		return nil, err
	}
	return s.dhead.request(ctx, t, s.prefix+key, id, attempt, s.dhead.retryer.MaxAttempts(), at)
}

// SetPresignClock sets the clock that upload URLs are signed by (before
// the store presigns concurrently).
func (s *S3) SetPresignClock(now func() time.Time) { s.direct.now = now }

// CallTimeout is the bound of each store call: S3Config.Timeout, or its
// default; not positive, no bound.
func (s *S3) CallTimeout() time.Duration { return s.timeout }
