package blobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

const (
	// DefaultS3MaxAttempts is how often the SDK's standard retryer tries a
	// request when S3Config.MaxAttempts is zero.
	DefaultS3MaxAttempts = 5
	// DefaultS3Timeout bounds one store call, retries included, when
	// S3Config.Timeout is zero.
	DefaultS3Timeout = 30 * time.Second
	// DefaultS3AttemptTimeout bounds the wait for the response headers of
	// one HTTP attempt, after its request was sent, when
	// S3Config.AttemptTimeout is zero.
	DefaultS3AttemptTimeout = 10 * time.Second
	// DefaultS3ConnectTimeout bounds the TCP connect and the TLS handshake
	// of one connection when S3Config.ConnectTimeout is zero.
	DefaultS3ConnectTimeout = 5 * time.Second
	// MaxPresignTTL is the longest validity of a presigned URL (SigV4's
	// limit).
	MaxPresignTTL = 7 * 24 * time.Hour
	// defaultEndpointRegion is the region used with a custom endpoint when
	// none is configured: S3-compatible servers accept it.
	defaultEndpointRegion = "us-east-1"
)

// S3Config configures an S3 store. Fill it, then call NewS3, which validates
// it.
type S3Config struct {
	// Bucket holds the objects. Required.
	Bucket string
	// Prefix is prepended to every key ("ckpt" and "ckpt/" are the same
	// prefix). Empty: the whole bucket.
	Prefix string
	// Region of the bucket. Empty: from the SDK's default chain
	// (AWS_REGION, shared config), else us-east-1 when Endpoint is set.
	Region string
	// Endpoint is the base URL of an S3-compatible server
	// ("http://127.0.0.1:9000"). Empty: AWS.
	Endpoint string
	// PathStyle addresses buckets as ENDPOINT/BUCKET/KEY instead of
	// BUCKET.ENDPOINT/KEY; most S3-compatible servers need it.
	PathStyle bool
	// AccessKeyID, SecretAccessKey and SessionToken are static credentials.
	// Empty: the SDK's default chain (environment, shared config and
	// credentials files, web identity, container and instance roles).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// MaxAttempts per request for the SDK's standard retryer (1: no
	// retries). Zero: DefaultS3MaxAttempts.
	MaxAttempts int
	// HTTPClient sends the requests. Nil: the SDK's buildable client with
	// ConnectTimeout and AttemptTimeout. Set, those two are not applied.
	HTTPClient *http.Client
	// Timeout bounds each store call, retries and their backoff included:
	// all of a Put, Head, Delete batch, List page or Ping; for Get, the
	// wait for the response headers (reading the body is bounded by the
	// caller's context). Zero: DefaultS3Timeout; negative: no bound beyond
	// the caller's context.
	Timeout time.Duration
	// AttemptTimeout bounds one HTTP attempt's wait for the response
	// headers once its request is written (http.Transport's
	// ResponseHeaderTimeout); the SDK's retryer then tries again, within
	// Timeout. Zero: DefaultS3AttemptTimeout.
	AttemptTimeout time.Duration
	// ConnectTimeout bounds the TCP connect (net.Dialer's Timeout) and the
	// TLS handshake of a new connection. Zero: DefaultS3ConnectTimeout.
	ConnectTimeout time.Duration
	// Observer, if set, is called after every operation.
	Observer Observer
	// OnPresignFallback, if set, is called once if the store's own SigV4
	// presigning ever disagrees with the SDK's signer (presign.go): upload
	// URLs are presigned by the SDK from then on, about five times the
	// CPU per URL.
	OnPresignFallback func()
}

var bucketNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Validate reports the first setting that cannot work.
func (c S3Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("blobstore: s3: bucket is required")
	}
	if !bucketNameRE.MatchString(c.Bucket) || strings.Contains(c.Bucket, "..") {
		return fmt.Errorf("blobstore: s3: invalid bucket name %q: want 3-63 characters of [a-z0-9.-], starting and ending with a letter or digit", c.Bucket)
	}
	if _, err := normalizePrefix(c.Prefix); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("blobstore: s3: endpoint %q is not an http:// or https:// URL", c.Endpoint)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("blobstore: s3: static credentials need both an access key id and a secret access key")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return errors.New("blobstore: s3: a session token needs an access key id and a secret access key")
	}
	if c.MaxAttempts < 0 {
		return fmt.Errorf("blobstore: s3: max attempts %d is negative", c.MaxAttempts)
	}
	if c.AttemptTimeout < 0 {
		return fmt.Errorf("blobstore: s3: attempt timeout %s is negative", c.AttemptTimeout)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("blobstore: s3: connect timeout %s is negative", c.ConnectTimeout)
	}
	return nil
}

