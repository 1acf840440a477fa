package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// logBuffer collects log output from every goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// authConfig turns auth on with a bootstrap token file holding secret.
func authConfig(t *testing.T, secret string) func(*config.Config) {
	path := filepath.Join(t.TempDir(), "bootstrap-token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *config.Config) {
		c.Auth = true
		c.AuthBootstrapTokenFile = path
	}
}

// waitAuthReady waits until m applied the bootstrap token and the URL key.
func waitAuthReady(t *testing.T, m *member, secret string) {
	t.Helper()
	waitFor(t, 10*time.Second, "auth bootstrap applied on "+m.ID, func() bool {
		tok, err := m.FSM.TokenByHash(wire.TokenHash(secret))
		key, kerr := m.FSM.URLKey()
		return err == nil && tok != nil && kerr == nil && key != nil
	})
}

// startAuthSingle starts a single member with auth on, logging to logger.
func startAuthSingle(t *testing.T, logger *slog.Logger) (*member, string) {
	t.Helper()
	secret := api.GenerateToken()
	l, addr := testmember.FreeAddr(t)
	cfg := testmember.Config(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = testmember.FreePort(t)
	authConfig(t, secret)(&cfg)
	m := testmember.StartLogged(t, cfg, l, "", logger)
	waitFor(t, 10*time.Second, "leader", func() bool { return m.Node.IsLeader() && m.Node.Ready() == nil })
	waitAuthReady(t, m, secret)
	return m, secret
}

// doTok is do with a bearer token ("" sends none).
func doTok(t *testing.T, method, u, token string, body []byte) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

func okTok(t *testing.T, method, u, token string, body []byte, out any) {
	t.Helper()
	r := doTok(t, method, u, token, body)
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", method, u, r.status, r.body)
	}
	if out != nil {
		r.decode(t, out)
	}
}

// createToken creates a token through the API and returns its secret and
// accessor.
func createToken(t *testing.T, base, opToken string, body string) (secret, accessor string) {
	t.Helper()
	var out struct {
		Secret   string `json:"secret"`
		Accessor string `json:"accessor"`
		Hash     string `json:"hash"`
	}
	okTok(t, "POST", base+"/v1/tokens", opToken, []byte(body), &out)
	if api.CheckTokenFormat(out.Secret) != nil || out.Accessor == "" || out.Hash != "" {
		t.Fatalf("token answer %+v", out)
	}
	return out.Secret, out.Accessor
}

func expectAuthError(t *testing.T, r response, status int, code wire.Code, what string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	var e apiError
	r.decode(t, &e)
	if e.Error.Code != code || e.Error.Retryable {
		t.Fatalf("%s: error %+v, want code %s, not retryable", what, e.Error, code)
	}
	if status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("%s: 401 without WWW-Authenticate: Bearer (%q)", what, r.header.Get("WWW-Authenticate"))
	}
}

func TestEveryRouteHasAPermission(t *testing.T) {
	routes := api.Routes()
	if len(routes) < 30 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, rt := range routes {
		if rt.Perm == "unset" {
			t.Errorf("route %s (%s %s) declares no permission", rt.Name, rt.Method, rt.Path)
		}
	}
}

// routeURL fills a route's path variables for job.
func routeURL(base string, rt api.RouteInfo, job string) string {
	p := strings.NewReplacer(
		"{job}", job, "{generation}", "1", "{epoch}", "1", "{task}", "t1",
		"{key:.+}", job+"/t1/"+strings.Repeat("0", 32), "{id}", "n9", "{accessor}", "0000000000000000",
	).Replace(rt.Path)
	return base + p
}

func routeBody(rt api.RouteInfo) []byte {
	switch {
	case rt.Name == "objects.put":
		return []byte("x")
	case rt.Method == "PUT" || rt.Method == "POST":
		return []byte("{}")
	}
	return nil
}

