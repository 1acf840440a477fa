package api

import (
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/wire"
)

// Browser safety. The API is reached by workers, the CLI and curl, which
// send no Origin; a web page the operator has open can reach it too (the
// default store listens on loopback, where the operator's browser is).
// Three checks keep such pages out, in every mode, auth or not:
//
//   - Host: the name the request was sent to must be an IP literal, a
//     localhost name, a name this member or another member advertises, or
//     one of --allowed-hosts. A page that rebinds its own DNS name to
//     127.0.0.1 sends its own name and is refused 421 (DNS rebinding).
//   - Origin and Sec-Fetch-Site: a request a browser marks as coming from
//     another origin (or site) is refused 403 unless --allowed-origins
//     names it; the store's own pages (the console, same origin as the Host)
//     pass.
//   - Content-Type: a state-changing request with a JSON body must say
//     application/json (415 otherwise), so a cross-site form or a
//     text/plain fetch, which browsers send without asking the server
//     first, is never decoded. Requests without any browser marking may
//     also send none or curl's default for -d
//     (application/x-www-form-urlencoded): the README's curl commands keep
//     working, and a browser always marks what it sends.
//
// Requests forwarded by a member are checked again by the leader: the
// forwarder keeps the client's Host, Origin and Sec-Fetch-* headers, so
// they pass there as they passed on the member that received them (set the
// same --allowed-hosts and --allowed-origins on every member). They are
// not exempted: X-Metastore-Forwarded-By is a header a DNS-rebound page
// can send too, from the address of a member (the loopback of a
// single-node store).

// rawBodyRoutes take a body that is not JSON (a blob, a snapshot).
var rawBodyRoutes = map[string]bool{"objects.put": true, "snapshot.restore": true}

// browserGuard holds the configured names and origins.
type browserGuard struct {
	anyHost   bool
	hosts     map[string]bool
	anyOrigin bool
	origins   map[string]bool
}

func newBrowserGuard(cfg config.Config) *browserGuard {
	g := &browserGuard{hosts: map[string]bool{"localhost": true, "localhost.localdomain": true}, origins: map[string]bool{}}
	for _, addr := range []string{cfg.HTTPAddr, cfg.HTTPAdvertiseAddr(), cfg.RaftAdvertiseAddr()} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			g.hosts[normHost(host)] = true
		}
	}
	for _, h := range cfg.AllowedHosts {
		if h == "*" {
			g.anyHost = true
		}
		g.hosts[normHost(h)] = true
	}
	for _, o := range cfg.AllowedOrigins {
		if o == "*" {
			g.anyOrigin = true
			continue
		}
		if n, err := config.NormalizeOrigin(o); err == nil {
			g.origins[n] = true
		}
	}
	return g
}

func normHost(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// requestHost is the host name of r's Host header, without its port.
func requestHost(r *http.Request) string {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return normHost(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// guard is the outermost handler of the API: the Host and Origin checks.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if unlimitedPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if e := s.checkHost(r); e != nil {
			s.refused(w, r, e)
			return
		}
		if e := s.checkOrigin(r); e != nil {
			s.refused(w, r, e)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refused answers a request a check refused, and logs it (the logger
// folds repeated refusals into a count, internal/logx).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, e *Error) {
	s.metrics.rejections.WithLabelValues(string(e.Code)).Inc()
	s.logger.Warn("request refused", "code", e.Code, "method", r.Method, "path", r.URL.Path,
		"host", r.Host, "origin", r.Header.Get("Origin"), "remote", clientKey(r))
	writeError(w, e)
}

func (s *Server) checkHost(r *http.Request) *Error {
	g := s.browser
	host := requestHost(r)
	if g.anyHost || net.ParseIP(host) != nil || g.hosts[host] || strings.HasSuffix(host, ".localhost") {
		return nil
	}
	if host != "" && s.isMemberName(host) {
		return nil
	}
	return apiErr(http.StatusMisdirectedRequest, wire.CodeHostNotAllowed, "Host",
		"this member does not answer to the host name %q: use an IP address, a member's advertised name, or add the name to --allowed-hosts", r.Host)
}

// isMemberName reports whether host is the host of a member's advertised
// HTTP or Raft address.
func (s *Server) isMemberName(host string) bool {
	if s.fsm == nil {
		return false
	}
	members, err := s.fsm.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		for _, addr := range []string{m.HTTPAddr, m.RaftAddr} {
			if h, _, err := net.SplitHostPort(addr); err == nil && normHost(h) == host {
				return true
			}
		}
	}
	return false
}

func (s *Server) checkOrigin(r *http.Request) *Error {
	g := s.browser
	origin := r.Header.Get("Origin")
	if origin == "" {
		// No Origin: a non-browser client, a same-origin GET, or a
		// navigation. Sec-Fetch-Site tells a cross-site one apart.
		switch site := r.Header.Get("Sec-Fetch-Site"); site {
		case "", "same-origin", "none":
			return nil
		default:
			if g.anyOrigin {
				return nil
			}
			return apiErr(http.StatusForbidden, wire.CodeCrossOrigin, "Sec-Fetch-Site",
				"the browser says this request comes from another site (Sec-Fetch-Site: %s); the API serves pages of other origins only when --allowed-origins names them", site)
		}
	}
	if g.anyOrigin {
		return nil
	}
	norm, err := config.NormalizeOrigin(origin)
	if err == nil {
		if g.origins[norm] {
			return nil
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if self, err := config.NormalizeOrigin(scheme + "://" + r.Host); err == nil && self == norm {
			return nil
		}
	}
	return apiErr(http.StatusForbidden, wire.CodeCrossOrigin, "Origin",
		"requests from pages of origin %q are refused: only the store's own pages and the origins named by --allowed-origins may call the API from a browser", origin)
}

// browserMarked reports whether a browser sent r: browsers add Origin to
// every request that is not a same-origin GET, and Sec-Fetch-* to every
// request.
func browserMarked(r *http.Request) bool {
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Sec-Fetch-Mode") != ""
}

// checkContentType refuses a state-changing request of a JSON route whose
// body is not declared as JSON.
func checkContentType(rt route, r *http.Request) *Error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if rawBodyRoutes[rt.name] || (r.ContentLength == 0 && len(r.TransferEncoding) == 0) || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct != "" && err != nil {
		return apiErr(http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "Content-Type", "%q is not a media type; send Content-Type: application/json", ct)
	}
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return nil
	}
	if !browserMarked(r) && (ct == "" || mt == "application/x-www-form-urlencoded") {
		return nil // curl -d, or a client that sends no type
	}
	if ct == "" {
		ct = "(none)"
	}
	return apiErr(http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "Content-Type",
		"%s %s takes a JSON body: send Content-Type: application/json, not %s", r.Method, r.URL.Path, ct)
}
