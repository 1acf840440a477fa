package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// keylessMember is a single member with auth on whose leader runs no
// background task, so the cluster's signing key (leader.AuthBootstrap) is
// never set: the state every member is in until the first leader took
// office. Its tokens are proposed directly.
type keylessMember struct {
	url  string
	f    *fsm.FSM
	node *node.Node
}

func startKeyless(t *testing.T) *keylessMember {
	t.Helper()
	l, addr := testmember.FreeAddr(t)
	cfg := testmember.Config(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = testmember.FreePort(t)
	cfg.Auth = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := fsm.Open(cfg.FSMPath(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := blobstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(cfg, node.Deps{FSM: f})
	if err != nil {
		t.Fatal(err)
	}
	n.Lead(nil)
	srv := api.New(api.Deps{Config: cfg, Node: n, FSM: f, Store: store, Registry: prometheus.NewRegistry()})
	hs := api.NewHTTPServer(cfg, srv.Handler(), nil)
	go hs.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Close()
		n.Shutdown(ctx)
		f.Close()
	})
	waitFor(t, 10*time.Second, "leader", func() bool { return n.IsLeader() && n.Ready() == nil })
	waitFor(t, 10*time.Second, "member record", func() bool {
		ms, err := f.Members()
		return err == nil && len(ms) == 1
	})
	if key, err := f.URLKey(); err != nil || key != nil {
		t.Fatalf("signing key %x %v: the test needs a member without one", key, err)
	}
	return &keylessMember{url: "http://" + addr, f: f, node: n}
}

// token proposes a token and returns its secret.
func (k *keylessMember) token(t *testing.T, role wire.Role, job string) string {
	t.Helper()
	secret := api.GenerateToken()
	p := &fsm.TokenCreate{Accessor: fsm.NewAccessor(), Hash: wire.TokenHash(secret), Role: role, Job: job}
	if _, _, err := k.node.Propose(context.Background(), fsm.CmdTokenCreate, p); err != nil {
		t.Fatal(err)
	}
	return secret
}

// TestNoSigningKeyNoSignedAccess: until the leader set the cluster's
// signing key, nothing signed is accepted, though a signature made with an
// empty key is what anyone can compute: neither a signed object URL nor
// a member's join request. An upload request fails before any intent is
// recorded (no partial write). Found by a mutation audit: with the
// "key == nil" checks of verifyObjectURL, verifyMemberRequest and
// uploadsCreate removed, every API test passed.
func TestNoSigningKeyNoSignedAccess(t *testing.T) {
	k := startKeyless(t)
	op := k.token(t, wire.RoleOperator, "")

	// A signed object URL under the empty key.
	objKey := "ja/t1/" + strings.Repeat("0", 32)
	exp := time.Now().Add(time.Hour).Unix()
	q := url.Values{"expires": {itoa(exp)}, "sig": {api.ObjectSignature(nil, "PUT", objKey, exp)}}
	r := doTok(t, "PUT", k.url+"/v1/objects/"+objKey+"?"+q.Encode(), "", []byte("x"))
	expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "object URL signed with the empty key")
	if !strings.Contains(string(r.body), "no signing key") {
		t.Fatalf("refusal does not say why: %s", r.body)
	}

	// A join request signed with the empty key.
	body := []byte(`{"id":"n9","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`)
	req, err := http.NewRequest("POST", k.url+"/v1/members", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(node.HeaderMemberAuth, itoa(exp)+":"+node.SignMemberRequest(nil, exp, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	expectAuthError(t, response{status: resp.StatusCode, header: resp.Header, body: raw}, http.StatusForbidden, wire.CodeForbidden, "join request signed with the empty key")
	if ms, err := k.f.Members(); err != nil || len(ms) != 1 {
		t.Fatalf("members after the join request: %+v %v", ms, err)
	}

	// An upload request is refused before any intent is recorded.
	okTok(t, "PUT", k.url+"/v1/jobs/ja", op, []byte("{}"), nil)
	okTok(t, "POST", k.url+"/v1/jobs/ja/attempts", op,
		[]byte(`{"attempt_id":"a1","tasks":[{"id":"t1","capabilities":["state","incremental"]}]}`), nil)
	r = doTok(t, "POST", k.url+"/v1/jobs/ja/uploads", op, []byte(`{"generation":1,"task":"t1","count":3}`))
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("uploads without a signing key: %d %s", r.status, r.body)
	}
	var e apiError
	r.decode(t, &e)
	if e.Error.Code != wire.CodeUnavailable || !e.Error.Retryable {
		t.Fatalf("uploads without a signing key: %s", r.body)
	}
	if u, _, err := k.f.ScanJobUsage("ja"); err != nil || u.Intents != 0 {
		t.Fatalf("the refused upload request recorded intents: %+v %v", u, err)
	}
}
