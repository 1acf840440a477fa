package s3server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Signature Version 4, as S3 checks it:
// https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-authenticating-requests.html
const (
	sigAlgorithm   = "AWS4-HMAC-SHA256"
	amzDateFormat  = "20060102T150405Z"
	unsignedBody   = "UNSIGNED-PAYLOAD"
	maxClockSkew   = 15 * time.Minute
	maxPresignSecs = 7 * 24 * 60 * 60
	// maxHashedBody bounds the body the server buffers to check its
	// declared SHA-256.
	maxHashedBody = 1 << 30
)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// verifier checks SigV4 signatures against one pair of credentials.
type verifier struct {
	accessKey string
	secret    string
	now       func() time.Time
}

// sigParts is what a request says about its signature.
type sigParts struct {
	credential    string
	signedHeaders string
	signature     string
	amzDate       string
	payloadHash   string
	presigned     bool
}

// verify returns nil if r is signed with the verifier's credentials, else
// the error S3 would answer. A request whose payload hash is a SHA-256 has
// its body buffered and checked.
func (v *verifier) verify(r *http.Request) *s3Error {
	p, e := v.parse(r)
	if e != nil {
		return e
	}
	scope, e := v.checkCredential(p)
	if e != nil {
		return e
	}
	uri, query, headers, e := canonicalParts(r, p)
	if e != nil {
		return e
	}
	canonical := strings.Join([]string{r.Method, uri, query, headers, p.signedHeaders, p.payloadHash}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	toSign := strings.Join([]string{sigAlgorithm, p.amzDate, scope, hex.EncodeToString(sum[:])}, "\n")
	want := hex.EncodeToString(hmacSHA256(v.signingKey(scope), toSign))
	if !hmac.Equal([]byte(want), []byte(p.signature)) {
		return &s3Error{status: http.StatusForbidden, code: "SignatureDoesNotMatch",
			msg: "The request signature we calculated does not match the signature you provided. Check your key and signing method."}
	}
	if sha256Hex.MatchString(p.payloadHash) {
		return checkBody(r, p.payloadHash)
	}
	return nil
}

func (v *verifier) parse(r *http.Request) (sigParts, *s3Error) {
	q := r.URL.Query()
	if auth := r.Header.Get("Authorization"); auth != "" {
		rest, ok := strings.CutPrefix(auth, sigAlgorithm+" ")
		if !ok {
			return sigParts{}, &s3Error{status: http.StatusBadRequest, code: "InvalidArgument",
				msg: "Unsupported Authorization Type: only " + sigAlgorithm + " is accepted"}
		}
		p := sigParts{amzDate: r.Header.Get("X-Amz-Date"), payloadHash: r.Header.Get("X-Amz-Content-Sha256")}
		for field := range strings.SplitSeq(rest, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(field), "=")
			switch k {
			case "Credential":
				p.credential = val
			case "SignedHeaders":
				p.signedHeaders = val
			case "Signature":
				p.signature = val
			}
		}
		if p.credential == "" || p.signedHeaders == "" || p.signature == "" {
			return sigParts{}, &s3Error{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed",
				msg: "The authorization header is malformed: it needs Credential, SignedHeaders and Signature"}
		}
		if p.payloadHash == "" {
			return sigParts{}, &s3Error{status: http.StatusBadRequest, code: "InvalidRequest",
				msg: "Missing required header for this request: x-amz-content-sha256"}
		}
		t, err := time.Parse(amzDateFormat, p.amzDate)
		if err != nil {
			return sigParts{}, &s3Error{status: http.StatusForbidden, code: "AccessDenied",
				msg: "AWS authentication requires a valid X-Amz-Date header"}
		}
		if d := v.now().Sub(t); d > maxClockSkew || d < -maxClockSkew {
			return sigParts{}, &s3Error{status: http.StatusForbidden, code: "RequestTimeTooSkewed",
				msg: "The difference between the request time and the current time is too large."}
		}
		return p, nil
	}
	if q.Has("X-Amz-Signature") || q.Has("X-Amz-Algorithm") {
		if q.Get("X-Amz-Algorithm") != sigAlgorithm {
			return sigParts{}, &s3Error{status: http.StatusBadRequest, code: "AuthorizationQueryParametersError",
				msg: "X-Amz-Algorithm only supports " + sigAlgorithm}
		}
		p := sigParts{
			credential:    q.Get("X-Amz-Credential"),
			signedHeaders: q.Get("X-Amz-SignedHeaders"),
			signature:     q.Get("X-Amz-Signature"),
			amzDate:       q.Get("X-Amz-Date"),
			payloadHash:   unsignedBody,
			presigned:     true,
		}
		if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" {
			p.payloadHash = h
		}
		t, err := time.Parse(amzDateFormat, p.amzDate)
		expires, eerr := strconv.Atoi(q.Get("X-Amz-Expires"))
		if p.credential == "" || p.signedHeaders == "" || p.signature == "" || err != nil ||
			eerr != nil || expires <= 0 || expires > maxPresignSecs {
			return sigParts{}, &s3Error{status: http.StatusBadRequest, code: "AuthorizationQueryParametersError",
				msg: "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters, with X-Amz-Expires in [1, 604800]"}
		}
		now := v.now()
		if now.After(t.Add(time.Duration(expires) * time.Second)) {
			return sigParts{}, &s3Error{status: http.StatusForbidden, code: "AccessDenied", msg: "Request has expired"}
		}
		if t.Sub(now) > maxClockSkew {
			return sigParts{}, &s3Error{status: http.StatusForbidden, code: "AccessDenied", msg: "Request is not valid yet"}
		}
		return p, nil
	}
	return sigParts{}, &s3Error{status: http.StatusForbidden, code: "AccessDenied",
		msg: "Anonymous access is forbidden: sign the request with AWS Signature Version 4"}
}

