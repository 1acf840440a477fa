package blobstore_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// headInterposer answers the store's HEAD requests itself, in place of the
// S3 server process: with status and no body (as S3 answers a HEAD), or,
// with cancel set, by ending the caller's context while the request is in
// flight and failing as a transport whose caller gave up. Every other
// request goes to the server.
type headInterposer struct {
	next   http.RoundTripper
	status int
	cancel context.CancelFunc
}

func (h *headInterposer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodHead {
		return h.next.RoundTrip(req)
	}
	if h.cancel != nil {
		h.cancel()
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: http.StatusText(h.status), StatusCode: h.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"X-Amz-Request-Id": {"interposed"}, "X-Amz-Bucket-Region": {"eu-west-1"}},
		Body:   http.NoBody, Request: req,
	}, nil
}

// TestS3HeadUnusualAnswersAsSDK: the direct HEAD answers as the SDK's
// HeadObject does when the answer is a redirect (S3's 301 for a bucket in
// another region: an error, not an object of size 0) or a 304, and when
// the caller's context ends while the request is in flight.
func TestS3HeadUnusualAnswersAsSDK(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "") // the SDK cannot add one to a plain *http.Client
	endpoint := blobtest.StartS3Server(t, testBucket)
	h := &headInterposer{next: http.DefaultTransport}
	cfg := blobtest.Config(endpoint, testBucket, "unusual")
	cfg.HTTPClient = &http.Client{Transport: h}
	s, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "obj", "present")
	for _, status := range []int{http.StatusMovedPermanently, http.StatusNotModified, http.StatusTemporaryRedirect} {
		h.status = status
		sdkInfo, sdkErr := s.HeadSDK(context.Background(), "obj")
		info, err := s.Head(context.Background(), "obj")
		if err == nil {
			t.Errorf("Head answered %d: %+v, want an error", status, info)
		}
		sameAnswer(t, http.StatusText(status), sdkInfo, sdkErr, info, err)
	}
	h.status = 0
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	sdkInfo, sdkErr := s.HeadSDK(ctx, "obj")
	ctx, cancel = context.WithCancel(context.Background())
	h.cancel = cancel
	info, err := s.Head(ctx, "obj")
	sameAnswer(t, "cancelled in flight", sdkInfo, sdkErr, info, err)
}
