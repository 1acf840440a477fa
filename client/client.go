package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metastore/metastore/wire"
)

// HeaderServedBy names the member that answered. A forwarded answer
// carries the forwarding member first and the leader last.
const HeaderServedBy = "X-Metastore-Served-By"

// Defaults of Config.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxAttempts    = 8
	DefaultBackoffBase    = 50 * time.Millisecond
	DefaultBackoffMax     = 2 * time.Second
	// AwaitWait is the wait of one blocking query of AwaitEpoch; the
	// request may take this long plus RequestTimeout.
	AwaitWait = 30 * time.Second
)

// maxResponseBytes bounds the JSON answer read (a restore plan of a large
// manifest is the biggest).
const maxResponseBytes = 256 << 20

// Config configures a Client.
type Config struct {
	// Endpoints are base URLs (http://host:port) of any members. The
	// client talks to one at a time, prefers the leader once it knows it,
	// and moves on when one cannot be reached. Members it learns of from
	// /v1/status are added.
	Endpoints []string
	// HTTPClient sends the requests; nil means a client of its own. Its
	// Timeout should be zero: RequestTimeout bounds each attempt.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt of one request (default 30s). A
	// blocking query adds its wait; a blob read is bounded by it until the
	// answer's headers arrive, then only by the caller's context.
	RequestTimeout time.Duration
	// MaxAttempts bounds the attempts of one call, the first included
	// (default 8).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the jittered exponential backoff
	// between attempts (defaults 50ms and 2s): attempt n waits a random
	// time in [d/2, d] with d = min(BackoffMax, BackoffBase * 2^(n-1)).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// DisableDiscovery keeps the client to Endpoints: it neither adds the
	// members /v1/status lists nor sends to them directly. Set it when the
	// members' advertised addresses are not reachable from the client (a
	// load balancer or proxy in front of the cluster).
	DisableDiscovery bool
	// Logger receives retries (debug) and endpoint changes (debug); nil
	// discards.
	Logger *slog.Logger
	// Token is the bearer token sent to the metastore API
	// (Authorization: Bearer) when the cluster runs with --auth; "" sends
	// none. It is never logged nor put in an error, and never sent to a
	// presigned object-store URL. A 401 or 403 answer is final: it
	// matches ErrUnauthenticated or ErrForbidden and is not retried.
	Token string

	// MaxAckRequests bounds the ack requests the client has in flight at
	// once (default DefaultMaxAckRequests). An ack made while that many
	// are in flight waits, and the acks that waited are sent together in
	// one request (POST /v1/acks) as soon as one is answered: each is
	// still applied, fenced and answered as if it were sent alone, and an
	// ack with nothing in flight ahead of it is sent alone at once, so
	// nothing waits for a batch to fill. A worker process with many tasks
	// then pays one request for the acks of many. -1 sends every ack
	// alone; so does the client for a minute after a member answered
	// that it has no batch route (an older release).
	MaxAckRequests int

	// TLS configures https to the members (LoadTLSConfig reads a CA file
	// and an optional client certificate). It is used by the client's own
	// HTTP client (ignored when HTTPClient is set), and makes a bare
	// host:port endpoint https.
	TLS *tls.Config
}

// Stats counts the requests a client made, retries included.
type Stats struct {
	// MetastoreRequests are requests to the metastore API, blob transfers
	// through /v1/objects excluded.
	MetastoreRequests int64
	// ObjectPuts are blob uploads: PUTs to a presigned object-store URL or
	// to the metastore's /v1/objects endpoint (the local blob store).
	ObjectPuts int64
	// ObjectGets are ranged blob reads (GET /v1/objects/{key}).
	ObjectGets int64
	// ObjectBytesPut and ObjectBytesRead count blob bytes sent and read.
	ObjectBytesPut  int64
	ObjectBytesRead int64
	// Retries counts attempts after the first of a call.
	Retries int64
	// AckBatches counts the requests that carried acks together (POST
	// /v1/acks, Config.MaxAckRequests), AcksBatched the acks they
	// carried; both are in MetastoreRequests' count of requests too.
	AckBatches  int64
	AcksBatched int64
}

