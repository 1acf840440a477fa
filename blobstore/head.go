package blobstore

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyrand "github.com/aws/smithy-go/rand"
	smithytime "github.com/aws/smithy-go/time"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// directHead sends HeadObject requests signed with the SDK's SigV4 signer
// called directly, instead of through the S3 client's middleware stack
// (the leader HEADs every new blob after its ack; through the stack a
// HEAD cost 409 allocations and 55-65 µs of the client's CPU, directly 74
// and 11-16 µs, BenchmarkS3Head).
//
// What the SDK would send is learnt once from the SDK itself: the first
// call runs a HeadObject of a probe key through the client with an HTTP
// client that records the request and sends nothing. Its URL gives the
// base of every object URL (scheme, host, path-style bucket: endpoint
// resolution stays the SDK's), its Authorization header the signing
// region and service, and its other headers (User-Agent, Accept-Encoding,
// X-Amz-Content-Sha256) are sent as they are. What changes from request to
// request is made here as the SDK makes it: Amz-Sdk-Invocation-Id (a
// random UUID per call), Amz-Sdk-Request (attempt=N; max=M), X-Amz-Date,
// X-Amz-Security-Token and Authorization (the signer); the request is the
// one the SDK sends, header for header (TestDirectHeadMatchesSDK).
//
// The request goes through the HTTP client the S3 client uses (the same
// transport, connection pool and attempt timeouts), attempts are retried
// with the client's retryer (the standard retryer NewS3 configures,
// sharing its retry quota with the SDK's calls) as the SDK's retry
// middleware does, and failures are the error values the SDK returns, so
// mapErr, Health and the metrics see the same errors. Not reproduced: the
// SDK's clock-skew correction (a skew the SDK learnt from other calls is
// not applied to these signatures), and its tracing and operation metrics,
// which this store does not use.
type directHead struct {
	signer  *v4.Signer
	creds   aws.CredentialsProvider
	http    aws.HTTPClient
	retryer aws.RetryerV2
	now     func() time.Time
	// newID returns the invocation id of a call (a UUID v4).
	newID func() (string, error)

	mu   sync.Mutex                   // held while learning tmpl
	tmpl atomic.Pointer[headTemplate] // nil until learnt
}

// headTemplate is what the SDK sends for a HeadObject, learnt once.
type headTemplate struct {
	// base is the URL of an object without its key ("http://host/bucket/").
	base string
	// header holds the headers that are the same for every request; the
	// slices are shared, never modified.
	header http.Header
	// region and service are the signing scope; anonymous: the SDK did
	// not sign (no credentials), so neither does directHead.
	region, service string
	anonymous       bool
}

// emptyPayloadHash is the SHA-256 of an empty body, the payload hash of a
// HEAD request.
const emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// perRequestHeaders are the headers the SDK sets anew for each request or
// attempt; a template never carries them.
var perRequestHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "Amz-Sdk-Invocation-Id", "Amz-Sdk-Request"}

func newDirectHead(client *s3.Client) *directHead {
	o := client.Options()
	r, ok := o.Retryer.(aws.RetryerV2)
	if !ok {
		r = retryerV2{o.Retryer}
	}
	return &directHead{
		signer:  v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }),
		creds:   o.Credentials,
		http:    o.HTTPClient,
		retryer: r,
		now:     time.Now,
		newID:   smithyrand.NewUUID(crand.Reader).GetUUID,
	}
}

// retryerV2 is an aws.Retryer used as an aws.RetryerV2, as the SDK wraps
// one.
type retryerV2 struct{ aws.Retryer }

func (r retryerV2) GetAttemptToken(context.Context) (func(error) error, error) {
	return r.GetInitialToken(), nil
}

// captureClient records the request the SDK would send and sends nothing:
// it cancels the call's context, so the SDK neither retries nor waits.
type captureClient struct {
	cancel context.CancelFunc
	req    *http.Request
}

var errCaptured = errors.New("blobstore: probe request captured, not sent")

func (c *captureClient) Do(r *http.Request) (*http.Response, error) {
	c.req = r.Clone(context.Background())
	c.cancel()
	return nil, errCaptured
}

