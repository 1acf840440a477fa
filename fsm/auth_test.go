package fsm_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

func lookup(t *testing.T, h *harness, secret string) *wire.Token {
	t.Helper()
	tok, err := h.f.TokenByHash(wire.TokenHash(secret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenCreateLookupRevoke(t *testing.T) {
	h := newHarness(t)
	op := fsm.TokenCreate{Accessor: "0123456789abcdef", Hash: wire.TokenHash("s-op"), Role: wire.RoleOperator, Description: "admin"}
	res := mustOK(t, h.mustApply(fsm.CmdTokenCreate, op)).(*fsm.TokenCreated)
	if !res.Created || res.Token.Accessor != op.Accessor || !res.Token.CreatedAt.Equal(h.now) || res.Token.CreateIndex != h.index {
		t.Fatalf("create answered %+v (token %+v)", res, res.Token)
	}
	// The same create again (a retried proposal) answers the same token.
	again := mustOK(t, h.mustApply(fsm.CmdTokenCreate, op)).(*fsm.TokenCreated)
	if !again.Created || again.Token.CreateIndex != res.Token.CreateIndex {
		t.Fatalf("repeat answered %+v", again.Token)
	}
	// Another token under the same accessor, or with the same secret: conflict.
	other := op
	other.Hash = wire.TokenHash("s-other")
	h.reject(wire.ErrConflict, fsm.CmdTokenCreate, other)
	dupSecret := fsm.TokenCreate{Accessor: "1111111111111111", Hash: op.Hash, Role: wire.RoleWorker, Job: "a"}
	h.reject(wire.ErrConflict, fsm.CmdTokenCreate, dupSecret)

	w := fsm.TokenCreate{Accessor: "2222222222222222", Hash: wire.TokenHash("s-w"), Role: wire.RoleWorker, JobPrefix: "team-"}
	mustOK(t, h.mustApply(fsm.CmdTokenCreate, w))
	// A create under an existing accessor with the same secret is a repeat
	// only with the same role, scope and description.
	wj := fsm.TokenCreate{Accessor: "3333333333333333", Hash: wire.TokenHash("s-wj"), Role: wire.RoleWorker, Job: "a"}
	mustOK(t, h.mustApply(fsm.CmdTokenCreate, wj))
	for _, tc := range []struct {
		what string
		p    fsm.TokenCreate
	}{
		{"another description", fsm.TokenCreate{Accessor: op.Accessor, Hash: op.Hash, Role: op.Role, Description: "other"}},
		{"another job prefix", fsm.TokenCreate{Accessor: w.Accessor, Hash: w.Hash, Role: w.Role, JobPrefix: "other-"}},
		{"another job", fsm.TokenCreate{Accessor: wj.Accessor, Hash: wj.Hash, Role: wj.Role, Job: "b"}},
	} {
		if re := h.reject(wire.ErrConflict, fsm.CmdTokenCreate, tc.p); re.Field != "accessor" {
			t.Errorf("%s: refused naming %q, want accessor", tc.what, re.Field)
		}
	}
	mustOK(t, h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: wj.Accessor}))

	got := lookup(t, h, "s-w")
	if got == nil || got.Accessor != w.Accessor || got.Role != wire.RoleWorker || !got.Covers("team-x") || got.Covers("other") || got.Covers("team") {
		t.Fatalf("lookup: %+v", got)
	}
	if lookup(t, h, "s-nope") != nil {
		t.Fatal("an unknown secret found a token")
	}
	// The secret is nowhere in the file.
	for name, kv := range h.dump() {
		for k, v := range kv {
			if strings.Contains(k+v, "s-w") || strings.Contains(k+v, "s-op") {
				t.Fatalf("bucket %s holds a secret: %q=%q", name, k, v)
			}
		}
	}

	// The last operator token is kept unless forced.
	re := h.reject(wire.ErrConflict, fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: op.Accessor})
	if !strings.Contains(re.Message, "last operator token") {
		t.Fatalf("refusal: %v", re)
	}
	mustOK(t, h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: w.Accessor}))
	if lookup(t, h, "s-w") != nil {
		t.Fatal("a revoked token is still found")
	}
	h.reject(wire.ErrNotFound, fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: w.Accessor})
	if re := h.reject(wire.ErrInvalid, fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: "XYZ"}); re.Field != "accessor" {
		t.Fatalf("revocation of a malformed accessor: %v", re)
	}
	mustOK(t, h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: op.Accessor, Force: true}))
	toks, _, err := h.f.Tokens()
	if err != nil || len(toks) != 0 {
		t.Fatalf("tokens after revoking all: %v %v", toks, err)
	}
}