// Sub returns s - o, the requests made between two snapshots.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		MetastoreRequests: s.MetastoreRequests - o.MetastoreRequests,
		ObjectPuts:        s.ObjectPuts - o.ObjectPuts,
		ObjectGets:        s.ObjectGets - o.ObjectGets,
		ObjectBytesPut:    s.ObjectBytesPut - o.ObjectBytesPut,
		ObjectBytesRead:   s.ObjectBytesRead - o.ObjectBytesRead,
		Retries:           s.Retries - o.Retries,
		AckBatches:        s.AckBatches - o.AckBatches,
		AcksBatched:       s.AcksBatched - o.AcksBatched,
	}
}

// ObjectRequests is ObjectPuts + ObjectGets.
func (s Stats) ObjectRequests() int64 { return s.ObjectPuts + s.ObjectGets }

// Client is a metastore client. It is safe for concurrent use.
type Client struct {
	cfg    Config
	hc     *http.Client
	logger *slog.Logger

	mu        sync.Mutex
	endpoints []string          // base URLs, configured first
	preferred int               // index into endpoints
	down      map[int]time.Time // endpoints that refused a connection, until when
	byID      map[string]string // member id -> base URL
	refreshed time.Time         // last member refresh

	metastoreReqs, objectPuts, objectGets, bytesPut, bytesRead, retries atomic.Int64
	ackBatches, acksBatched                                             atomic.Int64

	acks ackQueue // acks.go
}

// New returns a client of the members cfg.Endpoints names.
func New(cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("client: Config.Endpoints is empty")
	}
	c := &Client{cfg: cfg, byID: map[string]string{}, down: map[int]time.Time{}}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	for _, e := range cfg.Endpoints {
		base, err := normalizeEndpoint(e, scheme)
		if err != nil {
			return nil, err
		}
		c.addEndpointLocked(base)
	}
	if c.cfg.RequestTimeout <= 0 {
		c.cfg.RequestTimeout = DefaultRequestTimeout
	}
	if c.cfg.MaxAttempts <= 0 {
		c.cfg.MaxAttempts = DefaultMaxAttempts
	}
	if c.cfg.MaxAckRequests == 0 {
		c.cfg.MaxAckRequests = DefaultMaxAckRequests
	}
	if c.cfg.BackoffBase <= 0 {
		c.cfg.BackoffBase = DefaultBackoffBase
	}
	if c.cfg.BackoffMax <= 0 {
		c.cfg.BackoffMax = DefaultBackoffMax
	}
	c.cfg.BackoffMax = max(c.cfg.BackoffMax, c.cfg.BackoffBase)
	c.hc = cfg.HTTPClient
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		if cfg.TLS != nil {
			tr.TLSClientConfig = cfg.TLS.Clone()
		}
		c.hc = &http.Client{Transport: tr}
	}
	c.logger = cfg.Logger
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// normalizeEndpoint turns "host:port" or "http://host:port/" into
// "http://host:port"; a bare host:port gets scheme.
func normalizeEndpoint(e, scheme string) (string, error) {
	e = strings.TrimSpace(e)
	if !strings.Contains(e, "://") {
		e = scheme + "://" + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("client: endpoint %q is not http://host:port", e)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Stats returns the requests made so far.
func (c *Client) Stats() Stats {
	return Stats{
		MetastoreRequests: c.metastoreReqs.Load(),
		ObjectPuts:        c.objectPuts.Load(),
		ObjectGets:        c.objectGets.Load(),
		ObjectBytesPut:    c.bytesPut.Load(),
		ObjectBytesRead:   c.bytesRead.Load(),
		Retries:           c.retries.Load(),
		AckBatches:        c.ackBatches.Load(),
		AcksBatched:       c.acksBatched.Load(),
	}
}

// Endpoints returns the endpoints the client knows, the preferred first.
func (c *Client) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{c.endpoints[c.preferred]}
	for i, e := range c.endpoints {
		if i != c.preferred {
			out = append(out, e)
		}
	}
	return out
}

func (c *Client) addEndpointLocked(base string) int {
	for i, e := range c.endpoints {
		if e == base {
			return i
		}
	}
	c.endpoints = append(c.endpoints, base)
	return len(c.endpoints) - 1
}

// current returns the preferred endpoint.
func (c *Client) current() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preferred, c.endpoints[c.preferred]
}