// TestAuthRouteMatrix: every route of the table, with no token, an
// operator token, a worker token on its job, on another job, and on
// operator routes.
func TestAuthRouteMatrix(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	for _, j := range []string{"ja", "jb", "jd"} {
		okTok(t, "PUT", m.URL+"/v1/jobs/"+j, op, []byte("{}"), nil)
	}
	worker, _ := createToken(t, m.URL, op, `{"role":"worker","job":"ja","description":"ja worker"}`)
	prefixed, _ := createToken(t, m.URL, op, `{"role":"worker","job_prefix":"j"}`)

	for _, rt := range api.Routes() {
		t.Run(rt.Name, func(t *testing.T) {
			u := routeURL(m.URL, rt, "ja")
			if rt.Name == "jobs.delete" {
				u = routeURL(m.URL, rt, "jd") // the operator's call deletes it
			}
			expectAuthError(t, doTok(t, rt.Method, u, "", routeBody(rt)), http.StatusUnauthorized, wire.CodeUnauthenticated, "no token")
			expectAuthError(t, doTok(t, rt.Method, u, api.GenerateToken(), routeBody(rt)), http.StatusUnauthorized, wire.CodeUnauthenticated, "unknown token")
			if r := doTok(t, rt.Method, u, op, routeBody(rt)); r.status == 401 || r.status == 403 {
				t.Fatalf("operator token: %d %s", r.status, r.body)
			}
			switch rt.Perm {
			case "operator", "operator-or-member":
				r := doTok(t, rt.Method, u, worker, routeBody(rt))
				expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "worker on an operator route")
				if !strings.Contains(string(r.body), `\"`+rt.Perm+`\"`) || !strings.Contains(string(r.body), `job \"ja\"`) {
					t.Fatalf("403 does not name the permission and the scope: %s", r.body)
				}
			case "authenticated":
				if r := doTok(t, rt.Method, u, worker, routeBody(rt)); r.status == 401 || r.status == 403 {
					t.Fatalf("worker token: %d %s", r.status, r.body)
				}
			default: // job, object, blob: scoped by job
				if r := doTok(t, rt.Method, u, worker, routeBody(rt)); r.status == 401 || r.status == 403 {
					t.Fatalf("worker token on its job: %d %s", r.status, r.body)
				}
				if r := doTok(t, rt.Method, u, prefixed, routeBody(rt)); r.status == 401 || r.status == 403 {
					t.Fatalf("prefix token on a covered job: %d %s", r.status, r.body)
				}
				other := routeURL(m.URL, rt, "jb")
				r := doTok(t, rt.Method, other, worker, routeBody(rt))
				expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "worker on another job")
				if !strings.Contains(string(r.body), "jb") || !strings.Contains(string(r.body), `job \"ja\"`) {
					t.Fatalf("403 does not name the job and the scope: %s", r.body)
				}
				expectAuthError(t, doTok(t, rt.Method, routeURL(m.URL, rt, "other"), prefixed, routeBody(rt)), http.StatusForbidden, wire.CodeForbidden, "prefix token outside its prefix")
			}
		})
	}

	// Open and operator-only endpoints outside the table.
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := doTok(t, "GET", m.URL+p, "", nil); r.status != http.StatusOK {
			t.Fatalf("%s without a token: %d", p, r.status)
		}
	}
	expectAuthError(t, doTok(t, "GET", m.URL+"/metrics", "", nil), http.StatusUnauthorized, wire.CodeUnauthenticated, "/metrics without a token")
	expectAuthError(t, doTok(t, "GET", m.URL+"/metrics", worker, nil), http.StatusForbidden, wire.CodeForbidden, "/metrics with a worker token")
	if r := doTok(t, "GET", m.URL+"/metrics", op, nil); r.status != http.StatusOK {
		t.Fatalf("/metrics with the operator token: %d", r.status)
	}

	// A join request with a forged or expired member signature.
	body := []byte(`{"id":"n9","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`)
	key, err := m.FSM.URLKey()
	if err != nil {
		t.Fatal(err)
	}
	for what, hdr := range map[string]string{
		"forged":  itoa(time.Now().Add(time.Minute).Unix()) + ":" + strings.Repeat("A", 43),
		"expired": itoa(time.Now().Add(-time.Minute).Unix()) + ":" + node.SignMemberRequest(key, time.Now().Add(-time.Minute).Unix(), body),
		"garbage": "nonsense",
	} {
		req, _ := http.NewRequest("POST", m.URL+"/v1/members", bytes.NewReader(body))
		req.Header.Set(node.HeaderMemberAuth, hdr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		expectAuthError(t, response{status: resp.StatusCode, header: resp.Header, body: raw}, http.StatusForbidden, wire.CodeForbidden, what+" member signature")
	}

	// The job list is filtered to the worker's scope.
	var jobs struct {
		Jobs []wire.Job `json:"jobs"`
	}
	okTok(t, "GET", m.URL+"/v1/jobs", worker, nil, &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != "ja" {
		t.Fatalf("worker's job list: %+v", jobs.Jobs)
	}
	okTok(t, "GET", m.URL+"/v1/jobs", op, nil, &jobs)
	if len(jobs.Jobs) != 2 {
		t.Fatalf("operator's job list: %+v", jobs.Jobs)
	}
}

func TestTokenLifecycle(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	worker, wacc := createToken(t, m.URL, op, `{"role":"worker","job":"ja"}`)
	okTok(t, "GET", m.URL+"/v1/jobs/ja", worker, nil, nil)

	// The list shows accessors, never secrets or hashes.
	r := doTok(t, "GET", m.URL+"/v1/tokens", op, nil)
	if r.status != 200 || !strings.Contains(string(r.body), wacc) || strings.Contains(string(r.body), worker) ||
		strings.Contains(string(r.body), wire.TokenHash(worker)) || strings.Contains(string(r.body), wire.TokenHash(op)) {
		t.Fatalf("token list: %d %s", r.status, r.body)
	}

	// Bad creates are 400s naming the field.
	for body, field := range map[string]string{
		`{"role":"root"}`:                     "role",
		`{"role":"worker"}`:                   "job",
		`{"role":"operator","job":"ja"}`:      "job",
		`{"role":"worker","job_prefix":"a/"}`: "job_prefix",
	} {
		expectError(t, doTok(t, "POST", m.URL+"/v1/tokens", op, []byte(body)), 400, wire.CodeInvalid, field)
	}

	// Revocation takes effect at once.
	okTok(t, "DELETE", m.URL+"/v1/tokens/"+wacc, op, nil, nil)
	expectAuthError(t, doTok(t, "GET", m.URL+"/v1/jobs/ja", worker, nil), http.StatusUnauthorized, wire.CodeUnauthenticated, "revoked token")
	expectError(t, doTok(t, "DELETE", m.URL+"/v1/tokens/"+wacc, op, nil), 404, wire.CodeNotFound, "accessor")

	// The last operator token is kept unless forced.
	var list struct {
		Tokens []struct{ Accessor, Role string } `json:"tokens"`
	}
	okTok(t, "GET", m.URL+"/v1/tokens", op, nil, &list)
	if len(list.Tokens) != 1 || list.Tokens[0].Role != "operator" {
		t.Fatalf("tokens: %+v", list.Tokens)
	}
	boot := list.Tokens[0].Accessor
	expectError(t, doTok(t, "DELETE", m.URL+"/v1/tokens/"+boot, op, nil), 409, wire.CodeConflict, "accessor")
	op2, _ := createToken(t, m.URL, op, `{"role":"operator","description":"rotated"}`)
	okTok(t, "DELETE", m.URL+"/v1/tokens/"+boot, op2, nil, nil)
	expectAuthError(t, doTok(t, "GET", m.URL+"/v1/tokens", op, nil), http.StatusUnauthorized, wire.CodeUnauthenticated, "rotated-out operator token")
	okTok(t, "GET", m.URL+"/v1/tokens", op2, nil, nil)
}

// uploadSlot starts an attempt of job with one incremental state task and
// asks for an upload slot as token.
func uploadSlot(t *testing.T, base, job, token string) wire.Upload {
	t.Helper()
	okTok(t, "POST", base+"/v1/jobs/"+job+"/attempts", token,
		[]byte(`{"attempt_id":"a1","tasks":[{"id":"t1","capabilities":["state","incremental"]}]}`), nil)
	var ans struct {
		Uploads []wire.Upload `json:"uploads"`
	}
	okTok(t, "POST", base+"/v1/jobs/"+job+"/uploads", token, []byte(`{"generation":1,"task":"t1"}`), &ans)
	if len(ans.Uploads) != 1 {
		t.Fatalf("uploads: %+v", ans)
	}
	return ans.Uploads[0]
}

func TestSignedObjectURLs(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	worker, _ := createToken(t, m.URL, op, `{"role":"worker","job":"ja"}`)
	slot := uploadSlot(t, m.URL, "ja", worker)
	su, err := url.Parse(slot.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := su.Query()
	if q.Get("sig") == "" || q.Get("expires") == "" {
		t.Fatalf("upload URL is not signed: %s", slot.URL)
	}
	exp := time.Unix(mustInt(t, q.Get("expires")), 0)
	if d := exp.Sub(slot.ExpiresAt); d > time.Second || d < -time.Second {
		t.Fatalf("URL expires at %s, the lease at %s", exp, slot.ExpiresAt)
	}
	withQuery := func(path string, q url.Values) string { return m.URL + path + "?" + q.Encode() }

	// Another key with the same signature.
	otherKey := "ja/t1/" + strings.Repeat("1", 32)
	expectAuthError(t, doTok(t, "PUT", withQuery("/v1/objects/"+otherKey, q), "", []byte("x")), http.StatusForbidden, wire.CodeForbidden, "signature of another key")
	// Another method (the PUT URL does not read).
	expectAuthError(t, doTok(t, "GET", withQuery(su.Path, q), "", nil), http.StatusForbidden, wire.CodeForbidden, "PUT signature used for GET")
	// Tampered signature, tampered expiry.
	bad := url.Values{"expires": q["expires"], "sig": {strings.Repeat("A", len(q.Get("sig")))}}
	expectAuthError(t, doTok(t, "PUT", withQuery(su.Path, bad), "", []byte("x")), http.StatusForbidden, wire.CodeForbidden, "tampered signature")
	later := url.Values{"expires": {"99999999999"}, "sig": q["sig"]}
	expectAuthError(t, doTok(t, "PUT", withQuery(su.Path, later), "", []byte("x")), http.StatusForbidden, wire.CodeForbidden, "tampered expiry")
	// Expired, though correctly signed.
	key, err := m.FSM.URLKey()
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).Unix()
	expired := url.Values{"expires": {itoa(past)}, "sig": {api.ObjectSignature(key, "PUT", slot.Key, past)}}
	r := doTok(t, "PUT", withQuery(su.Path, expired), "", []byte("x"))
	expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "expired signature")
	if !strings.Contains(string(r.body), "expired") {
		t.Fatalf("expired URL answer: %s", r.body)
	}

	// The URL as issued works without a token.
	if r := doTok(t, "PUT", slot.URL, "", []byte("payload")); r.status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", r.status, r.body)
	}
	// Another job's worker cannot read it with its token.
	okTok(t, "PUT", m.URL+"/v1/jobs/jb", op, []byte("{}"), nil)
	other, _ := createToken(t, m.URL, op, `{"role":"worker","job":"jb"}`)
	expectAuthError(t, doTok(t, "GET", m.URL+"/v1/objects/"+slot.Key, other, nil), http.StatusForbidden, wire.CodeForbidden, "another job's blob")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestForkRestoreWithWorkerToken: a job forked from another job's pinned
