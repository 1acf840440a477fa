package blobstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// directPresigner presigns upload URLs without the S3 presign client's
// middleware stack (about 365 allocations and 74 µs a URL, most of it
// building and running that stack; an upload-slots request presigns up to
// a few hundred).
//
// The URL of an object is learnt once from the SDK itself: the first call
// presigns a probe key through the presign client, and everything before
// that key in its URL (scheme, host, path-style bucket) is the base every
// later URL starts with; endpoint resolution, path or virtual-hosted style
// and FIPS or dual-stack settings stay the SDK's. Keys are checked to
// [A-Za-z0-9._-/] before they get here (ValidateKey), so the path needs no
// escaping.
//
// Every URL has one shape: PUT, the If-None-Match header signed, an
// unsigned payload, the query X-Amz-Expires and x-id=PutObject, S3's
// unescaped canonical path. For that shape the SigV4 canonical request is
// written here in one buffer (sign), with the signing key derived once a
// day per credentials: about 2 µs and 5 allocations a URL, where the SDK's
// general signer (v4.Signer.PresignHTTP: it parses the URL, sorts and
// encodes the query and headers, and keeps its key cache under a lock)
// took about 10 µs and 78 (BenchmarkS3PresignPut). The SDK's signer stays
// the reference: each time a signing key is derived (new credentials, a
// new day) one URL is presigned both ways and compared, and if they
// differ this presigner uses the SDK's signer from then on (sdkOnly) and
// tells the store's owner once (S3Config.OnPresignFallback). The
// tests compare the two byte for byte over many keys, times, TTLs and
// credentials (TestDirectPresignMatchesSDK, TestSignMatchesSDKSigner).
type directPresigner struct {
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	now    func() time.Time

	mu   sync.Mutex
	tmpl atomic.Pointer[presignTemplate] // nil until learnt

	key     atomic.Pointer[signingKey] // the last key derived
	sdkOnly atomic.Bool                // sign disagreed with the SDK once
	// onFallback, if set, is called once, when sign first disagrees.
	onFallback func()
}

// presignTemplate is what every upload URL of a store shares.
type presignTemplate struct {
	// base is the URL of an object without its key ("http://host/bucket/").
	base string
	// path is base's path: the canonical URI without the key.
	path string
	// host is the canonical Host header: base's host without a default
	// port, as the SDK signs it.
	host string
}

// signingKey is a SigV4 signing key and what it was derived from.
type signingKey struct {
	secret, day, region string
	key                 []byte
	macs                sync.Pool // of hash.Hash: HMACs keyed with key
}

// probeKey is the object key whose SDK-presigned URL gives the base.
const probeKey = "metastore-presign-probe"

// unsignedPayload is the payload hash of a presigned upload: its body is
// not known when the URL is made.
const unsignedPayload = "UNSIGNED-PAYLOAD"

func newDirectPresigner(creds aws.CredentialsProvider, region string, onFallback func()) directPresigner {
	return directPresigner{
		creds:      creds,
		region:     region,
		signer:     newSDKSigner(),
		now:        time.Now,
		onFallback: onFallback,
	}
}

// template answers what every URL shares, presigning the probe key through
// s's presign client the first time.
func (d *directPresigner) template(ctx context.Context, s *S3) (*presignTemplate, error) {
	if t := d.tmpl.Load(); t != nil {
		return t, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.tmpl.Load(); t != nil {
		return t, nil
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(probeKey)})
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, err
	}
	t, err := templateOf(u)
	if err != nil {
		return nil, err
	}
	d.tmpl.Store(t)
	return t, nil
}

// templateOf reads the template of a store's URLs from the URL of its
// probe key.
func templateOf(u *url.URL) (*presignTemplate, error) {
	path, ok := strings.CutSuffix(u.EscapedPath(), "/"+probeKey)
	if !ok {
		return nil, errors.New("the SDK's presigned URL does not end with its key: " + u.Redacted())
	}
	host := u.Host
	if port := u.Port(); (port == "80" && u.Scheme == "http") || (port == "443" && u.Scheme == "https") {
		host = u.Hostname() // as the SDK strips it: an IPv6 literal loses its brackets too
	}
	return &presignTemplate{base: u.Scheme + "://" + u.Host + path + "/", path: path + "/", host: host}, nil
}

// presignPut presigns a PutObject of the object named key (the store's
// prefix included), valid for ttl, conditional on If-None-Match: *.
func (d *directPresigner) presignPut(ctx context.Context, s *S3, key string, ttl time.Duration) (string, http.Header, error) {
	t, err := d.template(ctx, s)
	if err != nil {
		return "", nil, err
	}
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return "", nil, err
	}
	at := d.now().UTC()
	if d.sdkOnly.Load() {
		return sdkPresign(ctx, d.signer, d.region, t, creds, key, ttl, at)
	}
	sk := d.key.Load()
	var dayBuf [8]byte
	day := at.AppendFormat(dayBuf[:0], "20060102")
	if sk == nil || sk.secret != creds.SecretAccessKey || sk.day != string(day) || sk.region != d.region {
		sk = &signingKey{secret: creds.SecretAccessKey, day: string(day), region: d.region,
			key: deriveSigningKey(creds.SecretAccessKey, string(day), d.region)}
		d.key.Store(sk)
		// A new key: check this presigner against the SDK's signer once,
		// a new one: the SDK's caches its derived key by access key id, and
		// would sign with the old secret if only the secret changed.
		mine := sign(t, creds, sk, key, ttl, at)
		sdk, h, err := sdkPresign(ctx, newSDKSigner(), d.region, t, creds, key, ttl, at)
		if err != nil {
			return "", nil, err
		}
		if mine != sdk && d.sdkOnly.CompareAndSwap(false, true) && d.onFallback != nil {
			d.onFallback()
		}
		return sdk, h, nil
	}
	return sign(t, creds, sk, key, ttl, at), http.Header{"If-None-Match": {"*"}}, nil
}

