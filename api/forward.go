package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"syscall"
	"time"

	"github.com/metastore/metastore/internal/mtls"
	"github.com/metastore/metastore/wire"
)

// forwarder relays requests that belong to the leader. It is the only place
// that talks to another member over HTTP.
type forwarder struct {
	self   string
	logger *slog.Logger
	// scheme is the members' HTTP scheme: https when TLS is on (every
	// member of a cluster serves the same one).
	scheme    string
	transport *http.Transport
}

// newForwarder returns the forwarder of member self, which talks to the
// leader with scheme; with material, https connections present the member
// certificate and verify the leader's against the CA in use.
func newForwarder(self string, logger *slog.Logger, scheme string, material *mtls.Reloader) *forwarder {
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	var dialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
	if material != nil {
		dialTLS = material.DialTLS(dialer)
	}
	return &forwarder{
		self:   self,
		logger: logger,
		scheme: scheme,
		transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			DialTLSContext:        dialTLS,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: MaxWait + 30*time.Second,
		},
	}
}

func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, leaderAddr string) {
	target := &url.URL{Scheme: f.scheme, Host: leaderAddr}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = r.Host
			pr.Out.Header.Set(HeaderForwardedBy, f.self)
			pr.SetXForwarded()
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			writeError(w, forwardError(req, leaderAddr, err))
		},
	}
	proxy.ServeHTTP(w, r)
}

// forwardError says whether a failed forward may have taken effect: a
// request the leader never received did not; one whose answer was lost may
// have, and only an idempotent repeat is safe (every mutation is).
func forwardError(r *http.Request, leaderAddr string, err error) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return toAPIError(err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || isDialError(err) {
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, Retryable: true,
			Message: "cannot reach the leader at " + leaderAddr + ": " + err.Error()}
	}
	if r.Method == http.MethodGet {
		return &Error{Status: http.StatusBadGateway, Code: wire.CodeUnavailable, Retryable: true,
			Message: "forwarding to the leader at " + leaderAddr + " failed: " + err.Error()}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeOutcomeUnknown, Retryable: true,
		Message: "the leader at " + leaderAddr + " did not answer (" + err.Error() + "); the write may or may not have been applied; repeating it is safe: every mutation is idempotent by content"}
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