// checkCredential checks "AKID/DATE/REGION/s3/aws4_request" and returns
// the scope after the access key id.
func (v *verifier) checkCredential(p sigParts) (string, *s3Error) {
	parts := strings.Split(p.credential, "/")
	if len(parts) != 5 || parts[3] != "s3" || parts[4] != "aws4_request" || parts[2] == "" {
		return "", &s3Error{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed",
			msg: fmt.Sprintf("malformed credential %q: want ACCESS_KEY/DATE/REGION/s3/aws4_request", p.credential)}
	}
	if parts[0] != v.accessKey {
		return "", &s3Error{status: http.StatusForbidden, code: "InvalidAccessKeyId",
			msg: "The AWS Access Key Id you provided does not exist in our records."}
	}
	if len(p.amzDate) < 8 || parts[1] != p.amzDate[:8] {
		return "", &s3Error{status: http.StatusForbidden, code: "SignatureDoesNotMatch",
			msg: "The credential date does not match the request date."}
	}
	return strings.Join(parts[1:], "/"), nil
}

func (v *verifier) signingKey(scope string) []byte {
	parts := strings.Split(scope, "/") // DATE/REGION/SERVICE/aws4_request
	k := hmacSHA256([]byte("AWS4"+v.secret), parts[0])
	k = hmacSHA256(k, parts[1])
	k = hmacSHA256(k, parts[2])
	return hmacSHA256(k, parts[3])
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// canonicalParts builds the canonical URI, query string and headers block
// (each header line ending in "\n") from the request as received.
func canonicalParts(r *http.Request, p sigParts) (uri, query, headers string, e *s3Error) {
	uri = r.URL.EscapedPath()
	if strings.HasPrefix(r.RequestURI, "/") {
		uri, _, _ = strings.Cut(r.RequestURI, "?") // the path exactly as sent
	}
	if uri == "" {
		uri = "/"
	}

	type param struct{ k, v string }
	var params []param
	for field := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if field == "" {
			continue
		}
		k, val, _ := strings.Cut(field, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(val)
		if err1 != nil || err2 != nil {
			return "", "", "", &s3Error{status: http.StatusBadRequest, code: "InvalidArgument", msg: "malformed query string"}
		}
		if p.presigned && dk == "X-Amz-Signature" {
			continue
		}
		params = append(params, param{uriEncode(dk), uriEncode(dv)})
	}
	slices.SortFunc(params, func(a, b param) int {
		if c := strings.Compare(a.k, b.k); c != 0 {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	var qb strings.Builder
	for i, prm := range params {
		if i > 0 {
			qb.WriteByte('&')
		}
		qb.WriteString(prm.k)
		qb.WriteByte('=')
		qb.WriteString(prm.v)
	}

	names := strings.Split(p.signedHeaders, ";")
	if !slices.Contains(names, "host") {
		return "", "", "", &s3Error{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed",
			msg: "the host header must be signed"}
	}
	var hb strings.Builder
	for _, name := range names {
		var vals []string
		switch name {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = r.Header.Values("Content-Length")
			if len(vals) == 0 && r.ContentLength >= 0 {
				vals = []string{strconv.FormatInt(r.ContentLength, 10)}
			}
		default:
			vals = r.Header.Values(name)
		}
		hb.WriteString(name)
		hb.WriteByte(':')
		for i, val := range vals {
			if i > 0 {
				hb.WriteByte(',')
			}
			hb.WriteString(strings.Join(strings.Fields(val), " "))
		}
		hb.WriteByte('\n')
	}
	return uri, qb.String(), hb.String(), nil
}

// uriEncode is SigV4's URI encoding: every byte but A-Z a-z 0-9 - _ . ~ as
// %XX with upper-case hex.
func uriEncode(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// checkBody buffers the body and compares its SHA-256 with the signed one.
func checkBody(r *http.Request, want string) *s3Error {
	if r.Body == nil {
		r.Body = http.NoBody
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxHashedBody+1))
	_ = r.Body.Close()
	if err != nil {
		return &s3Error{status: http.StatusBadRequest, code: "IncompleteBody", msg: err.Error()}
	}
	if len(body) > maxHashedBody {
		return &s3Error{status: http.StatusBadRequest, code: "EntityTooLarge",
			msg: "this test server checks signed payloads of at most 1 GiB; use UNSIGNED-PAYLOAD"}
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != want {
		return &s3Error{status: http.StatusBadRequest, code: "XAmzContentSHA256Mismatch",
			msg: "The provided 'x-amz-content-sha256' header does not match what was computed."}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}