// rotate moves the preference past endpoint i (if it is still preferred)
// and returns the new one. An endpoint that could not be reached is passed
// over for a while, so a dead member does not use up the attempts of the
// calls that follow.
func (c *Client) rotate(i int, unreachable bool) (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if unreachable {
		c.down[i] = now.Add(max(2*c.cfg.BackoffMax, time.Second))
	}
	if c.preferred == i {
		n := len(c.endpoints)
		next := (i + 1) % n
		for k := 1; k < n; k++ {
			j := (i + k) % n
			if until, ok := c.down[j]; !ok || now.After(until) {
				next = j
				break
			}
		}
		c.preferred = next
		c.logger.Debug("metastore client: moving to the next endpoint", "from", c.endpoints[i], "to", c.endpoints[c.preferred])
	}
	return c.preferred, c.endpoints[c.preferred]
}

// answered records that endpoint i answered, served by the member named in
// the header: the client prefers that member from now on when it knows its
// address, else the endpoint that answered. It reports whether the serving
// member's address is unknown.
func (c *Client) answered(i int, servedBy string) (unknown bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.down, i)
	if c.cfg.DisableDiscovery {
		c.preferred = i
		return false
	}
	if servedBy != "" {
		if base, ok := c.byID[servedBy]; ok {
			c.preferred = c.addEndpointLocked(base)
			return false
		}
	}
	c.preferred = i
	if servedBy != "" && time.Since(c.refreshed) > time.Second {
		c.refreshed = time.Now()
		return true
	}
	return false
}

// learn records the members and leader a status answer names.
func (c *Client) learn(st *wire.Status, scheme string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshed = time.Now()
	for _, m := range st.Members {
		if m.HTTPAddr == "" || m.Suffrage == "none" {
			continue
		}
		base := scheme + "://" + m.HTTPAddr
		if c.cfg.DisableDiscovery && !slices.Contains(c.endpoints, base) {
			continue
		}
		c.byID[m.ID] = base
		c.addEndpointLocked(base)
	}
	if st.LeaderID != "" {
		if base, ok := c.byID[st.LeaderID]; ok {
			c.preferred = c.addEndpointLocked(base)
		}
	}
}

// reqClass says how a request is counted and whether repeating it is safe.
type reqClass int

const (
	classRead reqClass = iota
	classMutation
	classObjectGet
	classObjectPut
)

// request is one API call, resendable as is.
type request struct {
	method string
	path   string // escaped, from /v1
	query  url.Values
	body   []byte
	class  reqClass
	// wait extends the attempt's timeout (blocking queries).
	wait time.Duration
	// stream leaves the answer's body open for the caller (blob reads);
	// the attempt's timeout then covers the headers only.
	stream bool
	// local marks a route any member answers itself (status): its
	// X-Metastore-Served-By names that member, not the leader.
	local bool
	// once marks a mutation that is not idempotent (creating a token):
	// it is repeated only while no attempt can have landed.
	once bool
	// maybeLanded marks a mutation that an earlier request may have
	// applied already (an ack of a batch whose outcome is unknown): a
	// definite refusal then leaves its outcome unknown too.
	maybeLanded bool
}

func (r *request) mutation() bool { return r.method != http.MethodGet && r.method != http.MethodHead }

// result is a successful answer.
type result struct {
	resp *http.Response
	body []byte
	// unknown: an earlier attempt of the mutation may have landed too.
	unknown bool
}

