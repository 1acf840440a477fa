package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/internal/buildinfo"
	"github.com/metastore/metastore/internal/mtls"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// Headers set on responses.
const (
	// HeaderIndex carries the Raft index a response reflects.
	HeaderIndex = "X-Metastore-Index"
	// HeaderServedBy names the member that answered (after forwarding).
	HeaderServedBy = "X-Metastore-Served-By"
	// HeaderForwardedBy marks a request forwarded by a member, so it is
	// never forwarded twice.
	HeaderForwardedBy = "X-Metastore-Forwarded-By"
)

// MaxWait caps the wait of a blocking query.
const MaxWait = 5 * time.Minute

// Deps are what the API serves.
type Deps struct {
	Config config.Config
	Node   *node.Node
	FSM    *fsm.FSM
	// Store is the object store of checkpoint blobs.
	Store blobstore.Store
	// StoreHealth follows Store's calls (it is Store's Observer, or one of
	// them); GET /v1/status and /readyz report it. Nil: not reported.
	StoreHealth *blobstore.Health
	// GC is the garbage collector (it runs as a leader task).
	GC       *gc.Collector
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// TLS is the member's TLS material; it must be set when Config names
	// TLS files. Requests forwarded to the leader go over https with it.
	TLS *mtls.Reloader
	// Build is the running build, reported by GET /v1/status and as
	// metastore_build_info; the zero value means buildinfo.Read("").
	Build buildinfo.Info
	// AccessLog receives one line per request (--access-log); nil: off.
	AccessLog *slog.Logger
	// AuditLog receives one line per operator action; nil: Logger with
	// audit=true.
	AuditLog *slog.Logger
}

// Server is the HTTP API of one member.
type Server struct {
	cfg     config.Config
	node    *node.Node
	fsm     *fsm.FSM
	store   blobstore.Store
	health  *blobstore.Health
	gc      *gc.Collector
	logger  *slog.Logger
	build   buildinfo.Info
	metrics *metrics
	fwd     *forwarder
	router  *mux.Router

	// Per-client limits (limits.go); clients is nil when off.
	clients *clientLimits
	hosts   hostCache
	// Host and Origin checks (browser.go).
	browser *browserGuard
	// Per-job quotas (quota.go).
	quotas *jobQuotas
	// lastLease is the last lease of signed upload slots, in Unix
	// nanoseconds (blobs.go).
	lastLease atomic.Int64
	// accessLog is nil when off; auditLog always logs (accesslog.go).
	accessLog *slog.Logger
	auditLog  *slog.Logger
}

// New builds the API.
func New(d Deps) *Server {
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:    d.Config,
		node:   d.Node,
		fsm:    d.FSM,
		store:  d.Store,
		health: d.StoreHealth,
		gc:     d.GC,
		logger: logger,
		build:  d.Build,
	}
	if s.build.Version == "" {
		s.build = buildinfo.Read("")
	}
	s.metrics = newMetrics(d.Registry, s.build)
	if d.Registry != nil && d.FSM != nil {
		d.Registry.MustRegister(newPendingCollector(d.FSM, s.now))
	}
	if d.Registry != nil && d.FSM != nil {
		d.Registry.MustRegister(newLateCollector(d.FSM), newChangelogCollector(d.FSM))
	}
	s.fwd = newForwarder(d.Config.NodeID, logger, d.Config.HTTPScheme(), d.TLS)
	s.router = s.routes(d.Registry)
	s.clients = newClientLimits(d.Config.HTTPLimits)
	s.browser = newBrowserGuard(d.Config)
	s.accessLog, s.auditLog = d.AccessLog, d.AuditLog
	if s.auditLog == nil {
		s.auditLog = logger.With("audit", true)
	}
	if d.FSM != nil {
		s.quotas = newJobQuotas(d.Config.Security, d.FSM)
	}
	return s
}

// Handler is the root handler.
func (s *Server) Handler() http.Handler {
	return s.access(s.headerLimit(s.guard(s.limit(s.router))))
}

// kind says where a route is served.
type kind int

const (
	// local: answered by whichever member receives it.
	local kind = iota
	// read: a read honouring the consistency parameter.
	read
	// write: a mutation, forwarded to the leader.
	write
)

type route struct {
	name    string
	method  string
	path    string
	kind    kind
	handler func(r *http.Request) (any, uint64, error)
	// maxBody overrides the configured body limit (blob uploads).
	maxBody int64
	// perm is the permission a token needs when auth is on (auth.go).
	perm perm
}

