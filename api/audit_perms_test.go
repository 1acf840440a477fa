package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/wire"
)

// TestRoutePermissionsAsDocumented: the permission each route requires is
// the x-permission docs/openapi.json gives its operation. The route matrix
// (TestAuthRouteMatrix) takes each route's permission from the route
// table itself, so a route whose permission is weakened there (restore,
// manifests or blob records of any job to any token) passed it. Found by
// a mutation audit.
func TestRoutePermissionsAsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, item := range doc.Paths {
		for _, rawOp := range item {
			var op struct {
				OperationID string `json:"operationId"`
				Permission  string `json:"x-permission"`
			}
			if json.Unmarshal(rawOp, &op) == nil && op.OperationID != "" {
				documented[op.OperationID] = op.Permission
			}
		}
	}
	for _, rt := range api.Routes() {
		want, ok := documented[rt.Name]
		if !ok || want == "" {
			t.Errorf("route %s: the API reference gives no x-permission", rt.Name)
			continue
		}
		if rt.Perm != want {
			t.Errorf("route %s (%s %s) requires %q; the API reference says %q", rt.Name, rt.Method, rt.Path, rt.Perm, want)
		}
	}
}

// TestNoRouteReadsAnotherJob: every route whose path names a job or an
// object key refuses a worker token of another job, 403, whatever
// permission the route table gives it: the cross-job class decided by the
// path alone, not by the table. Found by a mutation audit (see
// TestRoutePermissionsAsDocumented).
func TestNoRouteReadsAnotherJob(t *testing.T) {
	m, op := startAuthSingle(t, nil)
	for _, j := range []string{"ja", "jb"} {
		okTok(t, "PUT", m.URL+"/v1/jobs/"+j, op, []byte("{}"), nil)
	}
	worker, _ := createToken(t, m.URL, op, `{"role":"worker","job":"ja"}`)
	n := 0
	for _, rt := range api.Routes() {
		if !strings.Contains(rt.Path, "{job}") && !strings.Contains(rt.Path, "{key") {
			continue
		}
		n++
		r := doTok(t, rt.Method, routeURL(m.URL, rt, "jb"), worker, routeBody(rt))
		expectAuthError(t, r, http.StatusForbidden, wire.CodeForbidden, "worker of ja on "+rt.Name+" of jb")
	}
	if n < 15 {
		t.Fatalf("only %d routes name a job or a key", n)
	}
	okTok(t, "GET", m.URL+"/v1/jobs/jb", op, nil, nil) // still there
}