// newSDKSigner is the SDK's SigV4 signer as S3 uses it: the path is not
// escaped again.
func newSDKSigner() *v4.Signer {
	return v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
}

// sdkPresign presigns with the SDK's signer.
func sdkPresign(ctx context.Context, signer *v4.Signer, region string, t *presignTemplate, creds aws.Credentials, key string, ttl time.Duration, at time.Time) (string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		t.base+key+"?X-Amz-Expires="+strconv.FormatInt(int64(ttl/time.Second), 10)+"&x-id=PutObject", nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("If-None-Match", "*")
	u, signed, err := signer.PresignHTTP(ctx, creds, req, unsignedPayload, "s3", region, at)
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

// deriveSigningKey is SigV4's signing key of a day, region and S3.
func deriveSigningKey(secret, day, region string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), day)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, "s3")
	return hmacSHA256(k, "aws4_request")
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// sign presigns the upload of key at at: the SigV4 query-string signature
// of the one request shape this store presigns.
//
// The canonical request is
//
//	PUT
//	<path><key>
//	<query, its parameters sorted by name>
//	host:<host>
//	if-none-match:*
//
//	host;if-none-match
//	UNSIGNED-PAYLOAD
//
// and the URL is base, key, that query and X-Amz-Signature.
func sign(t *presignTemplate, creds aws.Credentials, sk *signingKey, key string, ttl time.Duration, at time.Time) string {
	bp := signBufs.Get().(*[]byte)
	defer signBufs.Put(bp)
	b := (*bp)[:0]

	// The canonical request, its query in SigV4's order (byte order of the
	// encoded names: upper-case X-Amz-* before x-id).
	b = append(b, "PUT\n"...)
	b = append(b, t.path...)
	b = append(b, key...)
	b = append(b, '\n')
	q := len(b)
	b = append(b, "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="...)
	b = appendQueryEscaped(b, creds.AccessKeyID)
	b = append(b, "%2F"...)
	b = append(b, sk.day...)
	b = append(b, "%2F"...)
	b = appendQueryEscaped(b, sk.region)
	b = append(b, "%2Fs3%2Faws4_request&X-Amz-Date="...)
	d := len(b)
	b = at.AppendFormat(b, "20060102T150405Z")
	amzDate := b[d:len(b):len(b)]
	b = append(b, "&X-Amz-Expires="...)
	b = strconv.AppendInt(b, int64(ttl/time.Second), 10)
	if creds.SessionToken != "" {
		b = append(b, "&X-Amz-Security-Token="...)
		b = appendQueryEscaped(b, creds.SessionToken)
	}
	b = append(b, "&X-Amz-SignedHeaders=host%3Bif-none-match&x-id=PutObject"...)
	query := b[q:len(b):len(b)]
	b = append(b, "\nhost:"...)
	b = append(b, t.host...)
	b = append(b, "\nif-none-match:*\n\nhost;if-none-match\n"+unsignedPayload...)
	canonical := sha256.Sum256(b)

	// The URL, then the string to sign after it in the same buffer.
	u := len(b)
	b = append(b, t.base...)
	b = append(b, key...)
	b = append(b, '?')
	b = append(b, query...)
	b = append(b, "&X-Amz-Signature="...)
	s := len(b)
	b = append(b, "AWS4-HMAC-SHA256\n"...)
	b = append(b, amzDate...)
	b = append(b, '\n')
	b = append(b, sk.day...)
	b = append(b, '/')
	b = append(b, sk.region...)
	b = append(b, "/s3/aws4_request\n"...)
	b = hex.AppendEncode(b, canonical[:])
	mac := sk.mac()
	mac.Write(b[s:])
	var sig [sha256.Size]byte
	sum := mac.Sum(sig[:0])
	sk.macs.Put(mac)
	b = hex.AppendEncode(b[:s], sum)
	*bp = b
	return string(b[u:])
}

// signBufs holds sign's buffers.
var signBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// mac returns a reset HMAC-SHA256 keyed with the signing key; put it back
// in k.macs after use.
func (k *signingKey) mac() hash.Hash {
	if m, ok := k.macs.Get().(hash.Hash); ok {
		m.Reset()
		return m
	}
	return hmac.New(sha256.New, k.key)
}

// appendQueryEscaped appends s escaped as SigV4 escapes a query value:
// everything outside A-Z a-z 0-9 - _ . ~ as %XX, upper-case hex.
func appendQueryEscaped(b []byte, s string) []byte {
	const upperHex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b = append(b, c)
		} else {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	return b
}
