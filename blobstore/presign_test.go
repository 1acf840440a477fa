package blobstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// atTime is the SDK's SigV4 signer with the signing time fixed.
type atTime struct {
	signer *v4.Signer
	t      time.Time
}

func (a atTime) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return a.signer.PresignHTTP(ctx, creds, r, payloadHash, service, region, a.t, optFns...)
}

// TestDirectPresignMatchesSDK: an upload URL presigned with the signer
// called directly is the one the SDK's presign client makes for the same
// object, time and credentials, byte for byte, with the same headers to
// send: path-style and virtual-hosted, with and without a prefix, with a
// session token, and several TTLs.
func TestDirectPresignMatchesSDK(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	for name, cfg := range map[string]S3Config{
		"path style":            {Bucket: "bkt", Region: "us-east-1", Endpoint: "http://127.0.0.1:9", PathStyle: true},
		"path style, prefix":    {Bucket: "bkt", Region: "us-east-1", Endpoint: "http://127.0.0.1:9", PathStyle: true, Prefix: "env/prod"},
		"AWS, virtual-hosted":   {Bucket: "my-bucket", Region: "eu-west-1", Prefix: "ms"},
		"endpoint, virtual":     {Bucket: "bkt", Region: "ap-south-1", Endpoint: "https://s3.example.net:9000"},
		"session token":         {Bucket: "bkt", Region: "us-west-2", AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "s3cr3t", SessionToken: "tok/en+=="},
		"static keys, endpoint": {Bucket: "b.with.dots", Region: "us-east-1", Endpoint: "http://10.0.0.1:9000", PathStyle: true, AccessKeyID: "AK", SecretAccessKey: "SK"},
	} {
		t.Run(name, func(t *testing.T) {
			if cfg.AccessKeyID == "" {
				t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
			}
			s, err := NewS3(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.direct.now = func() time.Time { return at }
			sdk := s3.NewPresignClient(s.client, func(o *s3.PresignOptions) {
				o.Presigner = atTime{signer: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }), t: at}
			})
			for _, key := range []string{"job/agg-0/0123456789abcdef", "j/_/x", "a.b-c_d/E/f"} {
				for _, ttl := range []time.Duration{time.Minute, 15 * time.Minute, MaxPresignTTL} {
					gotURL, gotHdr, err := s.PresignPut(context.Background(), key, ttl)
					if err != nil {
						t.Fatal(err)
					}
					want, err := sdk.PresignPutObject(context.Background(), &s3.PutObjectInput{
						Bucket: aws.String(cfg.Bucket), Key: aws.String(s.prefix + key), IfNoneMatch: aws.String("*"),
					}, s3.WithPresignExpires(ttl))
					if err != nil {
						t.Fatal(err)
					}
					if gotURL != want.URL {
						t.Fatalf("%s for %s:\n got %s\nwant %s", key, ttl, gotURL, want.URL)
					}
					wantHdr := want.SignedHeader.Clone()
					wantHdr.Del("Host")
					if len(gotHdr) != len(wantHdr) || gotHdr.Get("If-None-Match") != wantHdr.Get("If-None-Match") {
						t.Fatalf("%s: headers %v, want %v", key, gotHdr, wantHdr)
					}
				}
			}
		})
	}
}

// staticCreds is a credentials provider of fixed credentials that can be
// changed between calls.
type staticCreds struct{ c aws.Credentials }

func (s *staticCreds) Retrieve(context.Context) (aws.Credentials, error) { return s.c, nil }

// TestSignMatchesSDKSigner: sign, the presigner's own SigV4 code, makes
// the URL the SDK's signer makes for the same request, byte for byte, over
// random keys, times (across days), TTLs, regions, hosts (default and
// other ports, IPv6) and credentials (session tokens and key ids with
// characters the query escapes).
func TestSignMatchesSDKSigner(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const keyChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/"
	const anyChars = keyChars + " +=/%&?~:;,@!*()'\"\\é€"
	pick := func(chars string, n int) string {
		r := []rune(chars)
		var b strings.Builder
		for range n {
			b.WriteRune(r[rng.IntN(len(r))])
		}
		return b.String()
	}
	bases := []string{
		"http://127.0.0.1:9000/bkt/", "http://127.0.0.1:80/bkt/", "https://s3.example.net:443/b.with.dots/",
		"https://my-bucket.s3.eu-west-1.amazonaws.com/", "http://[::1]:9000/bkt/", "http://[::1]:80/bkt/pre/",
	}
	for i := range 2000 {
		u, err := url.Parse(bases[i%len(bases)])
		if err != nil {
			t.Fatal(err)
		}
		creds := aws.Credentials{AccessKeyID: "AKID" + pick(keyChars, rng.IntN(8)), SecretAccessKey: pick(anyChars, 1+rng.IntN(40))}
		if rng.IntN(2) == 0 {
			creds.SessionToken = pick(anyChars, 1+rng.IntN(60))
		}
		d := newDirectPresigner(&staticCreds{creds}, []string{"us-east-1", "eu-west-1", "ap-south-1"}[rng.IntN(3)], nil)
		d.now = func() time.Time {
			return time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
		}
		// The template as learnt from a probe URL of that base.
		probe, _ := url.Parse(u.String() + probeKey)
		tmpl, err := templateOf(probe)
		if err != nil {
			t.Fatal(err)
		}
		d.tmpl.Store(tmpl)
		key := "k" + pick(keyChars, rng.IntN(80))
		ttl := time.Duration(1+rng.Int64N(int64(MaxPresignTTL/time.Second))) * time.Second
		at := d.now().UTC()
		day := at.Format("20060102")
		sk := &signingKey{secret: creds.SecretAccessKey, day: day, region: d.region, key: deriveSigningKey(creds.SecretAccessKey, day, d.region)}
		got := sign(tmpl, creds, sk, key, ttl, at)
		want, hdr, err := sdkPresign(context.Background(), newSDKSigner(), d.region, tmpl, creds, key, ttl, at)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s, key %q, creds %+v:\n got %s\nwant %s", u, key, creds, got, want)
		}
		if len(hdr) != 1 || hdr.Get("If-None-Match") != "*" {
			t.Fatalf("SDK's headers: %v", hdr)
		}
	}
}

