package fsm_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Audit of the tokens (auth.go).

// TestAuditOperatorTokenTakesNoScope: an operator token covers every
// job: a create naming a job prefix for it is refused, as one naming a
// job is, and writes nothing.
func TestAuditOperatorTokenTakesNoScope(t *testing.T) {
	h := newHarness(t)
	h.reject(wire.ErrInvalid, fsm.CmdTokenCreate, fsm.TokenCreate{Accessor: "0123456789abcdef", Hash: wire.TokenHash("x"), Role: wire.RoleOperator, JobPrefix: "team-"})
}

// TestAuditRevokedSecretLeavesNothing: a revocation removes the token's
// record and the index of its secret's hash: nothing of it stays in the
// auth bucket, the secret finds no token, and a new token may be created
// with it under another accessor.
func TestAuditRevokedSecretLeavesNothing(t *testing.T) {
	h := newHarness(t)
	op := fsm.TokenCreate{Accessor: "0123456789abcdef", Hash: wire.TokenHash("s-op"), Role: wire.RoleOperator}
	w := fsm.TokenCreate{Accessor: "2222222222222222", Hash: wire.TokenHash("s-w"), Role: wire.RoleWorker, Job: "a"}
	mustOK(t, h.mustApply(fsm.CmdTokenCreate, op))
	mustOK(t, h.mustApply(fsm.CmdTokenCreate, w))
	mustOK(t, h.mustApply(fsm.CmdTokenRevoke, fsm.TokenRevoke{Accessor: w.Accessor}))
	for k := range h.dump()["auth"] {
		if strings.Contains(k, w.Accessor) || strings.Contains(k, w.Hash) {
			t.Fatalf("auth/%q of the revoked token remains", k)
		}
	}
	if lookup(t, h, "s-w") != nil {
		t.Fatal("the revoked secret still finds a token")
	}
	again := w
	again.Accessor = "3333333333333333"
	res := mustOK(t, h.mustApply(fsm.CmdTokenCreate, again)).(*fsm.TokenCreated)
	if !res.Created || res.Token.Accessor != again.Accessor {
		t.Fatalf("a token with the revoked secret: %+v", res)
	}
	if got := lookup(t, h, "s-w"); got == nil || got.Accessor != again.Accessor {
		t.Fatalf("the secret finds %+v, want the new token", got)
	}
}
