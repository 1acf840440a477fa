package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
)

// TestRunResumeAuthCluster: three members with --auth over plain http;
// the example runs and resumes on a worker token for its job, which can
// reach nothing else. TestSecureCluster does the same with TLS on.
func TestRunResumeAuthCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a cluster of metastore processes")
	}
	msBin, jobBin := binaries(t)
	op, opFile := operatorToken(t)
	ms := serve(t, msBin, 3, "--auth", "--auth-bootstrap-token-file", opFile)

	worker := workerToken(t, msBin, ms[0], opFile, "demo")
	workerToken(t, msBin, ms[0], opFile, "other")

	out := runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "--token", worker, "run", "--epochs", "8")
	if !strings.Contains(out, "epoch 8 completed") {
		t.Fatalf("run output:\n%s", out)
	}
	out = runJob(t, jobBin, "--addr", addrs(ms), "--job", "demo", "--token", worker, "resume", "--topology", "changed", "--epochs", "3")
	checkRestore(t, out, 8)

	checkWorkerScope(t, ms, http.DefaultClient, worker)
	noSecretsLogged(t, ms, op, worker)
}

// operatorToken writes a fresh operator token to a file for
// --auth-bootstrap-token-file and returns the secret and the file.
func operatorToken(t *testing.T) (secret, file string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "operator-token")
	secret = api.GenerateToken()
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret, file
}

// workerToken creates a worker token for job with the CLI through member
// m (clientArgs: e.g. --ca-file) and returns its secret.
func workerToken(t *testing.T, msBin string, m *member, opFile, job string, clientArgs ...string) string {
	t.Helper()
	var out struct {
		Secret string `json:"secret"`
	}
	poll(t, 30*time.Second, "tokens create "+job, func() error {
		args := append([]string{"tokens", "create", "--role", "worker", "--job", job, "--json",
			"--addr", m.url(""), "--token-file", opFile}, clientArgs...)
		p := start(t, "tokens create", msBin, args...)
		if code := p.wait(t, time.Minute); code != 0 {
			return fmt.Errorf("exit %d: %s", code, p.stderr)
		}
		return json.Unmarshal([]byte(p.stdout.String()), &out)
	})
	return out.Secret
}

// checkWorkerScope checks, through every member, that a worker token for
// job "demo" cannot reach job "other", the collector, the members, the
// tokens or the snapshots, and that no token at all gets 401.
func checkWorkerScope(t *testing.T, ms []*member, hc *http.Client, worker string) {
	t.Helper()
	for _, m := range ms {
		for _, c := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/v1/jobs/other", 403},
			{"PUT", "/v1/jobs/other", 403},
			{"POST", "/v1/jobs/other/attempts", 403},
			{"POST", "/v1/jobs/other/epochs", 403},
			{"GET", "/v1/jobs/other/tasks/agg-0/restore", 403},
			{"POST", "/v1/jobs/other/uploads", 403},
			{"POST", "/v1/gc/run", 403},
			{"GET", "/v1/gc", 403},
			{"POST", "/v1/members", 403},
			{"DELETE", "/v1/members/n1", 403},
			{"POST", "/v1/leader/transfer", 403},
			{"GET", "/v1/tokens", 403},
			{"GET", "/v1/snapshot", 403},
			{"GET", "/v1/jobs/demo", 200},
		} {
			if got := statusWith(t, hc, c.method, m.url(c.path), worker); got != c.want {
				t.Errorf("%s: worker token %s %s: %d, want %d", m.id, c.method, c.path, got, c.want)
			}
			if got := statusWith(t, hc, c.method, m.url(c.path), ""); got != http.StatusUnauthorized {
				t.Errorf("%s: no token %s %s: %d, want 401", m.id, c.method, c.path, got)
			}
		}
	}
}

// noSecretsLogged checks that no member's log holds one of the secrets.
func noSecretsLogged(t *testing.T, ms []*member, secrets ...string) {
	t.Helper()
	for _, m := range ms {
		logs := m.stderr.String()
		for _, s := range secrets {
			if strings.Contains(logs, s) {
				t.Errorf("%s logged a token secret", m.id)
			}
		}
	}
}

// caClient is an HTTP client that trusts the CA in caFile.
func caClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

func statusWith(t *testing.T, hc *http.Client, method, u, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
