package api

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"
)

// The access log (--access-log) has one line per request; the audit log
// one line per operator action (tokens, members, leadership, snapshots,
// pins, collection runs), always on, with the component "audit". Neither
// ever holds a secret: paths without their query's signatures and
// tokens, tokens by accessor only, no bodies.

// requestNote travels in a request's context from the outermost handler,
// so that what the inner handlers learn (who the token is, what an action
// created) reaches the access and audit lines written outside them.
type requestNote struct {
	accessor string
	role     string
	attrs    []any
}

type noteKey struct{}

func noteOf(r *http.Request) *requestNote {
	n, _ := r.Context().Value(noteKey{}).(*requestNote)
	return n
}

// addAudit records attributes for the audit line of r (never a secret).
func addAudit(r *http.Request, attrs ...any) {
	if n := noteOf(r); n != nil {
		n.attrs = append(n.attrs, attrs...)
	}
}

// withPrincipal is r admitted as p; the note learns the token's accessor.
func withPrincipal(r *http.Request, p *principal) *http.Request {
	if n := noteOf(r); n != nil && p.token != nil {
		n.accessor, n.role = p.token.Accessor, string(p.token.Role)
	}
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// auditRoutes are the operator actions the audit log records.
var auditRoutes = map[string]bool{
	"tokens.create": true, "tokens.revoke": true,
	"members.add": true, "members.remove": true, "leader.transfer": true,
	"snapshot.save": true, "snapshot.restore": true,
	"epochs.pin": true, "epochs.unpin": true,
	"gc.run": true,
}

// secretParams are query parameters whose values never reach a log.
func secretParam(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "sig") || strings.Contains(k, "token") || strings.Contains(k, "credential") || strings.Contains(k, "secret")
}

// redactedQuery is q with the values of secret parameters replaced.
func redactedQuery(q string) string {
	if q == "" {
		return ""
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		return "(unparsable)"
	}
	for k := range v {
		if secretParam(k) {
			v[k] = []string{"REDACTED"}
		}
	}
	return v.Encode()
}

// accessWriter counts the status and bytes of an answer.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *accessWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// access is the outermost handler: it puts the note in the context and
// writes the access line.
func (s *Server) access(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note := &requestNote{}
		r = r.WithContext(context.WithValue(r.Context(), noteKey{}, note))
		if s.accessLog == nil {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		aw := &accessWriter{ResponseWriter: w}
		next.ServeHTTP(aw, r)
		if aw.status == 0 {
			aw.status = http.StatusOK
		}
		attrs := []any{"method", r.Method, "path", r.URL.EscapedPath(), "status", aw.status, "bytes", aw.bytes,
			"duration", time.Since(start).Round(time.Microsecond), "remote", r.RemoteAddr}
		if q := redactedQuery(r.URL.RawQuery); q != "" {
			attrs = append(attrs, "query", q)
		}
		if note.accessor != "" {
			attrs = append(attrs, "token_accessor", note.accessor)
		}
		if by := aw.Header().Get(HeaderServedBy); by != "" && by != s.cfg.NodeID {
			attrs = append(attrs, "served_by", by)
		}
		s.accessLog.Info("request", attrs...)
	})
}

// audit writes the audit line of an operator action, on the member that
// decided it: the one that served it, or refused it before forwarding.
func (s *Server) audit(name string, r *http.Request, status int, served string) {
	if !auditRoutes[name] || (served != "" && served != s.cfg.NodeID) {
		return
	}
	attrs := []any{"action", name, "method", r.Method, "path", r.URL.EscapedPath(), "status", status,
		"outcome", outcome(status), "remote", r.RemoteAddr}
	vars := mux.Vars(r)
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !secretParam(k) {
			attrs = append(attrs, k, vars[k])
		}
	}
	if r.URL.RawQuery != "" {
		attrs = append(attrs, "query", redactedQuery(r.URL.RawQuery))
	}
	if n := noteOf(r); n != nil {
		if n.accessor != "" {
			attrs = append(attrs, "token_accessor", n.accessor, "token_role", n.role)
		}
		attrs = append(attrs, n.attrs...)
	}
	if !s.cfg.Auth {
		attrs = append(attrs, "auth", "off")
	}
	level := slog.LevelInfo
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		level = slog.LevelWarn // folded when repeated
	}
	s.auditLog.Log(context.Background(), level, "operator action", attrs...)
}

func outcome(status int) string {
	switch {
	case status < 300:
		return "done"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "refused"
	default:
		return "failed"
	}
}
