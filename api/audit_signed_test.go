package api_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// TestSignaturesAdmitOnlyTheirRoute: a signed object URL admits its
// method on /v1/objects/{key} only, and a member's signature admits a
// join request only: on any other route, with a valid signature, the
// request still needs a bearer token. Found by a mutation audit: with
// checkAuth honouring either signature on every route, every API test
// passed.
func TestSignaturesAdmitOnlyTheirRoute(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	slot := uploadSlot(t, m.URL, "ja", op)
	if r := doTok(t, "PUT", slot.URL, "", []byte("payload")); r.status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", r.status, r.body)
	}
	key, err := m.FSM.URLKey()
	if err != nil || key == nil {
		t.Fatalf("signing key: %v", err)
	}
	exp := time.Now().Add(time.Hour).Unix()

	// A GET signature of the blob's key, as a restore plan grants it,
	// is admitted by the object route (which answers that the upload is
	// not committed yet), and by nothing else under the same key.
	q := url.Values{"expires": {itoa(exp)}, "sig": {api.ObjectSignature(key, "GET", slot.Key, exp)}}.Encode()
	if r := doTok(t, "GET", m.URL+"/v1/objects/"+slot.Key+"?"+q, "", nil); r.status != http.StatusConflict {
		t.Fatalf("signed read: %d %s", r.status, r.body)
	}
	expectAuthError(t, doTok(t, "GET", m.URL+"/v1/blobs/"+slot.Key+"?"+q, "", nil),
		http.StatusUnauthorized, wire.CodeUnauthenticated, "object signature on /v1/blobs/{key}")
	// A signature without its expiry is a refused signed URL (403 on
	// sig, saying why), not a missing token.
	sigOnly := url.Values{"sig": {api.ObjectSignature(key, "GET", slot.Key, exp)}}.Encode()
	r := doTok(t, "GET", m.URL+"/v1/objects/"+slot.Key+"?"+sigOnly, "", nil)
	expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "signed URL without expires")
	if e := apiErrorOf(t, r); e.Error.Field != "sig" || !strings.Contains(e.Error.Message, "expires") {
		t.Fatalf("signed URL without expires: %s", r.body)
	}

	// A member's signature over an empty body, on routes other than the
	// join request.
	sig := itoa(exp) + ":" + node.SignMemberRequest(key, exp, nil)
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/tokens"},
		{"GET", "/v1/jobs/ja"},
		{"DELETE", "/v1/jobs/ja"},
	} {
		req, err := http.NewRequest(rt.method, m.URL+rt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(node.HeaderMemberAuth, sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		expectAuthError(t, response{status: resp.StatusCode, header: resp.Header, body: raw},
			http.StatusUnauthorized, wire.CodeUnauthenticated, "member signature on "+rt.method+" "+rt.path)
	}
	okTok(t, "GET", m.URL+"/v1/jobs/ja", op, nil, nil) // not deleted
}

// TestReadGrantsExpire: the signed reads a restore plan carries expire
// after --auth-object-url-ttl: revoking the token that obtained them does
// not recall them, so their lifetime is all that bounds them. Found by a
// mutation audit: grants without that bound passed every API test.
func TestReadGrantsExpire(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	slot := uploadSlot(t, m.URL, "ja", op)
	data := "state"
	if r := doTok(t, "PUT", slot.URL, "", []byte(data)); r.status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", r.status, r.body)
	}
	okTok(t, "POST", m.URL+"/v1/jobs/ja/epochs", op, []byte(`{"generation":1,"epoch":1}`), nil)
	ack := `{"generation":1,"manifest":{"blobs":[{"key":"` + slot.Key + `","size":5}],` +
		`"delta":{"add_segments":[{"key":"` + slot.Key + `","offset":0,"length":5,"first_seq":1,"last_seq":1}]}}}`
	okTok(t, "PUT", m.URL+"/v1/jobs/ja/epochs/1/acks/t1", op, []byte(ack), nil)

	before := time.Now()
	var plan wire.RestoreAnswer
	okTok(t, "GET", m.URL+"/v1/jobs/ja/tasks/t1/restore", op, nil, &plan)
	after := time.Now()
	g, ok := plan.ObjectGrants[slot.Key]
	if !ok {
		t.Fatalf("no grant for %s: %+v", slot.Key, plan.ObjectGrants)
	}
	q, err := url.ParseQuery(g)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Unix(mustInt(t, q.Get("expires")), 0)
	ttl := m.Cfg.AuthObjectURLTTL
	if exp.Before(before.Add(ttl).Add(-time.Second)) || exp.After(after.Add(ttl).Add(time.Second)) {
		t.Fatalf("grant expires at %s; asked between %s and %s with a TTL of %s", exp, before, after, ttl)
	}
	if r := doTok(t, "GET", m.URL+"/v1/objects/"+slot.Key+"?"+g, "", nil); r.status != http.StatusOK || !bytes.Equal(r.body, []byte(data)) {
		t.Fatalf("read by the grant: %d %s", r.status, r.body)
	}
	if !strings.Contains(g, "sig=") {
		t.Fatalf("grant %q", g)
	}
}

// TestReadGrantsCoverBases: a restore plan grants reads of its
// manifest's materialized bases as of its changelog segments: a worker
// restoring from a base reads it without a token. Found by a mutation
// audit: grants without the bases survived every API test (whose
// manifests held segments only).
func TestReadGrantsCoverBases(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	slot := uploadSlot(t, m.URL, "ja", op)
	if r := doTok(t, "PUT", slot.URL, "", []byte("base!")); r.status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", r.status, r.body)
	}
	okTok(t, "POST", m.URL+"/v1/jobs/ja/epochs", op, []byte(`{"generation":1,"epoch":1}`), nil)
	ack := `{"generation":1,"manifest":{"blobs":[{"key":"` + slot.Key + `","size":5}],` +
		`"delta":{"materialize":{"bases":[{"key":"` + slot.Key + `","offset":0,"length":5}],"truncate_before":0}}}}`
	okTok(t, "PUT", m.URL+"/v1/jobs/ja/epochs/1/acks/t1", op, []byte(ack), nil)
	var plan wire.RestoreAnswer
	okTok(t, "GET", m.URL+"/v1/jobs/ja/tasks/t1/restore", op, nil, &plan)
	g, ok := plan.ObjectGrants[slot.Key]
	if !ok {
		t.Fatalf("no grant for the base %s: %+v", slot.Key, plan.ObjectGrants)
	}
	if r := doTok(t, "GET", m.URL+"/v1/objects/"+slot.Key+"?"+g, "", nil); r.status != http.StatusOK || string(r.body) != "base!" {
		t.Fatalf("read of the base by its grant: %d %s", r.status, r.body)
	}
}
