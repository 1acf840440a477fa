package api_test

import (
	"net/http"
	"testing"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestPprofNeedsOperatorToken: with --enable-pprof and auth on, every
// /debug/pprof/ endpoint needs an operator token (docs/operations.md):
// the command line, symbols, the index and the named profiles alike.
// Found by a mutation audit: /debug/pprof/cmdline registered without the
// guard passed every API test (no test turned pprof on).
func TestPprofNeedsOperatorToken(t *testing.T) {
	secret := api.GenerateToken()
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		authConfig(t, secret)(c)
		c.EnablePprof = true
	})
	waitAuthReady(t, m, secret)
	okTok(t, "PUT", m.URL+"/v1/jobs/ja", secret, []byte("{}"), nil)
	worker, _ := createToken(t, m.URL, secret, `{"role":"worker","job":"ja"}`)
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine",
		"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.01"} {
		expectAuthError(t, doTok(t, "GET", m.URL+p, "", nil), http.StatusUnauthorized, wire.CodeUnauthenticated, p+" without a token")
		expectAuthError(t, doTok(t, "GET", m.URL+p, worker, nil), http.StatusForbidden, wire.CodeForbidden, p+" with a worker token")
	}
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/debug/pprof/heap"} {
		if r := doTok(t, "GET", m.URL+p, secret, nil); r.status != http.StatusOK {
			t.Fatalf("%s with the operator token: %d %s", p, r.status, r.body)
		}
	}
}
