package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestTokensCommands: tokens create, list and revoke against a member
// with auth on, the operator token given by --token-file or the
// environment; without one, commands fail with the API's 401.
func TestTokensCommands(t *testing.T) {
	op := api.GenerateToken()
	dir := t.TempDir()
	opFile := filepath.Join(dir, "op")
	if err := os.WriteFile(opFile, []byte(op+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, addr := testmember.FreeAddr(t)
	cfg := testmember.Config(t, "n1")
	cfg.HTTPAddr, cfg.RaftAddr = addr, testmember.FreePort(t)
	cfg.Auth, cfg.AuthBootstrapTokenFile = true, opFile
	m := testmember.Start(t, cfg, l, "")
	testmember.WaitFor(t, 10*time.Second, "bootstrap", func() bool {
		tok, err := m.FSM.TokenByHash(wire.TokenHash(op))
		return err == nil && tok != nil
	})

	code, _, errOut := runCmd([]string{"tokens", "list", "--addr", addr}, nil)
	if code != exitFailure || !strings.Contains(errOut, "unauthenticated") || strings.Contains(errOut, op) {
		t.Fatalf("no token: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := runCmd([]string{"tokens", "create", "--role", "worker", "--job", "orders", "--description", "orders worker", "--addr", addr, "--token-file", opFile}, nil)
	if code != exitOK {
		t.Fatalf("create: exit %d, stderr %q", code, errOut)
	}
	mm := regexp.MustCompile(`created token ([0-9a-f]{16}) \(worker, job orders\)\nsecret: (mst_\S+)\n`).FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("create output:\n%s", out)
	}
	acc, secret := mm[1], mm[2]
	// The worker token cannot list tokens; the operator's from the
	// environment can, and the list never shows a secret.
	code, _, errOut = runCmd([]string{"tokens", "list", "--addr", addr, "--token", secret}, nil)
	if code != exitFailure || !strings.Contains(errOut, "forbidden") || strings.Contains(errOut, secret) {
		t.Fatalf("worker lists tokens: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = runCmd([]string{"tokens", "list", "--addr", addr}, map[string]string{"METASTORE_TOKEN": op})
	if code != exitOK || !strings.Contains(out, acc) || !strings.Contains(out, "orders worker") || strings.Contains(out, secret) || strings.Contains(out, op) {
		t.Fatalf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCmd([]string{"tokens", "revoke", acc, "--addr", addr}, map[string]string{"METASTORE_TOKEN_FILE": opFile})
	if code != exitOK || !strings.Contains(out, "revoked token "+acc) {
		t.Fatalf("revoke: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runCmd([]string{"jobs", "list", "--addr", addr, "--token", secret}, nil)
	if code != exitFailure || !strings.Contains(errOut, "unauthenticated") {
		t.Fatalf("revoked token: exit %d, stderr %q", code, errOut)
	}
}
