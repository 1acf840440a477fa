package api

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// Authentication and authorization (docs/operations.md, "Authentication
// and tokens"). With Config.Auth on, every route of the table requires a
// bearer token whose role and scope grant the route's permission; the
// health endpoints stay open. Tokens live in the replicated state, hashed.

// perm is the permission a route requires. Every route of the table names
// one (TestEveryRouteHasAPermission).
type perm int

const (
	// permUnset is no permission: a route of the table must never have it.
	permUnset perm = iota
	// permAuthenticated: any valid token (cluster status, the job list,
	// which is filtered to the token's scope).
	permAuthenticated
	// permJob: the route's {job} must be in the token's scope.
	permJob
	// permObject: /v1/objects/{key}: a signed URL for this key and method,
	// or a token whose scope covers the key's job (the key's first path
	// segment).
	permObject
	// permBlob: a token whose scope covers the key's job.
	permBlob
	// permOperator: operator tokens only.
	permOperator
	// permMembers: an operator token, or a join request signed by a
	// member (node.HeaderMemberAuth): followers of a static cluster ask
	// the leader to write their member record.
	permMembers
)

func (p perm) String() string {
	switch p {
	case permAuthenticated:
		return "authenticated"
	case permJob:
		return "job"
	case permObject:
		return "object"
	case permBlob:
		return "blob"
	case permOperator:
		return "operator"
	case permMembers:
		return "operator-or-member"
	}
	return "unset"
}

// principal is who a request was authenticated as.
type principal struct {
	token *wire.Token
	// signedKey is the object key of a signed URL that admitted the
	// request (no token).
	signedKey string
	// member: a join request signed by a member admitted it.
	member bool
}

type principalKey struct{}

// principalToken is the token that authenticated r, nil if none did.
func principalToken(r *http.Request) *wire.Token {
	if p, _ := r.Context().Value(principalKey{}).(*principal); p != nil {
		return p.token
	}
	return nil
}

// TokenAccessor returns the accessor of the token that authenticated r, or
// "" when the request carried none (auth off, a signed object URL, an open
// route). It identifies a client without revealing its secret, e.g. to key
// a rate limiter.
func TokenAccessor(r *http.Request) string {
	if p, _ := r.Context().Value(principalKey{}).(*principal); p != nil && p.token != nil {
		return p.token.Accessor
	}
	return ""
}

// tokenOf is the token that authenticated r; nil when auth is off or the
// request was admitted by a signed URL.
func tokenOf(r *http.Request) *wire.Token {
	if p, _ := r.Context().Value(principalKey{}).(*principal); p != nil {
		return p.token
	}
	return nil
}

// restricted reports whether r is limited to a scope (a worker token).
func restricted(r *http.Request) (*wire.Token, bool) {
	tok := tokenOf(r)
	return tok, tok != nil && tok.Role != wire.RoleOperator
}

// TokenPrefix starts every token secret.
const TokenPrefix = "mst_"

// tokenSecretLen is the length of a token secret: "mst_" and 32 random
// bytes in unpadded base64url.
var tokenSecretLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(32)

// GenerateToken returns a new token secret: 32 bytes from crypto/rand.
func GenerateToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// CheckTokenFormat reports whether secret has the form GenerateToken
// makes. Its error never contains the secret.
func CheckTokenFormat(secret string) error {
	if !strings.HasPrefix(secret, TokenPrefix) || len(secret) != tokenSecretLen {
		return fmt.Errorf("a token is %q followed by 43 base64url characters (32 random bytes); make one with `metastore tokens generate`", TokenPrefix)
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret[len(TokenPrefix):]); err != nil || len(b) != 32 {
		return fmt.Errorf("a token is %q followed by 43 base64url characters (32 random bytes)", TokenPrefix)
	}
	return nil
}

