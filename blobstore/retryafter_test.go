package blobstore

import (
	"errors"
	"net/http"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestRetryAfterClamp: the direct HEAD waits between attempts as the SDK's
// retry middleware does: an x-amz-retry-after answer (milliseconds) is
// obeyed within [backoff, backoff+5s]; a missing, malformed or negative
// one leaves the backoff.
func TestRetryAfterClamp(t *testing.T) {
	answer := func(v string) error {
		h := http.Header{}
		if v != "" {
			h.Set("X-Amz-Retry-After", v)
		}
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 503, Header: h}}, Err: errors.New("slow down")}
	}
	const backoff = 300 * time.Millisecond
	for _, c := range []struct {
		err  error
		want time.Duration
	}{
		{errors.New("no answer"), backoff},
		{answer(""), backoff},
		{answer("1200"), 1200 * time.Millisecond},
		{answer("100"), backoff},
		{answer("60000"), backoff + 5*time.Second},
		{answer("-2000"), backoff},
		{answer("soon"), backoff},
	} {
		if got := retryAfter(backoff, c.err); got != c.want {
			t.Errorf("retryAfter(%s, %v) = %s, want %s", backoff, c.err, got, c.want)
		}
	}
}