// template returns the learnt template, learning it on the first call. An
// error is the SDK's own for the probe (say, credentials that cannot be
// retrieved): the HeadObject it stands for would have failed alike.
func (d *directHead) template(ctx context.Context, s *S3) (*headTemplate, error) {
	if t := d.tmpl.Load(); t != nil {
		return t, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.tmpl.Load(); t != nil {
		return t, nil
	}
	probeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	capture := &captureClient{cancel: cancel}
	_, err := s.client.HeadObject(probeCtx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(probeKey)},
		func(o *s3.Options) { o.HTTPClient = capture })
	if capture.req == nil {
		if err == nil {
			err = errors.New("the SDK sent no request")
		}
		return nil, err
	}
	t, err := newHeadTemplate(capture.req)
	if err != nil {
		return nil, err
	}
	d.tmpl.Store(t)
	return t, nil
}

func newHeadTemplate(r *http.Request) (*headTemplate, error) {
	if r.Method != http.MethodHead || r.URL.RawQuery != "" {
		return nil, fmt.Errorf("blobstore: the SDK's HeadObject is %s %s, not a plain HEAD", r.Method, r.URL.Redacted())
	}
	u := *r.URL
	path, ok := strings.CutSuffix(u.EscapedPath(), "/"+probeKey)
	if !ok {
		return nil, errors.New("blobstore: the SDK's HeadObject URL does not end with its key: " + u.Redacted())
	}
	t := &headTemplate{base: u.Scheme + "://" + u.Host + path + "/", header: r.Header.Clone()}
	for _, h := range perRequestHeaders {
		delete(t.header, h)
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		t.anonymous = true
		return t, nil
	}
	// AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request, ...
	_, cred, ok := strings.Cut(auth, "Credential=")
	cred, _, _ = strings.Cut(cred, ",")
	scope := strings.Split(cred, "/")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !ok || len(scope) != 5 || scope[4] != "aws4_request" {
		return nil, errors.New("blobstore: the SDK's HeadObject is not signed with SigV4 as expected")
	}
	t.region, t.service = scope[2], scope[3]
	return t, nil
}

// request returns the signed request of one attempt: the object named key
// (prefix included), the call's invocation id, its attempt number, signed
// at time at.
func (d *directHead) request(ctx context.Context, t *headTemplate, key, id string, attempt, maxAttempts int, at time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, t.base+key, nil)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(t.header)+len(perRequestHeaders))
	for k, v := range t.header {
		h[k] = v
	}
	h["Amz-Sdk-Invocation-Id"] = []string{id}
	h["Amz-Sdk-Request"] = []string{attemptHeader(attempt, maxAttempts)}
	req.Header = h
	if t.anonymous {
		return req, nil
	}
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to retrieve credentials: %w", err)
	}
	if err := d.signer.SignHTTP(ctx, creds, req, emptyPayloadHash, t.service, t.region, at.UTC()); err != nil {
		return nil, err
	}
	return req, nil
}

// attemptHeader is the Amz-Sdk-Request value of the SDK's retry middleware.
func attemptHeader(attempt, maxAttempts int) string {
	if maxAttempts == 0 {
		return "attempt=" + strconv.Itoa(attempt)
	}
	return "attempt=" + strconv.Itoa(attempt) + "; max=" + strconv.Itoa(maxAttempts)
}

// head runs one HeadObject of key (prefix included) with the retryer, as
// the SDK's retry middleware does, and returns the object's size, ETag and
// modification time, or the error the SDK would return.
func (d *directHead) head(ctx context.Context, t *headTemplate, key string) (Info, error) {
	id, err := d.newID()
	if err != nil {
		return Info{}, opErr(err)
	}
	maxAttempts := d.retryer.MaxAttempts()
	releaseRetry := nopRelease
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return Info{}, opErr(err)
		}
		releaseAttempt := nopRelease
		if attempt == 1 {
			// The standard retryer refills its quota after a first
			// attempt that succeeds; later ones refund their retry token.
			if releaseAttempt, err = d.retryer.GetAttemptToken(ctx); err != nil {
				return Info{}, opErr(fmt.Errorf("failed to get retry Send token, %w", err))
			}
		}
		info, err := d.attempt(ctx, t, key, id, attempt, maxAttempts)
		if rerr := releaseRetry(err); rerr != nil && err != nil {
			return Info{}, opErr(fmt.Errorf("failed to release retry token after request error, %w", err))
		}
		if rerr := releaseAttempt(err); rerr != nil && err != nil {
			return Info{}, opErr(fmt.Errorf("failed to release initial token after request error, %w", err))
		}
		if err == nil {
			return info, nil
		}
		if !d.retryer.IsErrorRetryable(err) {
			return Info{}, opErr(err)
		}
		if maxAttempts > 0 && attempt >= maxAttempts {
			return Info{}, opErr(&retry.MaxAttemptsError{Attempt: attempt, Err: err})
		}
		var terr error
		if releaseRetry, terr = d.retryer.GetRetryToken(ctx, err); terr != nil {
			return Info{}, opErr(errors.Join(err, terr))
		}
		delay, derr := d.retryer.RetryDelay(attempt, err)
		if derr != nil {
			return Info{}, opErr(derr)
		}
		if serr := sleep(ctx, retryAfter(delay, err)); serr != nil {
			return Info{}, opErr(&aws.RequestCanceledError{Err: serr})
		}
	}
}