// savepoint restores with a worker token of its own job: the restore plan
// carries signed reads of the source job's blobs. Without naming the
// savepoint, the source job is out of scope.
func TestForkRestoreWithWorkerToken(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	ctx := context.Background()
	opc := newClient(t, m, op)
	for _, j := range []string{"src", "dst"} {
		if _, err := opc.PutJob(ctx, j, wire.JobConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	srcTok, _ := createToken(t, m.URL, op, `{"role":"worker","job":"src"}`)
	dstTok, _ := createToken(t, m.URL, op, `{"role":"worker","job":"dst"}`)
	src, dst := newClient(t, m, srcTok), newClient(t, m, dstTok)

	caps := fsm.Caps(0)
	if err := caps.UnmarshalJSON([]byte(`["state","incremental"]`)); err != nil {
		t.Fatal(err)
	}
	tk := wire.Task{ID: "agg", Caps: caps}
	a, err := src.StartAttempt(ctx, "src", "src-1", []wire.Task{tk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.BeginEpoch(ctx, "src", a.Generation, 1); err != nil {
		t.Fatal(err)
	}
	data := []byte("the state of agg at epoch 1")
	key, err := src.Upload(ctx, "src", a.Generation, "agg", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := client.NewTaskState(nil, caps)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.AddBlob(key, uint64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegment(key, 0, uint64(len(data)), 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Ack(ctx, "src", a.Generation, 1, "agg", client.AckRequest{Manifest: ts.Manifest()}); err != nil {
		t.Fatal(err)
	}
	// Pinning is an operator's act.
	if _, err := src.Pin(ctx, "src", 1, "sp1"); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("worker pin: %v, want ErrForbidden", err)
	}
	if _, err := opc.Pin(ctx, "src", 1, "sp1"); err != nil {
		t.Fatal(err)
	}

	// dst cannot read src's checkpoint by epoch, nor its blob directly.
	if _, err := dst.Restore(ctx, "dst", "agg", client.RestoreOptions{SourceJob: "src"}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("restore from another job without a pin: %v, want ErrForbidden", err)
	}
	if _, err := dst.ReadBlob(ctx, key, 0, -1); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("reading another job's blob: %v, want ErrForbidden", err)
	}
	// From the savepoint it can, blobs included.
	rs, err := dst.Restore(ctx, "dst", "agg", client.RestoreOptions{SourceJob: "src", Pin: "sp1"})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rs.OpenState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored %q (%v), want %q", got, err, data)
	}
	// Without a token nothing works, and the client does not retry it.
	anon := newClient(t, m, "")
	before := anon.Stats()
	if _, err := anon.Job(ctx, "dst"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("no token: %v, want ErrUnauthenticated", err)
	}
	if d := anon.Stats().Sub(before); d.Retries != 0 {
		t.Fatalf("a 401 was retried %d times", d.Retries)
	}
}

func newClient(t *testing.T, m *member, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: []string{m.URL}, Token: token, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuthThroughFollowersKeepsSecretsOutOfLogs: requests sent to a
// follower are checked there and again by the leader; the secrets never
// reach a log line, at debug level, of any member.
func TestAuthThroughFollowersKeepsSecretsOutOfLogs(t *testing.T) {
	logs := &logBuffer{}
	op := api.GenerateToken()
	ms := testmember.StartClusterLogged(t, 3, authConfig(t, op), debugLogger(logs))
	for _, m := range ms {
		waitAuthReady(t, m, op)
	}
	leader := testmember.LeaderOf(ms)
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
		}
	}
	okTok(t, "PUT", follower.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	okTok(t, "PUT", follower.URL+"/v1/jobs/jb", op, []byte("{}"), nil)
	// A token created through the follower is usable through it at once
	// (a member that has not applied it yet defers to the leader).
	worker, wacc := createToken(t, follower.URL, op, `{"role":"worker","job":"ja"}`)
	okTok(t, "PUT", follower.URL+"/v1/jobs/ja", worker, []byte(`{"config":{"retained":2}}`), nil)
	okTok(t, "GET", follower.URL+"/v1/jobs/ja", worker, nil, nil)
	expectAuthError(t, doTok(t, "PUT", follower.URL+"/v1/jobs/jb", worker, []byte("{}")), http.StatusForbidden, wire.CodeForbidden, "other job via a follower")
	expectAuthError(t, doTok(t, "POST", follower.URL+"/v1/gc/run?dry_run=true", worker, nil), http.StatusForbidden, wire.CodeForbidden, "gc via a follower")
	expectAuthError(t, doTok(t, "DELETE", follower.URL+"/v1/members/"+leader.ID, worker, nil), http.StatusForbidden, wire.CodeForbidden, "members via a follower")
	expectAuthError(t, doTok(t, "GET", follower.URL+"/v1/jobs/ja", "", nil), http.StatusUnauthorized, wire.CodeUnauthenticated, "no token via a follower")
	// An upload through the follower: the signed URL names the leader; any
	// member verifies it.
	slot := uploadSlot(t, follower.URL, "ja", worker)
	su, _ := url.Parse(slot.URL)
	if r := doTok(t, "PUT", follower.URL+su.RequestURI(), "", []byte("blob")); r.status != http.StatusOK {
		t.Fatalf("signed upload through a follower: %d %s", r.status, r.body)
	}

	// Revocation: the leader refuses the token as soon as the revoke is
	// answered, even for a write sent through a follower that has not
	// applied it yet.
	okTok(t, "DELETE", follower.URL+"/v1/tokens/"+wacc, op, nil, nil)
	expectAuthError(t, doTok(t, "PUT", follower.URL+"/v1/jobs/ja", worker, []byte("{}")), http.StatusUnauthorized, wire.CodeUnauthenticated, "revoked token via a follower")

	out := logs.String()
	if !strings.Contains(out, "bootstrap operator token created") {
		t.Fatalf("the capture saw no auth log line; logs:\n%.2000s", out)
	}
	for name, secret := range map[string]string{"operator": op, "worker": worker, "signature": su.Query().Get("sig")} {
		if strings.Contains(out, secret) {
			t.Errorf("the %s secret appears in the logs", name)
		}
	}
}

// TestBootstrapIdempotentAcrossRestart: restarting with the same bootstrap
// file, or another one, creates no second token.
func TestBootstrapIdempotentAcrossRestart(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	cfg := m.Cfg
	toks, _, err := m.FSM.Tokens()
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens after bootstrap: %v %v", toks, err)
	}
	for i, secret := range []string{op, api.GenerateToken()} {
		m.Stop()
		authConfig(t, secret)(&cfg)
		l, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		logs := &logBuffer{}
		m = testmember.StartLogged(t, cfg, l, "", debugLogger(logs))
		// The bootstrap task has run to its end.
		waitFor(t, 10*time.Second, "the auth bootstrap task to finish", func() bool {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `msg="leader task stopped"`) && strings.Contains(line, "task=auth-bootstrap") {
					return true
				}
			}
			return false
		})
		okTok(t, "GET", m.URL+"/v1/tokens", op, nil, nil)
		again, _, err := m.FSM.Tokens()
		if err != nil || len(again) != 1 || again[0].Accessor != toks[0].Accessor {
			t.Fatalf("restart %d: tokens %v (%v), want only %s", i, again, err, toks[0].Accessor)
		}
		if secret != op {
			expectAuthError(t, doTok(t, "GET", m.URL+"/v1/tokens", secret, nil), http.StatusUnauthorized, wire.CodeUnauthenticated, "a later bootstrap token")
		}
	}
}