func TestTokenBootstrapOnlyWhenEmpty(t *testing.T) {
	h := newHarness(t)
	boot := fsm.TokenCreate{Accessor: "aaaaaaaaaaaaaaaa", Hash: wire.TokenHash("boot"), Role: wire.RoleOperator, Bootstrap: true}
	if r := mustOK(t, h.mustApply(fsm.CmdTokenCreate, boot)).(*fsm.TokenCreated); !r.Created {
		t.Fatal("bootstrap into an empty table created nothing")
	}
	// Another member's bootstrap (another accessor) changes nothing.
	second := boot
	second.Accessor = "bbbbbbbbbbbbbbbb"
	before := h.hash()
	if r := mustOK(t, h.mustApply(fsm.CmdTokenCreate, second)).(*fsm.TokenCreated); r.Created {
		t.Fatal("a second bootstrap created a token")
	}
	if h.hash() != before {
		t.Fatal("a skipped bootstrap changed the state")
	}
	h.reopen()
	if lookup(t, h, "boot") == nil {
		t.Fatal("bootstrap token lost across a reopen")
	}
}

func TestTokenCreateValidation(t *testing.T) {
	h := newHarness(t)
	hash := wire.TokenHash("x")
	for name, p := range map[string]fsm.TokenCreate{
		"bad accessor":       {Accessor: "XYZ", Hash: hash, Role: wire.RoleOperator},
		"bad hash":           {Accessor: "0123456789abcdef", Hash: "plain-secret", Role: wire.RoleOperator},
		"unknown role":       {Accessor: "0123456789abcdef", Hash: hash, Role: "root"},
		"operator with job":  {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleOperator, Job: "a"},
		"worker no scope":    {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleWorker},
		"worker both scopes": {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleWorker, Job: "a", JobPrefix: "a"},
		"worker bad job":     {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleWorker, Job: "../a"},
		"worker bad prefix":  {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleWorker, JobPrefix: "a/b"},
		"long description":   {Accessor: "0123456789abcdef", Hash: hash, Role: wire.RoleOperator, Description: strings.Repeat("d", wire.MaxReasonLen+1)},
	} {
		h.run(t, name, func(*testing.T) { h.reject(wire.ErrInvalid, fsm.CmdTokenCreate, p) })
	}
}

func TestURLKeyFirstWins(t *testing.T) {
	h := newHarness(t)
	if k, err := h.f.URLKey(); err != nil || k != nil {
		t.Fatalf("fresh state has a url key %x (%v)", k, err)
	}
	h.reject(wire.ErrInvalid, fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: []byte("short")})
	first := bytes.Repeat([]byte{1}, fsm.URLKeyLen)
	if set := mustOK(t, h.mustApply(fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: first})).(bool); !set {
		t.Fatal("first init did not set the key")
	}
	h.advance(time.Second)
	if set := mustOK(t, h.mustApply(fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: bytes.Repeat([]byte{2}, fsm.URLKeyLen)})).(bool); set {
		t.Fatal("second init replaced the key")
	}
	if k, _ := h.f.URLKey(); !bytes.Equal(k, first) {
		t.Fatalf("key %x, want the first", k)
	}
}