func nopRelease(error) error { return nil }

// opErr wraps err as the SDK's HeadObject does.
func opErr(err error) error {
	return &smithy.OperationError{ServiceID: s3.ServiceID, OperationName: "HeadObject", Err: err}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter clamps a backoff to an x-amz-retry-after answer (milliseconds)
// within [backoff, backoff+5s], as the SDK's retry middleware does.
func retryAfter(backoff time.Duration, err error) time.Duration {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return backoff
	}
	v := re.Response.Header.Get("X-Amz-Retry-After")
	if v == "" {
		return backoff
	}
	ms, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || ms < 0 {
		return backoff
	}
	return min(max(time.Duration(ms)*time.Millisecond, backoff), backoff+5*time.Second)
}

// attempt sends one request and reads its answer.
func (d *directHead) attempt(ctx context.Context, t *headTemplate, key, id string, attempt, maxAttempts int) (Info, error) {
	req, err := d.request(ctx, t, key, id, attempt, maxAttempts, d.now())
	if err != nil {
		return Info{}, err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		// As smithy's HTTP client handler: a failed send, or the
		// call's end.
		err = &smithyhttp.RequestSendError{Err: err}
		if ctx.Err() != nil {
			err = &smithy.CanceledError{Err: ctx.Err()}
		}
		return Info{}, responseError(&http.Response{Header: http.Header{}, Body: http.NoBody}, err)
	}
	_ = resp.Body.Close() // a HEAD answer has no body
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return Info{}, responseError(resp, headAPIError(resp.StatusCode))
	}
	info, err := headInfo(resp.Header)
	if err != nil {
		return Info{}, responseError(resp, &smithy.DeserializationError{Err: fmt.Errorf("failed to decode response with invalid Http bindings, %w", err)})
	}
	return info, nil
}

// headAPIError is the error the SDK's HeadObject deserializer makes of an
// answer with status code: a HEAD answer has no body, so the code and the
// message come from the status.
func headAPIError(code int) error {
	text := http.StatusText(code)
	errCode, msg := strings.ReplaceAll(text, " ", ""), text
	if errCode == "" && msg == "" {
		errCode, msg = "UnknownError", "UnknownError"
	}
	if strings.EqualFold(errCode, "NotFound") {
		return &types.NotFound{}
	}
	return &smithy.GenericAPIError{Code: errCode, Message: msg}
}

// headInfo reads the answer's headers as the SDK's deserializer does.
func headInfo(h http.Header) (Info, error) {
	var info Info
	if v := h.Values("Content-Length"); len(v) != 0 {
		n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 0, 64)
		if err != nil {
			return Info{}, err
		}
		info.Size = n
	}
	if v := h.Values("ETag"); len(v) != 0 {
		info.ETag = strings.Trim(strings.TrimSpace(v[0]), `"`)
	}
	if v := h.Values("Last-Modified"); len(v) != 0 {
		t, err := smithytime.ParseHTTPDate(strings.TrimSpace(v[0]))
		if err != nil {
			return Info{}, err
		}
		info.ModTime = t
	}
	return info, nil
}

// responseError wraps err with the answer, its request id and host id, as
// the S3 client's error wrapper does (service/internal/s3shared, which
// cannot be imported).
func responseError(resp *http.Response, err error) error {
	return &s3ResponseError{
		ResponseError: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: err},
			RequestID:     resp.Header.Get("X-Amz-Request-Id"),
		},
		HostID: resp.Header.Get("X-Amz-Id-2"),
	}
}

// s3ResponseError is s3shared.ResponseError: the same fields, message and
// unwrapping.
type s3ResponseError struct {
	*awshttp.ResponseError
	HostID string
}

func (e *s3ResponseError) ServiceHostID() string { return e.HostID }

func (e *s3ResponseError) Error() string {
	return fmt.Sprintf("https response error StatusCode: %d, RequestID: %s, HostID: %s, %v",
		e.Response.StatusCode, e.RequestID, e.HostID, e.Err)
}

func (e *s3ResponseError) As(target any) bool { return errors.As(e.ResponseError, target) }