// routeTable lists every route of the API once.
func (s *Server) routeTable() []route {
	return []route{
		{"status", "GET", "/v1/status", local, s.status, 0, permAuthenticated},
		{"members.list", "GET", "/v1/members", local, s.membersList, 0, permAuthenticated},
		{"members.status", "GET", "/v1/members/status", local, s.membersStatus, 0, permAuthenticated},
		{"members.add", "POST", "/v1/members", write, s.membersAdd, 0, permMembers},
		{"members.remove", "DELETE", "/v1/members/{id}", write, s.membersRemove, 0, permOperator},
		{"leader.transfer", "POST", "/v1/leader/transfer", write, s.leaderTransfer, 0, permOperator},
		{"state.hash", "GET", "/v1/state/hash", local, s.stateHash, 0, permOperator},

		{"jobs.list", "GET", "/v1/jobs", read, s.jobsList, 0, permAuthenticated},
		{"jobs.put", "PUT", "/v1/jobs/{job}", write, s.jobPut, 0, permJob},
		{"jobs.get", "GET", "/v1/jobs/{job}", read, s.jobGet, 0, permJob},
		{"jobs.delete", "DELETE", "/v1/jobs/{job}", write, s.jobDelete, 0, permOperator},
		{"attempts.start", "POST", "/v1/jobs/{job}/attempts", write, s.attemptStart, 0, permJob},
		{"attempts.list", "GET", "/v1/jobs/{job}/attempts", read, s.attemptsList, 0, permJob},
		{"attempts.get", "GET", "/v1/jobs/{job}/attempts/{generation}", read, s.attemptGet, 0, permJob},
		{"epochs.begin", "POST", "/v1/jobs/{job}/epochs", write, s.epochBegin, 0, permJob},
		{"epochs.list", "GET", "/v1/jobs/{job}/epochs", read, s.epochsList, 0, permJob},
		{"epochs.get", "GET", "/v1/jobs/{job}/epochs/{epoch}", read, s.epochGet, 0, permJob},
		{"epochs.ack", "PUT", "/v1/jobs/{job}/epochs/{epoch}/acks/{task}", write, s.taskAck, 0, permJob},
		{"acks.batch", "POST", "/v1/acks", write, s.acksBatch, 0, permAuthenticated},
		{"epochs.abort", "POST", "/v1/jobs/{job}/epochs/{epoch}/abort", write, s.epochAbort, 0, permJob},
		{"epochs.pin", "PUT", "/v1/jobs/{job}/epochs/{epoch}/pin", write, s.epochPin, 0, permOperator},
		{"epochs.unpin", "DELETE", "/v1/jobs/{job}/epochs/{epoch}/pin", write, s.epochUnpin, 0, permOperator},
		{"tasks.restore", "GET", "/v1/jobs/{job}/tasks/{task}/restore", read, s.taskRestore, 0, permJob},
		{"epochs.manifest", "GET", "/v1/jobs/{job}/epochs/{epoch}/manifests/{task}", read, s.manifestGet, 0, permJob},

		{"uploads.create", "POST", "/v1/jobs/{job}/uploads", write, s.uploadsCreate, 0, permJob},
		{"objects.put", "PUT", "/v1/objects/{key:.+}", write, s.objectPut, s.cfg.MaxBlobBytes, permObject},
		{"objects.get", "GET", "/v1/objects/{key:.+}", read, nil, 0, permObject},
		{"blobs.stats", "GET", "/v1/blobs", read, s.blobStats, 0, permOperator},
		{"blobs.get", "GET", "/v1/blobs/{key:.+}", read, s.blobGet, 0, permBlob},
		{"fsck", "GET", "/v1/fsck", read, s.fsck, 0, permOperator},
		{"gc.status", "GET", "/v1/gc", read, s.gcStatus, 0, permOperator},
		{"gc.run", "POST", "/v1/gc/run", write, s.gcRun, 0, permOperator},
		{"jobs.verify", "GET", "/v1/jobs/{job}/verify", read, s.jobVerify, 0, permJob},
		{"snapshot.save", "GET", "/v1/snapshot", read, nil, 0, permOperator},
		{"snapshot.restore", "PUT", "/v1/snapshot", write, s.snapshotRestore, 1 << 40, permOperator},

		// Tokens (auth.go).
		{"tokens.create", "POST", "/v1/tokens", write, s.tokensCreate, 0, permOperator},
		{"tokens.list", "GET", "/v1/tokens", read, s.tokensList, 0, permOperator},
		{"tokens.revoke", "DELETE", "/v1/tokens/{accessor}", write, s.tokensRevoke, 0, permOperator},
	}
}

