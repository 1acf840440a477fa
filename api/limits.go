package api

import (
	"context"
	"errors"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/wire"
)

// NewHTTPServer is the http.Server of the API, with the limits of cfg: the
// binary and the tests serve through it, so they share its settings.
//
// The server itself bounds the headers (time and size) and idle
// connections. It sets no whole-request read or write timeout: those
// differ by route (a blob upload, a blocking query), and the handler sets
// them per request (Server.limit).
func NewHTTPServer(cfg config.Config, handler http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes * headerBackstop,
		ErrorLog:          errorLog,
	}
}

// headerBackstop is how many times --http-max-header-bytes the HTTP server
// itself reads before it gives up on a request's headers. The API enforces
// the configured limit (headerLimit), so it can answer 431 with a JSON
// error; Go's server answers only what is larger than the backstop, with
// its own plain-text 431, and holds no more than that per connection.
const headerBackstop = 4

// headerLimit answers 431 header_too_large, as JSON, to a request whose
// request line and headers are above MaxHeaderBytes: the size is counted as
// they stood on the wire (each header line "Key: value\r\n").
func (s *Server) headerLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
		n += len("Host: ") + len(r.Host) + 2
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + 2 + len(v) + 2
			}
		}
		if n > s.cfg.MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			writeError(w, apiErr(http.StatusRequestHeaderFieldsTooLarge, wire.CodeHeaderTooLarge, "",
				"the request line and headers are %d bytes, above the limit of %d (--http-max-header-bytes)", n, s.cfg.MaxHeaderBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Rejection reasons counted by metastore_http_rejections_total.
const (
	rejectRate        = "rate_limited"
	rejectInFlight    = "too_many_in_flight"
	rejectBodyTimeout = "body_timeout"
)

// transferRoutes move blobs or snapshots: their bodies and answers may be
// large, so they get the transfer timeout.
var transferRoutes = map[string]bool{
	"objects.put": true, "objects.get": true, "snapshot.save": true, "snapshot.restore": true,
}

// longRoutes may take minutes before they answer: a blocking query holds
// its request for up to MaxWait (?index=&wait=); verifying a job's blobs,
// a consistency check of the whole state, a collection cycle, and member
// or leadership changes wait on the object store or on the cluster. They
// get MaxWait on top of the write timeout.
var longRoutes = map[string]bool{
	"jobs.list": true, "jobs.get": true, "epochs.get": true, "jobs.verify": true, "fsck": true, "gc.run": true,
	"members.add": true, "members.remove": true, "leader.transfer": true,
}

// unlimitedPaths are never rate limited: probes are cheap and must answer
// while a client floods.
var unlimitedPaths = map[string]bool{"/healthz": true, "/readyz": true}

// clientKey names the client a request is counted against: its remote IP.
// (One function, so that the key can become the authenticated identity.)
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limit is the outermost handler: it refuses a client over its rate or its
// requests in flight, and sets the request's read and write deadlines by
// route.
func (s *Server) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.clients != nil && !unlimitedPaths[r.URL.Path] && !s.fromMember(r) {
			release, retryAfter, reason := s.clients.admit(clientKey(r), time.Now())
			if reason != "" {
				s.metrics.rejections.WithLabelValues(reason).Inc()
				e := rateLimited(retryAfter)
				if reason == rejectInFlight {
					e.Message = "too many requests in progress from this client; retry when one has finished"
				}
				w.Header().Set("Retry-After", strconv.Itoa(retryAfterSecs(retryAfter)))
				writeJSON(w, e.Status, e.body())
				return
			}
			defer release()
		}
		// The deadlines of most routes; wrap moves those of the transfer
		// and long routes once the router has matched them (matching
		// here too cost as much as the routing itself).
		s.setDeadlines(w, r, "")
		next.ServeHTTP(w, r)
	})
}

// rateLimited is the answer to a client over its request rate, which may
// retry after d.
func rateLimited(d time.Duration) *Error {
	return &Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited, Retryable: true,
		Message: "too many requests from this client; retry after " + strconv.Itoa(retryAfterSecs(d)) + "s"}
}

// retryAfterSecs is d in whole seconds for a Retry-After header: at least 1.
func retryAfterSecs(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// setDeadlines bounds the time to receive the body and to write the answer.
// Once the body is read, the read deadline moves to the write deadline:
// the server keeps reading the connection to notice a client that goes
// away, and a timeout there would cancel the request.
func (s *Server) setDeadlines(w http.ResponseWriter, r *http.Request, name string) {
	lim := s.cfg.HTTPLimits
	now := time.Now()
	body, write := lim.BodyTimeout, lim.WriteTimeout
	if transferRoutes[name] {
		body, write = lim.TransferTimeout, lim.TransferTimeout+lim.WriteTimeout
	}
	if longRoutes[name] {
		write = MaxWait + lim.WriteTimeout
	}
	rc := http.NewResponseController(w)
	writeBy := now.Add(write)
	_ = rc.SetWriteDeadline(writeBy)
	if r.Body == nil || r.Body == http.NoBody {
		_ = rc.SetReadDeadline(writeBy)
		return
	}
	_ = rc.SetReadDeadline(now.Add(body))
	if db, ok := r.Body.(*deadlineBody); ok {
		db.after, db.timeout = writeBy, body
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, after: writeBy, timeout: body, onTimeout: func() {
		s.metrics.rejections.WithLabelValues(rejectBodyTimeout).Inc()
	}}
}

// routeDeadlines reports whether the route's deadlines differ from those
// limit sets before routing.
func routeDeadlines(name string) bool { return transferRoutes[name] || longRoutes[name] }

// deadlineBody moves the read deadline once the body is read, and turns a
// read that hit the body deadline into a request timeout.
type deadlineBody struct {
	io.ReadCloser
	rc        *http.ResponseController
	after     time.Time
	timeout   time.Duration
	onTimeout func()
	done      bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || b.done {
		return n, err
	}
	b.done = true
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		b.onTimeout()
		return n, &Error{Status: http.StatusRequestTimeout, Code: wire.CodeRequestTimeout,
			Message: "the request body did not arrive within " + b.timeout.String()}
	}
	if errors.Is(err, io.EOF) {
		_ = b.rc.SetReadDeadline(b.after)
	}
	return n, err
}