// do sends r until it gets a definite answer or runs out of attempts, and
// decodes a successful JSON answer into out (when not nil and not stream).
func (c *Client) do(ctx context.Context, r *request, out any) (*result, error) {
	unknown := r.maybeLanded
	var last error
	tried := map[int]bool{}
	i, base := c.current()
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			c.retries.Add(1)
		}
		if err := ctx.Err(); err != nil {
			// The caller gave up before this attempt was sent.
			if unknown {
				return nil, &RetryError{Method: r.method, Path: r.path, Attempts: max(attempt-1, 1), Unknown: true, Last: err}
			}
			return nil, fmt.Errorf("metastore: %s %s: %w", r.method, r.path, err)
		}
		tried[i] = true
		res, err := c.attempt(ctx, base, r)
		if err == nil {
			servedBy := ""
			if !r.local {
				servedBy = lastValue(res.resp.Header.Values(HeaderServedBy))
			}
			if c.answered(i, servedBy) && !r.stream {
				c.refreshMembers(ctx, base)
			}
			if dst, ok := ctx.Value(rawAnswerKey{}).(*[]byte); ok && !r.stream {
				*dst = append((*dst)[:0], res.body...)
			}
			if out != nil && !r.stream {
				if err := unmarshal(res.body, out); err != nil {
					return nil, fmt.Errorf("metastore: %s %s: decoding the answer: %w", r.method, r.path, err)
				}
			}
			res.unknown = unknown
			return res, nil
		}
		var ae *APIError
		rotate, retry := false, false
		switch {
		case errors.As(err, &ae):
			retry = ae.Retryable || ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout ||
				ae.Status == http.StatusTooManyRequests
			rotate = ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
			if r.mutation() && retry && outcomeUnknownAnswer(ae) {
				unknown = true
			}
		default:
			// A transport error: the member is unreachable, or the
			// connection broke or timed out after the request was sent.
			retry, rotate = true, true
			if r.mutation() && sentMaybe(err) {
				unknown = true
			}
		}
		last = err
		if r.once && unknown {
			return nil, &RetryError{Method: r.method, Path: r.path, Attempts: attempt, Unknown: true, Last: err}
		}
		if !retry {
			if unknown && !errors.Is(err, ErrInvalid) {
				// An earlier attempt may have landed and caused this
				// answer (a conflict or a not-pending epoch, say): the
				// outcome is still unknown. A malformed request could
				// not have landed before either.
				return nil, &RetryError{Method: r.method, Path: r.path, Attempts: attempt, Unknown: true, Last: err}
			}
			return nil, err // a definite answer
		}
		if ctx.Err() != nil {
			// The caller gave up; an attempt in flight may have landed.
			if unknown {
				return nil, &RetryError{Method: r.method, Path: r.path, Attempts: attempt, Unknown: true, Last: ctx.Err()}
			}
			return nil, fmt.Errorf("metastore: %s %s: %w", r.method, r.path, ctx.Err())
		}
		if attempt >= c.cfg.MaxAttempts {
			return nil, &RetryError{Method: r.method, Path: r.path, Attempts: attempt, Unknown: unknown, Last: last}
		}
		wait := true
		if rotate {
			prev := i
			i, base = c.rotate(i, ae == nil && !sentMaybe(err))
			// Another member not yet tried in this call may answer at
			// once: skip the backoff for a member that cannot be reached.
			if !tried[i] && i != prev && ae == nil && !sentMaybe(err) {
				wait = false
			}
		}
		c.logger.Debug("metastore client: retrying", "method", r.method, "path", r.path, "attempt", attempt, "next", base, "err", err)
		if wait {
			var after time.Duration
			if ae != nil {
				after = ae.RetryAfter
			}
			if err := c.backoff(ctx, attempt, after); err != nil {
				if r.mutation() && unknown {
					return nil, &RetryError{Method: r.method, Path: r.path, Attempts: attempt, Unknown: true, Last: err}
				}
				return nil, fmt.Errorf("metastore: %s %s: %w (last failure: %v)", r.method, r.path, err, last)
			}
		}
		if !rotate {
			// The same member, unless the preference moved meanwhile.
			i, base = c.current()
		}
	}
}

// outcomeUnknownAnswer reports whether an error answer to a mutation leaves
// its outcome open.
func outcomeUnknownAnswer(ae *APIError) bool {
	switch ae.Code {
	case wire.CodeOutcomeUnknown, wire.CodeTimeout:
		return true
	case wire.CodeNoLeader, wire.CodeNotLeader, wire.CodeUnavailable, wire.CodeNotReady:
		return false
	}
	// Not the API's JSON: a proxy's 502 or 504 may have forwarded it.
	return ae.Status == http.StatusBadGateway || ae.Status == http.StatusGatewayTimeout
}

// sentMaybe reports whether a transport error may have happened after the
// request reached the member: anything but a failure to connect.
func sentMaybe(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var dns *net.DNSError
	return !errors.As(err, &dns)
}