// normalizePrefix returns prefix ending with "/", or empty.
func normalizePrefix(prefix string) (string, error) {
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return "", nil
	}
	if problem := keyProblem(p); problem != "" {
		return "", fmt.Errorf("blobstore: s3: prefix: %w", invalidKey(prefix, problem))
	}
	return p + "/", nil
}

// S3 is a Store in an S3 bucket, under a prefix, through aws-sdk-go-v2. It
// works against AWS and S3-compatible servers (set Endpoint and PathStyle).
type S3 struct {
	client   *s3.Client
	presign  *s3.PresignClient
	direct   directPresigner
	dhead    *directHead
	bucket   string
	prefix   string
	timeout  time.Duration
	observer Observer
}

var _ Store = (*S3)(nil)

// NewS3 validates cfg and builds the client. It sends no request; Ping
// checks that the bucket is reachable.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prefix, _ := normalizePrefix(cfg.Prefix)
	attempts := cfg.MaxAttempts
	if attempts == 0 {
		attempts = DefaultS3MaxAttempts
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = attempts })
		}),
		// The SDK's defaults since early 2025 add CRC checksums, as
		// aws-chunked trailers, to every upload that supports them and
		// validate them on downloads. S3-compatible servers that predate
		// that (gofakes3, older MinIO and Ceph) reject or mangle such
		// uploads, so checksums are sent only where an operation requires
		// one (DeleteObjects). Uploads remain protected by the SigV4 payload
		// hash (seekable bodies) or TLS.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	} else {
		opts = append(opts, config.WithHTTPClient(httpClient(cfg)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("blobstore: s3: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		if cfg.Endpoint == "" {
			return nil, errors.New("blobstore: s3: no region: set the region or AWS_REGION")
		}
		awsCfg.Region = defaultEndpointRegion
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	})
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultS3Timeout
	}
	return &S3{
		client:   client,
		presign:  s3.NewPresignClient(client),
		direct:   newDirectPresigner(awsCfg.Credentials, awsCfg.Region, cfg.OnPresignFallback),
		dhead:    newDirectHead(client),
		bucket:   cfg.Bucket,
		prefix:   prefix,
		timeout:  timeout,
		observer: cfg.Observer,
	}, nil
}

// MaxIdleConnsPerHost is how many idle connections to the object store
// the client keeps. The SDK keeps 10; the collector's observation and
// verify HEADs alone run gc.VerifyConcurrency (16) at a time, and every
// connection above the idle limit was closed after its request and dialed
// again for the next (a leader at 64 acking workers spent 3.6% of its CPU
// dialing).
const MaxIdleConnsPerHost = 64

// httpClient is the SDK's buildable HTTP client with cfg's connect and
// attempt timeouts.
func httpClient(cfg S3Config) *awshttp.BuildableClient {
	connect := cmp.Or(cfg.ConnectTimeout, DefaultS3ConnectTimeout)
	attempt := cmp.Or(cfg.AttemptTimeout, DefaultS3AttemptTimeout)
	return awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = connect }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.TLSHandshakeTimeout = connect
			tr.ResponseHeaderTimeout = attempt
			tr.MaxIdleConnsPerHost = MaxIdleConnsPerHost
			tr.MaxIdleConns = max(tr.MaxIdleConns, MaxIdleConnsPerHost)
		})
}

// Client returns the underlying SDK client, for operations the Store
// interface does not cover.
func (s *S3) Client() *s3.Client { return s.client }

// String returns "s3://bucket/prefix", or "s3://bucket" without a prefix.
func (s *S3) String() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
}

func (s *S3) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return context.WithCancel(ctx)
}

// Ping checks that the bucket exists and the credentials may use it.
func (s *S3) Ping(ctx context.Context) (err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpPing, 1, err, start) }()
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	_, err = s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	var nf *types.NotFound
	var nb *types.NoSuchBucket
	if errors.As(err, &nf) || errors.As(err, &nb) || statusCode(err) == http.StatusNotFound {
		return fmt.Errorf("%w: %s: %w", ErrBucketNotFound, s.bucket, err)
	}
	if denied(err) {
		return s.deniedErr(ctx, "ping", s.String(), err)
	}
	return fmt.Errorf("blobstore: s3 ping %s: %w", s, err)
}