// fromMember reports whether r was forwarded by another member: it carries
// HeaderForwardedBy and comes from the address of a member. Such requests
// were counted against their client by the member that forwarded them;
// counting them again would make the forwarding member one client for all
// of its clients. The header alone is not trusted.
func (s *Server) fromMember(r *http.Request) bool {
	if r.Header.Get(HeaderForwardedBy) == "" || s.fsm == nil {
		return false
	}
	ip := net.ParseIP(clientKey(r))
	if ip == nil {
		return false
	}
	members, err := s.fsm.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		for _, addr := range []string{m.HTTPAddr, m.RaftAddr} {
			if host, _, err := net.SplitHostPort(addr); err == nil && s.hosts.is(host, ip) {
				return true
			}
		}
	}
	return false
}

// hostCache resolves member host names, at most once a minute each.
type hostCache struct {
	mu      sync.Mutex
	entries map[string]hostEntry
}

type hostEntry struct {
	ips []net.IP
	at  time.Time
}

func (c *hostCache) is(host string, ip net.IP) bool {
	if lit := net.ParseIP(host); lit != nil {
		return lit.Equal(ip)
	}
	c.mu.Lock()
	e, ok := c.entries[host]
	c.mu.Unlock()
	if !ok || time.Since(e.at) > time.Minute {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addrs, _ := net.DefaultResolver.LookupIPAddr(ctx, host)
		cancel()
		e = hostEntry{at: time.Now()}
		for _, a := range addrs {
			e.ips = append(e.ips, a.IP)
		}
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[string]hostEntry{}
		}
		c.entries[host] = e
		c.mu.Unlock()
	}
	for _, x := range e.ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}

// clientLimits holds one token bucket and one in-flight count per client.
// A client whose bucket is full and who has nothing in flight is forgotten
// (a new bucket would be the same), so memory is bounded by the clients
// active in the last burst/rate seconds.
type clientLimits struct {
	rate     rate.Limit
	burst    int
	inflight int

	mu        sync.Mutex
	clients   map[string]*client
	lastSweep time.Time
}

type client struct {
	lim      *rate.Limiter
	inflight int
}

// sweepEvery is how often admit forgets idle clients.
const sweepEvery = 10 * time.Second

func newClientLimits(l config.HTTPLimits) *clientLimits {
	if l.RateLimit <= 0 && l.MaxInFlight <= 0 {
		return nil
	}
	r := rate.Inf
	if l.RateLimit > 0 {
		r = rate.Limit(l.RateLimit)
	}
	return &clientLimits{rate: r, burst: l.RateBurst, inflight: l.MaxInFlight, clients: map[string]*client{}}
}

// admit counts a request of client key. It returns the function to call
// when the request ends, or the reason it is refused and when to retry.
func (c *clientLimits) admit(key string, now time.Time) (release func(), retryAfter time.Duration, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastSweep) >= sweepEvery {
		c.sweep(now)
	}
	cl := c.clients[key]
	if cl == nil {
		cl = &client{lim: rate.NewLimiter(c.rate, c.burst)}
		c.clients[key] = cl
	}
	if c.inflight > 0 && cl.inflight >= c.inflight {
		return nil, time.Second, rejectInFlight
	}
	if c.rate != rate.Inf {
		res := cl.lim.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			return nil, d, rejectRate
		}
	}
	cl.inflight++
	return func() {
		c.mu.Lock()
		cl.inflight--
		c.mu.Unlock()
	}, 0, ""
}

// charge counts n more requests of client key, admitted already (a batch
// of acks counts as many requests as it holds, acks.go), with the one
// admit counted at most a burst.
// It reports false, charging nothing, and when to retry, when the client
// is over its rate.
func (c *clientLimits) charge(key string, n int, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.clients[key]
	if cl == nil || c.rate == rate.Inf {
		return 0, true
	}
	res := cl.lim.ReserveN(now, min(n, c.burst-1)) // admit took one
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}

func (c *clientLimits) sweep(now time.Time) {
	c.lastSweep = now
	for key, cl := range c.clients {
		if cl.inflight == 0 && (c.rate == rate.Inf || cl.lim.TokensAt(now) >= float64(c.burst)) {
			delete(c.clients, key)
		}
	}
}

// size is the number of clients tracked.
func (c *clientLimits) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.clients)
}

func newRejections() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metastore_http_rejections_total",
		Help: "Requests refused before their handler by a per-client or server limit or a browser check, by reason (rate_limited, too_many_in_flight, body_timeout, host_not_allowed, cross_origin_refused, unsupported_media_type).",
	}, []string{"reason"})
}