func lastValue(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// backoff waits before attempt n+1, at least atLeast (a member's
// Retry-After, capped at maxRetryAfter).
func (c *Client) backoff(ctx context.Context, n int, atLeast time.Duration) error {
	d := c.cfg.BackoffBase
	for i := 1; i < n && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	d = d/2 + rand.N(d/2+1)
	d = max(d, min(atLeast, maxRetryAfter))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt sends r once to base.
func (c *Client) attempt(ctx context.Context, base string, r *request) (*result, error) {
	actx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.cfg.RequestTimeout+r.wait, cancel)
	u := base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(actx, r.method, u, body)
	if err != nil {
		timer.Stop()
		cancel()
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	c.count(r.class)
	resp, err := c.hc.Do(req)
	if err != nil {
		err = timeoutErr(redactURL(err), actx, ctx)
		timer.Stop()
		cancel()
		return nil, err
	}
	if resp.StatusCode == http.StatusOK && r.stream {
		if !timer.Stop() {
			// The timeout fired as the headers arrived.
			resp.Body.Close()
			cancel()
			return nil, timeoutErr(context.DeadlineExceeded, actx, ctx)
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return &result{resp: resp}, nil
	}
	defer func() {
		timer.Stop()
		cancel()
	}()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	resp.Body.Close()
	if err != nil {
		return nil, timeoutErr(err, actx, ctx)
	}
	if resp.StatusCode != http.StatusOK {
		ae := decodeError(resp.StatusCode, raw, r.method, r.path)
		ae.RetryAfter = retryAfter(resp.Header)
		return nil, ae
	}
	return &result{resp: resp, body: raw}, nil
}

// maxRetryAfter caps the wait a member's Retry-After may impose on a call.
const maxRetryAfter = time.Minute

// retryAfter reads a Retry-After header given in seconds (0 when absent).
func retryAfter(h http.Header) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(min(secs, int(maxRetryAfter/time.Second))) * time.Second
}

// timeoutErr names an attempt's own timeout as such (the caller's context
// is still live), so it is retried as a transport failure.
func timeoutErr(err error, actx, ctx context.Context) error {
	if actx.Err() != nil && ctx.Err() == nil {
		return &attemptTimeout{err: err}
	}
	return err
}

// attemptTimeout is an attempt that ran out of Config.RequestTimeout.
type attemptTimeout struct{ err error }

func (e *attemptTimeout) Error() string { return "request timed out: " + e.err.Error() }
func (e *attemptTimeout) Unwrap() error { return e.err }

func (c *Client) count(class reqClass) {
	switch class {
	case classObjectGet:
		c.objectGets.Add(1)
	case classObjectPut:
		c.objectPuts.Add(1)
	default:
		c.metastoreReqs.Add(1)
	}
}

// decodeError turns an error answer into an *APIError.
func decodeError(status int, raw []byte, method, path string) *APIError {
	var env wire.ErrorResponse
	if err := json.Unmarshal(raw, &env); err == nil && env.Error.Code != "" {
		e := env.Error
		return &APIError{Status: status, Code: e.Code, Field: e.Field, Message: e.Message, Retryable: e.Retryable, Method: method, Path: path}
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	return &APIError{
		Status: status, Code: wire.Code(fmt.Sprintf("http_%d", status)), Message: msg, Method: method, Path: path,
		Retryable: status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout ||
			status == http.StatusTooManyRequests,
	}
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// refreshMembers reads the members from base, so the client can send to
// the leader directly. Failures are ignored: forwarding still works.
func (c *Client) refreshMembers(ctx context.Context, base string) {
	r := &request{method: http.MethodGet, path: "/v1/status", class: classRead}
	res, err := c.attempt(ctx, base, r)
	if err != nil {
		c.logger.Debug("metastore client: reading members failed", "endpoint", base, "err", err)
		return
	}
	var st wire.Status
	if err := json.Unmarshal(res.body, &st); err == nil {
		c.learn(&st, schemeOf(base))
	}
}

func schemeOf(base string) string {
	s, _, _ := strings.Cut(base, "://")
	return s
}

// redactURL drops the query of the URL a transport error names: a signed
// query (expires, sig) is a credential and must not reach a log or an
// error string.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.RawQuery != "" {
			u.RawQuery = "<redacted>"
			ue.URL = u.String()
		}
	}
	return err
}

type rawAnswerKey struct{}

// WithRawAnswer returns a context whose calls copy the body of their
// successful JSON answer into *dst, as the member sent it: for tools that
// print the API's answer verbatim (the metastore command's --json) while
// using the client's calls. Streams (SaveSnapshot) are not copied.
func WithRawAnswer(ctx context.Context, dst *[]byte) context.Context {
	return context.WithValue(ctx, rawAnswerKey{}, dst)
}
