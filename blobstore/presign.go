package blobstore

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// directPresigner presigns upload URLs with the SDK's SigV4 signer called
// directly, instead of through the S3 presign client's middleware stack
// (about 365 allocations and 74 µs a URL, most of it building and running
// that stack; an upload-slots request presigns up to a few hundred).
//
// The URL of an object is learnt once from the SDK itself: the first call
// presigns a probe key through the presign client, and everything before
// that key in its URL (scheme, host, path-style bucket) is the base every
// later URL starts with; endpoint resolution, path or virtual-hosted style
// and FIPS or dual-stack settings stay the SDK's. Keys are checked to
// [A-Za-z0-9._-/] before they get here (ValidateKey), so the path needs no
// escaping. The signature is what the presign client makes: the same query
// (X-Amz-Expires, x-id=PutObject), the If-None-Match header signed, an
// unsigned payload, S3's unescaped canonical path (TestDirectPresignMatchesSDK).
type directPresigner struct {
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	now    func() time.Time

	mu   sync.Mutex
	base string // "" until learnt
}

// probeKey is the object key whose SDK-presigned URL gives the base.
const probeKey = "metastore-presign-probe"

// unsignedPayload is the payload hash of a presigned upload: its body is
// not known when the URL is made.
const unsignedPayload = "UNSIGNED-PAYLOAD"

func newDirectPresigner(creds aws.CredentialsProvider, region string) directPresigner {
	return directPresigner{
		creds:  creds,
		region: region,
		signer: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }),
		now:    time.Now,
	}
}

// urlBase answers the base of object URLs, presigning the probe key through
// s's presign client the first time.
func (d *directPresigner) urlBase(ctx context.Context, s *S3) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.base != "" {
		return d.base, nil
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(probeKey)})
	if err != nil {
		return "", err
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", err
	}
	path, ok := strings.CutSuffix(u.EscapedPath(), "/"+probeKey)
	if !ok {
		return "", errors.New("the SDK's presigned URL does not end with its key: " + u.Redacted())
	}
	d.base = u.Scheme + "://" + u.Host + path + "/"
	return d.base, nil
}

// presignPut presigns a PutObject of the object named key (the store's
// prefix included), valid for ttl, conditional on If-None-Match: *.
func (d *directPresigner) presignPut(ctx context.Context, s *S3, key string, ttl time.Duration) (string, http.Header, error) {
	base, err := d.urlBase(ctx, s)
	if err != nil {
		return "", nil, err
	}
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return "", nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		base+key+"?X-Amz-Expires="+strconv.FormatInt(int64(ttl/time.Second), 10)+"&x-id=PutObject", nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("If-None-Match", "*")
	u, signed, err := d.signer.PresignHTTP(ctx, creds, req, unsignedPayload, "s3", d.region, d.now().UTC())
	if err != nil {
		return "", nil, err
	}
	h := make(http.Header, len(signed))
	for k, v := range signed {
		if !strings.EqualFold(k, "Host") { // carried by the URL
			h[http.CanonicalHeaderKey(k)] = v
		}
	}
	return u, h, nil
}