// denied reports whether S3 refused a request for its credentials.
func denied(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
			return true
		}
	}
	return statusCode(err) == http.StatusForbidden
}

// deniedErr wraps a refused request in ErrAccessDenied with the source of
// the credentials the SDK signed it with.
func (s *S3) deniedErr(ctx context.Context, op, what string, err error) error {
	return fmt.Errorf("blobstore: s3 %s %s: %w with credentials from %s: %w", op, what, ErrAccessDenied, s.CredentialSource(ctx), err)
}

// CredentialSource names where the SDK's credentials come from (the
// environment, a shared credentials file, static settings, a role
// provider) and their access key id; never the secret.
func (s *S3) CredentialSource(ctx context.Context) string {
	provider := s.client.Options().Credentials
	if provider == nil {
		return "nowhere (anonymous requests)"
	}
	creds, err := provider.Retrieve(ctx)
	if err != nil {
		return fmt.Sprintf("a provider that failed (%v)", err)
	}
	var where string
	switch src := creds.Source; {
	case src == config.CredentialsSourceName:
		where = "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
	case strings.HasPrefix(src, "SharedConfigCredentials: "):
		where = "the shared credentials file " + strings.TrimPrefix(src, "SharedConfigCredentials: ")
	case src == credentials.StaticCredentialsName:
		where = "static settings of the store"
	case src == "":
		where = "an unnamed provider"
	default:
		where = "the SDK provider " + src
	}
	return fmt.Sprintf("%s, access key id %s", where, creds.AccessKeyID)
}

// Put uploads body with one PutObject. A body that is an io.Seeker is
// signed with its SHA-256 and can be resent by the SDK's retries; any other
// body is sent as UNSIGNED-PAYLOAD and a failed attempt is not retried.
func (s *S3) Put(ctx context.Context, key string, body io.Reader, size int64) (err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpPut, 1, err, start) }()
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := checkSize(size); err != nil {
		return err
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.prefix + key),
		ContentLength: aws.Int64(size),
	}
	var optFns []func(*s3.Options)
	var exact *exactReader
	if rs, ok := body.(io.ReadSeeker); ok {
		n, err := remaining(rs)
		if err != nil {
			return fmt.Errorf("blobstore: s3 put %q: %w", key, err)
		}
		if n != size {
			return fmt.Errorf("blobstore: s3 put %q: %w: body holds %d bytes, declared %d", key, ErrSizeMismatch, n, size)
		}
		in.Body = rs
	} else {
		exact = newExactReader(body, size)
		if size == 0 {
			// The SDK sends no body for a zero length, so check here
			// that there is none.
			if _, err := exact.Read(make([]byte, 1)); err != io.EOF {
				return fmt.Errorf("blobstore: s3 put %q: %w", key, err)
			}
		} else {
			in.Body = exact
		}
		optFns = append(optFns, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	_, err = s.client.PutObject(ctx, in, optFns...)
	if err != nil {
		if exact != nil && exact.err != nil && errors.Is(exact.err, ErrSizeMismatch) {
			return fmt.Errorf("blobstore: s3 put %q: %w", key, exact.err)
		}
		return s.mapErr("put", key, err)
	}
	return nil
}

// remaining returns how many bytes rs holds from its current offset.
func remaining(rs io.Seeker) (int64, error) {
	cur, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	end, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if _, err := rs.Seek(cur, io.SeekStart); err != nil {
		return 0, err
	}
	return end - cur, nil
}

// Get sends one ranged GetObject (no Range header for a whole object).
func (s *S3) Get(ctx context.Context, key string, offset, length int64) (rc io.ReadCloser, err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpGet, 1, err, start) }()
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := checkRange(offset); err != nil {
		return nil, err
	}
	if length == 0 {
		// HTTP cannot ask for zero bytes; check the range against the size.
		return s.emptyAt(ctx, key, offset)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)}
	switch {
	case length < 0 || length > math.MaxInt64-offset:
		if offset > 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", offset))
		}
	default:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	}

	// The timeout covers the wait for the response, not the body: a restore
	// may read a large blob slowly under its own context.
	callCtx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	if s.timeout > 0 {
		timer = time.AfterFunc(s.timeout, cancel)
	}
	out, err := s.client.GetObject(callCtx, in)
	if timer != nil && !timer.Stop() {
		if err == nil {
			_ = out.Body.Close()
		}
		cancel()
		return nil, fmt.Errorf("blobstore: s3 get %q: no response within %s: %w", key, s.timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		if isInvalidRange(err) {
			// S3 answers 416 for a range starting at the end (and for
			// any range of an empty object), which is an empty read here.
			return s.emptyAt(ctx, key, offset)
		}
		return nil, s.mapErr("get", key, err)
	}
	return readCloser{Reader: out.Body, close: func() error {
		err := out.Body.Close()
		cancel()
		return err
	}}, nil
}