func unauthenticated(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="metastore"`)
	writeError(w, apiErr(http.StatusUnauthorized, wire.CodeUnauthenticated, "Authorization", format, args...))
}

// bearer returns the token of the Authorization header, "" if none.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// checkAuth authenticates and authorizes r for rt. It returns the request
// to serve (with the principal in its context), or nil when it answered
// (401, 403, or a forward to the leader of a token this member does not
// know yet).
func (s *Server) checkAuth(w http.ResponseWriter, r *http.Request, rt route) *http.Request {
	if !s.cfg.Auth {
		return r
	}
	if rt.perm == permObject && r.URL.Query().Has("sig") {
		key := mux.Vars(r)["key"]
		if err := s.verifyObjectURL(r.Method, key, r.URL.Query()); err == nil {
			return withPrincipal(r, &principal{signedKey: key})
		} else if _, has := bearer(r); !has {
			writeError(w, apiErr(http.StatusForbidden, wire.CodeForbidden, "sig", "signed URL refused: %v", err))
			return nil
		}
		// A bearer token may still admit it.
	}
	if rt.perm == permMembers && r.Header.Get(node.HeaderMemberAuth) != "" {
		if err := s.verifyMemberRequest(r); err != nil {
			writeError(w, toAPIError(err))
			return nil
		}
		return withPrincipal(r, &principal{member: true})
	}
	secret, has := bearer(r)
	if !has {
		unauthenticated(w, "this route needs a bearer token (Authorization: Bearer <token>)")
		return nil
	}
	if CheckTokenFormat(secret) != nil {
		unauthenticated(w, "the bearer token is malformed")
		return nil
	}
	tok, err := s.fsm.TokenByHash(wire.TokenHash(secret))
	if err != nil {
		writeError(w, toAPIError(err))
		return nil
	}
	if tok == nil {
		if s.mustForward(rt, r) {
			// A token created a moment ago may not be applied here yet:
			// the leader, which applied it before its creation was
			// answered, decides.
			s.forward(w, r, rt.name)
			return nil
		}
		unauthenticated(w, "the bearer token is unknown or revoked")
		return nil
	}
	r = withPrincipal(r, &principal{token: tok})
	if e := authorize(rt, r, tok); e != nil {
		writeError(w, e)
		return nil
	}
	return r
}

// authorize checks the token's role and scope against the route's
// permission.
func authorize(rt route, r *http.Request, tok *wire.Token) *Error {
	if tok.Role == wire.RoleOperator {
		return nil
	}
	forbid := func(format string, args ...any) *Error {
		return apiErr(http.StatusForbidden, wire.CodeForbidden, "", "route %s needs permission %q: %s; token %s is scoped to %s",
			rt.name, rt.perm, fmt.Sprintf(format, args...), tok.Accessor, tok.Scope())
	}
	switch rt.perm {
	case permAuthenticated:
		return nil
	case permJob:
		job, err := pathID(r, "job")
		if err != nil {
			return toAPIError(err)
		}
		if !tok.Covers(job) {
			return forbid("job %q is out of scope", job)
		}
		return nil
	case permObject, permBlob:
		key := mux.Vars(r)["key"]
		job, _, _ := strings.Cut(key, "/")
		if !tok.Covers(job) {
			return forbid("key %q belongs to job %q, out of scope", key, job)
		}
		return nil
	case permOperator, permMembers:
		return forbid("only operator tokens may use it")
	}
	return forbid("the route declares no permission")
}

// operatorOnly guards a handler outside the route table (/metrics, pprof)
// with an operator token when auth is on.
func (s *Server) operatorOnly(name string, next http.Handler) http.Handler {
	rt := route{name: name, kind: local, perm: permOperator}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r = s.checkAuth(w, r, rt); r != nil {
			next.ServeHTTP(w, r)
		}
	})
}

// ---- signed object URLs ----

// Signed object URLs let an upload or a restore read reach
// /v1/objects/{key} without a bearer token: the query carries an expiry
// and an HMAC-SHA256, under the cluster's signing key (replicated through
// Raft, so every member verifies what any member signed), of the method,
// the key and the expiry. A URL admits one method on one key until it
// expires; revoking the token that obtained it does not recall it.

func objectSignature(key []byte, method, objKey string, expires int64) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "metastore-object-url-v1\n%s\n%s\n%d", method, objKey, expires)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// errNoURLKey: auth is on but the leader has not set the signing key yet.
var errNoURLKey = &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, Retryable: true,
	Message: "the object-URL signing key is not set yet (the leader sets it when it takes office); retry"}

// signObject returns the query that admits method on objKey until expires.
func (s *Server) signObject(method, objKey string, expires time.Time) (url.Values, error) {
	key, err := s.fsm.URLKey()
	if err != nil {
		return nil, err
	}
	if key == nil {
		return nil, errNoURLKey
	}
	exp := expires.Unix()
	return url.Values{"expires": {strconv.FormatInt(exp, 10)}, "sig": {objectSignature(key, method, objKey, exp)}}, nil
}

func (s *Server) verifyObjectURL(method, objKey string, q url.Values) error {
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil {
		return errors.New("expires is not a Unix time")
	}
	if s.now().Unix() > exp {
		return fmt.Errorf("expired at %s", time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	key, err := s.fsm.URLKey()
	if err != nil || key == nil {
		return errors.New("this member has no signing key yet")
	}
	want := objectSignature(key, method, objKey, exp)
	if !hmac.Equal([]byte(want), []byte(q.Get("sig"))) {
		return errors.New("the signature does not match this method and key")
	}
	return nil
}

// verifyMemberRequest checks a member's signature of its join request
// (node.HeaderMemberAuth) over the body, which it leaves readable.
func (s *Server) verifyMemberRequest(r *http.Request) error {
	expRaw, sig, ok := strings.Cut(r.Header.Get(node.HeaderMemberAuth), ":")
	exp, err := strconv.ParseInt(expRaw, 10, 64)
	if !ok || err != nil {
		return apiErr(http.StatusForbidden, wire.CodeForbidden, node.HeaderMemberAuth, "malformed member signature")
	}
	if s.now().Unix() > exp {
		return apiErr(http.StatusForbidden, wire.CodeForbidden, node.HeaderMemberAuth, "member signature expired")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	key, err := s.fsm.URLKey()
	if err != nil {
		return err
	}
	if key == nil || !hmac.Equal([]byte(node.SignMemberRequest(key, exp, body)), []byte(sig)) {
		return apiErr(http.StatusForbidden, wire.CodeForbidden, node.HeaderMemberAuth, "member signature does not match")
	}
	return nil
}

// ---- token management routes ----

// tokensCreate creates a token and answers its secret, the only time it is
// ever shown.
func (s *Server) tokensCreate(r *http.Request) (any, uint64, error) {
	var b wire.TokenRequest
	if err := decodeBody(r, &b, false); err != nil {
		return nil, 0, err
	}
	secret := GenerateToken()
	p := fsm.TokenCreate{Accessor: fsm.NewAccessor(), Hash: wire.TokenHash(secret), Role: b.Role, Job: b.Job, JobPrefix: b.JobPrefix, Description: b.Description}
	if err := p.Validate(); err != nil {
		return nil, 0, err
	}
	addAudit(r, "created_accessor", p.Accessor, "created_role", string(p.Role), "created_job", p.Job, "created_job_prefix", p.JobPrefix)
	v, idx, err := s.apply(r.Context(), fsm.CmdTokenCreate, &p)
	if err != nil {
		return nil, idx, err
	}
	tok := *v.(*fsm.TokenCreated).Token
	tok.Secret = secret
	return &tok, idx, nil
}

func (s *Server) tokensList(_ *http.Request) (any, uint64, error) {
	toks, idx, err := s.fsm.Tokens()
	if err != nil {
		return nil, idx, err
	}
	return wire.TokenList{Tokens: toks}, idx, nil
}

// tokensRevoke revokes a token; ?force=true allows revoking the last
// operator token.
func (s *Server) tokensRevoke(r *http.Request) (any, uint64, error) {
	acc := mux.Vars(r)["accessor"]
	p := fsm.TokenRevoke{Accessor: acc}
	force, err := queryBool(r, "force")
	if err != nil {
		return nil, 0, err
	}
	p.Force = force
	v, idx, err := s.apply(r.Context(), fsm.CmdTokenRevoke, &p)
	if err != nil {
		return nil, idx, err
	}
	return wire.TokenRevoked{Revoked: *v.(*wire.Token)}, idx, nil
}

// ---- scope filters used by handlers ----

// filterJobs keeps the jobs a worker token covers.
func filterJobs(r *http.Request, jobs []wire.Job) []wire.Job {
	tok, ok := restricted(r)
	if !ok {
		return jobs
	}
	return slices.DeleteFunc(jobs, func(j wire.Job) bool { return !tok.Covers(j.ID) })
}

// restoreSourceAllowed: a worker token restores from a job outside its
// scope only from a savepoint named by ?pin=: pinning is an operator's act,
// which publishes that checkpoint for forks.
func restoreSourceAllowed(r *http.Request, req fsm.RestoreRequest) error {
	tok, ok := restricted(r)
	if !ok || req.SourceJob == "" || tok.Covers(req.SourceJob) || req.Pin != "" {
		return nil
	}
	return apiErr(http.StatusForbidden, wire.CodeForbidden, "source_job",
		"route tasks.restore needs permission %q on source job %q, out of scope; a worker token restores from another job only from a savepoint (?pin=NAME); token %s is scoped to %s",
		permJob, req.SourceJob, tok.Accessor, tok.Scope())
}

// grantReads answers a restore plan with, when auth is on, a signed read
// URL query for every blob its manifests name: the plan authorizes reading
// exactly what it lists, even blobs of another job (a fork's bases).
func (s *Server) grantReads(plan *wire.RestorePlan) (*wire.RestoreAnswer, error) {
	out := &wire.RestoreAnswer{RestorePlan: plan}
	if !s.cfg.Auth || plan == nil {
		return out, nil
	}
	expires := s.now().Add(s.cfg.AuthObjectURLTTL)
	for _, kr := range plan.Kinds {
		if kr.Manifest == nil {
			continue
		}
		keys := make([]string, 0, len(kr.Manifest.Bases)+len(kr.Manifest.Segments))
		for _, b := range kr.Manifest.Bases {
			keys = append(keys, b.Key)
		}
		for _, sg := range kr.Manifest.Segments {
			keys = append(keys, sg.Key)
		}
		for _, k := range keys {
			if _, done := out.ObjectGrants[k]; done {
				continue
			}
			q, err := s.signObject(http.MethodGet, k, expires)
			if err != nil {
				return nil, err
			}
			if out.ObjectGrants == nil {
				out.ObjectGrants = map[string]string{}
			}
			out.ObjectGrants[k] = q.Encode()
		}
	}
	return out, nil
}