// loopbackPresigner is a presigner of bucket bkt at 127.0.0.1:9000, path
// style, in us-east-1, whose clock reads *at; its template is learnt
// (returned, and shared with it).
func loopbackPresigner(t *testing.T, creds aws.CredentialsProvider, at *time.Time) (*directPresigner, *presignTemplate) {
	t.Helper()
	d := newDirectPresigner(creds, "us-east-1", nil)
	d.now = func() time.Time { return *at }
	probe, _ := url.Parse("http://127.0.0.1:9000/bkt/" + probeKey)
	tmpl, err := templateOf(probe)
	if err != nil {
		t.Fatal(err)
	}
	d.tmpl.Store(tmpl)
	return &d, tmpl
}

// TestPresignFallsBackToSDK: when sign disagrees with the SDK's signer
// (here: a template with a wrong host), the check made with a new signing
// key notices, every URL is the SDK's, the one of the check and all after
// it, and the store's owner is told once; a presigner that agrees is never
// switched, a new day's key included.
func TestPresignFallsBackToSDK(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	creds := &staticCreds{aws.Credentials{AccessKeyID: "AK", SecretAccessKey: "SK"}}
	ctx := context.Background()
	for _, broken := range []bool{false, true} {
		d, tmpl := loopbackPresigner(t, creds, &at)
		fallbacks := 0
		d.onFallback = func() { fallbacks++ }
		if broken {
			tmpl.host = "127.0.0.1:9001"
		}
		for i := range 3 {
			if i == 2 {
				at = at.Add(24 * time.Hour) // a new day: a new key, checked again
			}
			key := fmt.Sprintf("job/t/%d", i)
			got, _, err := d.presignPut(ctx, nil, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			want, _, _ := sdkPresign(ctx, newSDKSigner(), d.region, tmpl, creds.c, key, time.Minute, at)
			if got != want { // broken: the SDK's URL, not sign's
				t.Fatalf("broken=%v, URL %d:\n got %s\nwant %s", broken, i, got, want)
			}
		}
		if d.sdkOnly.Load() != broken {
			t.Fatalf("broken=%v: sdkOnly %v", broken, d.sdkOnly.Load())
		}
		if want := map[bool]int{false: 0, true: 1}[broken]; fallbacks != want {
			t.Fatalf("broken=%v: the owner was told of the fallback %d times, want %d", broken, fallbacks, want)
		}
	}
}

// TestPresignRotatesSigningKey: one presigner through rotating credentials
// and days gives the SDK's URL every time (the signing key is derived
// again when the secret, or the day, changes).
func TestPresignRotatesSigningKey(t *testing.T) {
	creds := &staticCreds{aws.Credentials{AccessKeyID: "AK1", SecretAccessKey: "SK1"}}
	at := time.Date(2026, 12, 2, 23, 59, 58, 0, time.UTC)
	d, tmpl := loopbackPresigner(t, creds, &at)
	ctx := context.Background()
	for i := range 40 {
		switch i % 10 {
		case 3: // the secret rotates, the key id does not
			creds.c.SecretAccessKey = fmt.Sprintf("SK-%d", i)
		case 6: // a session token appears or goes
			creds.c.SessionToken = map[bool]string{true: "", false: "tok"}[creds.c.SessionToken != ""]
		case 8:
			at = at.Add(time.Second) // across midnight now and then
		}
		key := fmt.Sprintf("job/t/%d", i)
		got, _, err := d.presignPut(ctx, nil, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// A new SDK signer each time: the SDK's caches its derived key by
		// access key id, and would sign with the old secret here.
		want, _, _ := sdkPresign(ctx, newSDKSigner(), d.region, tmpl, creds.c, key, time.Minute, at.UTC())
		if got != want {
			t.Fatalf("call %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if d.sdkOnly.Load() {
		t.Fatal("fell back to the SDK's signer")
	}
}
