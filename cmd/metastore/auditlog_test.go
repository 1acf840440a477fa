package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
)

// TestAccessAndAuditLogs: with --access-log, every request is a line of
// the access log; token, member and pin changes are lines of the audit
// log (component=audit) naming the token by accessor; a refused operator
// action is audited as refused; no secret (token, signature) is in
// either log.
func TestAccessAndAuditLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a metastore process; skipped in -short mode")
	}
	dir := t.TempDir()
	boot := api.GenerateToken()
	bootFile := filepath.Join(dir, "boot.token")
	if err := os.WriteFile(bootFile, []byte(boot), 0o600); err != nil {
		t.Fatal(err)
	}
	accessFile := filepath.Join(dir, "access.log")
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(dir, "n1")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr, "--raft-addr", p.raftAddr,
		"--auth", "--auth-bootstrap-token-file", bootFile, "--access-log", accessFile}, clRaftFlags...)
	p.start(t)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- stderr (last 4 KiB):\n%s", tail(p.stderr.String(), 4096))
		}
	})
	call := func(method, path, token, body string) (int, []byte) {
		req, _ := http.NewRequest(method, p.url(path), strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	waitFor(t, 30*time.Second, func() error {
		if st, raw := call("GET", "/v1/tokens", boot, ""); st != 200 {
			return &api.Error{Status: st, Message: string(raw)}
		}
		return nil
	})
	st, raw := call("POST", "/v1/tokens", boot, `{"role":"worker","job":"orders"}`)
	var created struct {
		Accessor string `json:"accessor"`
		Secret   string `json:"secret"`
	}
	if st != 200 || json.Unmarshal(raw, &created) != nil || created.Secret == "" {
		t.Fatalf("create token: %d %s", st, raw)
	}
	// The worker tries an operator action: refused, and audited.
	if st, raw := call("POST", "/v1/tokens", created.Secret, `{"role":"operator"}`); st != http.StatusForbidden {
		t.Fatalf("worker creating an operator token: %d %s", st, raw)
	}
	// A signed object URL's signature must not reach the access log.
	if st, _ := call("GET", "/v1/objects/orders/x/y?sig=c2VjcmV0c2lnbmF0dXJl&exp=1", "", ""); st == 200 {
		t.Fatal("a forged signature was accepted")
	}
	if st, raw := call("DELETE", "/v1/tokens/"+created.Accessor, boot, ""); st != 200 {
		t.Fatalf("revoke: %d %s", st, raw)
	}
	if code := p.terminate(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	stderr := p.stderr.String()
	access, err := os.ReadFile(accessFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"stderr": stderr, "access log": string(access)} {
		for _, secret := range []string{boot, created.Secret, "c2VjcmV0c2lnbmF0dXJl"} {
			if strings.Contains(text, secret) {
				t.Fatalf("the %s holds a secret %q", name, secret[:8])
			}
		}
	}
	var audit []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "component=audit") {
			audit = append(audit, l)
		}
	}
	want := []string{
		"action=tokens.create method=POST path=/v1/tokens status=200 outcome=done",
		"action=tokens.create method=POST path=/v1/tokens status=403 outcome=refused",
		"action=tokens.revoke method=DELETE path=/v1/tokens/" + created.Accessor + " status=200 outcome=done",
	}
	for _, w := range want {
		found := false
		for _, l := range audit {
			if strings.Contains(l, w) && strings.Contains(l, "token_accessor=") {
				found = true
			}
		}
		if !found {
			t.Errorf("no audit line with %q and a token accessor in:\n%s", w, strings.Join(audit, "\n"))
		}
	}
	if !strings.Contains(strings.Join(audit, "\n"), "created_accessor="+created.Accessor) {
		t.Errorf("the audit line of the creation does not name the new token's accessor:\n%s", strings.Join(audit, "\n"))
	}
	if !bytes.Contains(access, []byte("path=/v1/tokens status=200")) || !bytes.Contains(access, []byte("query=")) ||
		!bytes.Contains(access, []byte("sig=REDACTED")) {
		t.Errorf("access log:\n%s", access)
	}
}