func (s *Server) routes(reg *prometheus.Registry) *mux.Router {
	// Path variables stay encoded and paths are not cleaned: ids are
	// validated against their charset, so "..%2F" is refused, never resolved.
	r := mux.NewRouter().UseEncodedPath().SkipClean(true)
	r.Use(s.recoverer)
	for _, rt := range s.routeTable() {
		h := s.wrap(rt)
		switch rt.name {
		case "objects.get":
			h = s.instrument(rt.name, s.leaderOnly(rt, http.HandlerFunc(s.objectGet)))
		case "snapshot.save":
			h = s.instrument(rt.name, s.leaderOnly(rt, http.HandlerFunc(s.snapshotSave)))
		}
		r.Handle(rt.path, h).Methods(rt.method).Name(rt.name)
	}
	r.Handle("/healthz", s.instrument("healthz", http.HandlerFunc(s.healthz))).Methods("GET")
	r.Handle("/readyz", s.instrument("readyz", http.HandlerFunc(s.readyz))).Methods("GET")
	if s.cfg.EnablePprof {
		// Operator tokens only when auth is on (auth.go).
		r.Handle("/debug/pprof/cmdline", s.operatorOnly("pprof", http.HandlerFunc(pprof.Cmdline)))
		r.Handle("/debug/pprof/profile", s.operatorOnly("pprof", http.HandlerFunc(pprof.Profile)))
		r.Handle("/debug/pprof/symbol", s.operatorOnly("pprof", http.HandlerFunc(pprof.Symbol)))
		r.Handle("/debug/pprof/trace", s.operatorOnly("pprof", http.HandlerFunc(pprof.Trace)))
		r.PathPrefix("/debug/pprof/").Handler(s.operatorOnly("pprof", http.HandlerFunc(pprof.Index))) // heap, goroutine, ... by name
	}
	if reg != nil {
		var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
		if !s.cfg.AuthMetricsOpen {
			h = s.operatorOnly("metrics", h) // auth.go; open when auth is off
		}
		r.Handle("/metrics", h).Methods("GET")
	}
	r.NotFoundHandler = s.instrument("not_found", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, apiErr(http.StatusNotFound, wire.CodeRouteNotFound, "", "no route %s %s", req.Method, req.URL.Path))
	}))
	r.MethodNotAllowedHandler = s.instrument("method_not_allowed", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, apiErr(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "", "method %s is not allowed on %s (allowed: %s)", req.Method, req.URL.Path, strings.Join(allowed, ", ")))
	}))
	return r
}

// routeMethods are the methods the API's routes use.
var routeMethods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete}