// emptyAt returns an empty reader if key exists and offset is at most its
// size.
func (s *S3) emptyAt(ctx context.Context, key string, offset int64) (io.ReadCloser, error) {
	info, err := s.head(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset > info.Size {
		return nil, fmt.Errorf("%w: offset %d is past the end of %s (%d bytes)", ErrInvalidRange, offset, key, info.Size)
	}
	return io.NopCloser(strings.NewReader("")), nil
}

func isInvalidRange(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "InvalidRange" {
		return true
	}
	return statusCode(err) == http.StatusRequestedRangeNotSatisfiable
}

// Head sends one HeadObject, signed and sent without the SDK's middleware
// stack (head.go), with the SDK's retries, timeouts and errors.
func (s *S3) Head(ctx context.Context, key string) (info Info, err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpHead, 1, err, start) }()
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	return s.headDirect(ctx, key)
}

// headDirect is Head through directHead.
func (s *S3) headDirect(ctx context.Context, key string) (Info, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	t, err := s.dhead.template(ctx, s)
	if err != nil {
		return Info{}, s.mapErr("head", key, err)
	}
	info, err := s.dhead.head(ctx, t, s.prefix+key)
	if err != nil {
		return Info{}, s.mapErr("head", key, err)
	}
	info.Key = key
	return info, nil
}

// head is a HeadObject through the SDK's client (Get of an empty range;
// the reference the direct HEAD is tested against).
func (s *S3) head(ctx context.Context, key string) (Info, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		return Info{}, s.mapErr("head", key, err)
	}
	return Info{
		Key:     key,
		Size:    aws.ToInt64(out.ContentLength),
		ModTime: aws.ToTime(out.LastModified),
		ETag:    strings.Trim(aws.ToString(out.ETag), `"`),
	}, nil
}

// ObjectError is the failure S3 reported for one key of a DeleteObjects
// request.
type ObjectError struct {
	Code    string
	Message string
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("blobstore: s3 delete: %s: %s", e.Code, e.Message)
}

// Delete sends DeleteObjects requests in quiet mode, MaxDeleteBatch keys at
// most each. A key S3 reports as NoSuchKey counts as deleted. A batch whose
// request fails puts all its keys in failed; if every batch fails, Delete
// returns the first error instead. The observer is told the number of
// distinct keys deleted.
func (s *S3) Delete(ctx context.Context, keys []string) (failed map[string]error, err error) {
	start := time.Now()
	deleted := 0
	defer func() { s.observer.observe(OpDelete, deleted, err, start) }()
	if err := validateKeys(keys); err != nil {
		return nil, err
	}
	keys = uniqueKeys(keys)
	defer func() {
		if err == nil {
			deleted = len(keys) - len(failed)
		}
	}()
	fail := func(k string, err error) {
		if failed == nil {
			failed = make(map[string]error)
		}
		failed[k] = err
	}
	var (
		firstErr error
		anyOK    bool
	)
	for rest := keys; len(rest) > 0; {
		batch := rest[:min(len(rest), MaxDeleteBatch)]
		rest = rest[len(batch):]
		if err := ctx.Err(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			for _, k := range batch {
				fail(k, err)
			}
			continue
		}
		errs, err := s.deleteBatch(ctx, batch)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			for _, k := range batch {
				fail(k, err)
			}
			continue
		}
		anyOK = true
		for k, e := range errs {
			fail(k, e)
		}
	}
	if firstErr != nil && !anyOK {
		return nil, firstErr
	}
	return failed, nil
}

