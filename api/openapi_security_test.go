package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOpenAPISecurityMatchesAuth checks the document's security against a
// member running with --auth: the bearer scheme is declared; an operation
// whose effective security is empty answers without a token, and every
// other one answers 401 with a Bearer challenge.
func TestOpenAPISecurityMatchesAuth(t *testing.T) {
	raw, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	type requirement map[string][]string
	var doc struct {
		Security   []requirement `json:"security"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type   string `json:"type"`
				Scheme string `json:"scheme"`
			} `json:"securitySchemes"`
		} `json:"components"`
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.Components.SecuritySchemes["bearer"]; s.Type != "http" || s.Scheme != "bearer" {
		t.Fatalf("components.securitySchemes.bearer = %+v, want http bearer", s)
	}
	needsBearer := func(reqs []requirement) bool {
		for _, r := range reqs {
			if _, ok := r["bearer"]; ok {
				return true
			}
		}
		return false
	}
	if !needsBearer(doc.Security) {
		t.Fatalf("top-level security %v does not name bearer", doc.Security)
	}

	m, _ := startAuthSingle(t, nil)
	pathVar := regexp.MustCompile(`\{[A-Za-z0-9_]+\}`)
	checked := 0
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			var op struct {
				OperationID string         `json:"operationId"`
				Security    *[]requirement `json:"security"`
			}
			if json.Unmarshal(rawOp, &op) != nil || op.OperationID == "" {
				continue
			}
			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			}
			u := m.URL + pathVar.ReplaceAllStringFunc(path, func(v string) string {
				if v == "{epoch}" || v == "{generation}" {
					return "1"
				}
				return "x"
			})
			r := doTok(t, strings.ToUpper(method), u, "", []byte("{}"))
			switch open := len(security) == 0; {
			case open && r.status == http.StatusUnauthorized:
				t.Errorf("%s %s (%s): documented without security, answered 401 without a token", method, path, op.OperationID)
			case !open && !needsBearer(security):
				t.Errorf("%s %s (%s): security %v does not name bearer", method, path, op.OperationID, security)
			case !open && (r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer")):
				t.Errorf("%s %s (%s): no token, answered %d (WWW-Authenticate %q), want 401 with a Bearer challenge",
					method, path, op.OperationID, r.status, r.header.Get("WWW-Authenticate"))
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("only %d operations checked", checked)
	}
}