// allowedMethods lists the methods the router serves on req's path, for the
// Allow header of a 405 answer (RFC 9110 15.5.6).
func allowedMethods(r *mux.Router, req *http.Request) []string {
	var allowed []string
	for _, m := range routeMethods {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if r.Match(probe, &match) && match.MatchErr == nil {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// wrap turns a route into an http.Handler: body limit, leader forwarding,
// consistency, JSON encoding of the value or the error, metrics.
func (s *Server) wrap(rt route) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if routeDeadlines(rt.name) {
			s.setDeadlines(w, r, rt.name)
		}
		limit := s.cfg.MaxBodyBytes
		if rt.maxBody > 0 {
			limit = rt.maxBody
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		if e := checkContentType(rt, r); e != nil {
			s.refused(w, r, e)
			return
		}
		if r = s.checkAuth(w, r, rt); r == nil {
			return
		}
		if s.mustForward(rt, r) {
			if rt.name == "acks.batch" {
				// The leader does not count what a member forwards.
				if e := s.chargeForwardedBatch(r); e != nil {
					writeError(w, e)
					return
				}
			}
			s.forward(w, r, rt.name)
			return
		}
		w.Header().Set(HeaderServedBy, s.cfg.NodeID)
		if rt.kind == read {
			c, err := consistency(r)
			if err != nil {
				writeError(w, toAPIError(err))
				return
			}
			if c != consistencyStale {
				if _, err := s.node.LinearizableRead(r.Context()); err != nil {
					writeError(w, toAPIError(err))
					return
				}
			}
		}
		v, idx, err := rt.handler(r)
		if err != nil {
			ae := toAPIError(err)
			if ae.Status >= 500 {
				s.logger.Warn("request failed", "route", rt.name, "code", ae.Code, "err", err)
			}
			writeError(w, ae)
			return
		}
		w.Header().Set(HeaderIndex, strconv.FormatUint(idx, 10))
		writeAnswer(w, r, v)
	})
	return s.instrument(rt.name, h)
}

// writeAnswer writes a route's answer: indented for a person (curl, wget
// or a browser by their User-Agent, or ?pretty), compact for programs,
// which parse it anyway (indenting every ack's answer was 1.5% of a
// busy leader's CPU). Errors are always indented (writeError).
func writeAnswer(w http.ResponseWriter, r *http.Request, v any) {
	encodeJSON(w, http.StatusOK, v, pretty(r))
}

// pretty reports whether r's answer is indented: the request names
// ?pretty (any value but false), or its User-Agent is curl's, wget's or a
// browser's.
func pretty(r *http.Request) bool {
	if p, ok := r.URL.Query()["pretty"]; ok {
		return len(p) == 0 || p[0] != "false"
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl/") || strings.HasPrefix(ua, "Wget/") || strings.HasPrefix(ua, "Mozilla/")
}

// Read consistency levels. Reads are linearizable unless the caller asks
// for a stale one: "default" and "linearizable" are both answered by the
// leader after it confirmed its leadership with a quorum and applied
// everything committed (a paused or partitioned ex-leader cannot answer);
// "stale" is answered by the member asked, from its own state.
const (
	consistencyStale        = "stale"
	consistencyDefault      = "default"
	consistencyLinearizable = "linearizable"
)

func consistency(r *http.Request) (string, error) {
	if unsafeStaleReads {
		return consistencyStale, nil // positive control, faultinject builds only (unsafe_on.go)
	}
	switch c := r.URL.Query().Get("consistency"); c {
	case "":
		return consistencyDefault, nil
	case consistencyStale, consistencyDefault, consistencyLinearizable:
		return c, nil
	default:
		return "", apiErr(http.StatusBadRequest, wire.CodeInvalid, "consistency", "%q is not one of stale, default, linearizable", c)
	}
}

// mustForward reports whether the request belongs to the leader and this
// member is not it. Writes always go to the leader; reads unless stale.
func (s *Server) mustForward(rt route, r *http.Request) bool {
	switch rt.kind {
	case write:
		return !s.node.IsLeader()
	case read:
		c, err := consistency(r)
		return err == nil && c != consistencyStale && !s.node.IsLeader()
	}
	return false
}

// leaderOnly forwards a streaming handler's request like wrap does.
func (s *Server) leaderOnly(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r = s.checkAuth(w, r, rt); r == nil {
			return
		}
		if s.mustForward(rt, r) {
			s.forward(w, r, rt.name)
			return
		}
		w.Header().Set(HeaderServedBy, s.cfg.NodeID)
		if c, err := consistency(r); err == nil && rt.kind == read && c != consistencyStale {
			if _, err := s.node.LinearizableRead(r.Context()); err != nil {
				writeError(w, toAPIError(err))
				return
			}
		} else if err != nil {
			writeError(w, toAPIError(err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, name string) {
	if by := r.Header.Get(HeaderForwardedBy); by != "" {
		// Leadership moved while the request was in flight; forwarding
		// again could loop.
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotLeader, Retryable: true,
			Message: "forwarded by " + by + " but this member is not the leader; retry"})
		return
	}
	addr, err := s.node.LeaderHTTPAddr()
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	s.metrics.forwarded.WithLabelValues(name).Inc()
	s.fwd.serve(w, r, addr)
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.logger.Error("panic in handler", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				writeError(w, apiErr(http.StatusInternalServerError, wire.CodeInternal, "", "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) { encodeJSON(w, status, v, true) }

// jsonAppender is an answer that writes its own JSON, the bytes
// json.Marshal would (wire.AckResult, wire.Uploads): false leaves it to
// encoding/json.
type jsonAppender interface {
	AppendJSON(b []byte) ([]byte, bool)
}

// answerBufs holds the buffers answers are appended to: the response
// writer copies what it is given, so a buffer serves the next answer.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func encodeJSON(w http.ResponseWriter, status int, v any, indent bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if a, ok := v.(jsonAppender); ok && !indent {
		bp := answerBufs.Get().(*[]byte)
		b, ok := a.AppendJSON((*bp)[:0])
		if ok {
			_, _ = w.Write(append(b, '\n')) // as json.Encoder ends a value
		}
		*bp = b[:0]
		answerBufs.Put(bp)
		if ok {
			return
		}
	}
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.Retryable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, e.body())
}

// healthz answers while the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the member knows a leader and has applied what
// it knows to be committed.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.node.Ready(); err != nil {
		writeError(w, apiErr(http.StatusServiceUnavailable, wire.CodeNotReady, "", "%v", err))
		return
	}
	ans := map[string]any{"status": "ready", "applied_index": s.fsm.AppliedIndex()}
	if h := s.storeHealth(); h != nil {
		// A detail only: readiness is the member's Raft state (docs/operations.md).
		ans["blob_store"] = h
	}
	writeJSON(w, http.StatusOK, ans)
}

// apply proposes a command (node.Propose) and returns the command's
// value, or its rule violation.
func (s *Server) apply(ctx context.Context, t fsm.CommandType, payload any) (any, uint64, error) {
	return s.node.Propose(ctx, t, payload)
}

// now is the clock the member stamps into its commands (node.Now).
func (s *Server) now() time.Time { return s.node.Now() }