func (s *S3) deleteBatch(ctx context.Context, batch []string) (map[string]error, error) {
	objects := make([]types.ObjectIdentifier, len(batch))
	for i, k := range batch {
		objects[i] = types.ObjectIdentifier{Key: aws.String(s.prefix + k)}
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(s.bucket),
		Delete: &types.Delete{Objects: objects, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return nil, s.mapErr("delete", fmt.Sprintf("%d keys from %s", len(batch), batch[0]), err)
	}
	var errs map[string]error
	for _, e := range out.Errors {
		code := aws.ToString(e.Code)
		if code == "NoSuchKey" {
			continue
		}
		if errs == nil {
			errs = make(map[string]error)
		}
		key := strings.TrimPrefix(aws.ToString(e.Key), s.prefix)
		errs[key] = &ObjectError{Code: code, Message: aws.ToString(e.Message)}
	}
	return errs, nil
}

// List pages through ListObjectsV2 under the store's prefix plus prefix.
// Objects whose names are not valid keys (say, a console's "folder/"
// marker) cannot have been written through a Store and are skipped.
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	return s.list(ctx, prefix, fn)
}

// ListNames lists the objects whose keys start with prefix, a valid key
// whose last segment may be the start of a name ("job/task/0189ab"), in
// one ListObjectsV2 request per 1,000 objects it matches (NameLister).
func (s *S3) ListNames(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := ValidateKey(prefix); err != nil {
		return err
	}
	return s.list(ctx, prefix, fn)
}

func (s *S3) list(ctx context.Context, prefix string, fn func(Info) error) (err error) {
	start := time.Now()
	n := 0
	defer func() { s.observer.observe(OpList, n, err, start) }()
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.prefix + prefix),
	})
	for p.HasMorePages() {
		page, err := s.listPage(ctx, p)
		if err != nil {
			return s.mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok || ValidateKey(key) != nil {
				continue
			}
			n++
			if err := fn(Info{
				Key:     key,
				Size:    aws.ToInt64(o.Size),
				ModTime: aws.ToTime(o.LastModified),
				ETag:    strings.Trim(aws.ToString(o.ETag), `"`),
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *S3) listPage(ctx context.Context, p *s3.ListObjectsV2Paginator) (*s3.ListObjectsV2Output, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	return p.NextPage(ctx)
}

// PresignPut presigns a PutObject for key, valid for ttl (at least a
// second, at most MaxPresignTTL). The URL does not bind the body, but it
// is conditional: If-None-Match: * is signed into it (the returned header
// carries it, and a request without it fails the signature), so it
// creates the object once and a replay after that is refused (412
// PreconditionFailed) by a server with conditional writes (AWS S3, and
// internal/s3server).
func (s *S3) PresignPut(ctx context.Context, key string, ttl time.Duration) (u string, h http.Header, err error) {
	start := time.Now()
	defer func() { s.observer.observe(OpPresign, 1, err, start) }()
	if err := ValidateKey(key); err != nil {
		return "", nil, err
	}
	if ttl < time.Second || ttl > MaxPresignTTL {
		// X-Amz-Expires counts whole seconds: a shorter ttl would sign 0.
		return "", nil, fmt.Errorf("blobstore: s3 presign %q: ttl %s is not in [1s, %s]", key, ttl, MaxPresignTTL)
	}
	u, h, err = s.direct.presignPut(ctx, s, s.prefix+key, ttl)
	if err != nil {
		return "", nil, fmt.Errorf("blobstore: s3 presign %q: %w", key, err)
	}
	return u, h, nil
}

func statusCode(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// mapErr turns an SDK error into ErrNotFound or ErrBucketNotFound where it
// means that, and wraps it with the operation otherwise.
func (s *S3) mapErr(op, key string, err error) error {
	var (
		api smithy.APIError
		nsk *types.NoSuchKey
		nf  *types.NotFound
		nsb *types.NoSuchBucket
	)
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	switch {
	case errors.As(err, &nsb) || code == "NoSuchBucket":
		return fmt.Errorf("blobstore: s3 %s %q: %w: %s: %w", op, key, ErrBucketNotFound, s.bucket, err)
	case errors.As(err, &nsk) || errors.As(err, &nf) || code == "NoSuchKey" || code == "NotFound":
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	case (op == "get" || op == "head") && statusCode(err) == http.StatusNotFound:
		// HEAD answers carry no body, hence no code: a 404 is all there is.
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	case denied(err):
		return s.deniedErr(context.Background(), op, strconv.Quote(key), err)
	}
	return fmt.Errorf("blobstore: s3 %s %q: %w", op, key, err)
}
