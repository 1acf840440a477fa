package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/config"
)

// openAPIPath is the API reference, relative to this package.
const openAPIPath = "../docs/openapi.json"

// errorCodeSources hold the error code constants (Code...) the API answers
// with: the state machine's rule codes and the HTTP layer's own, declared
// once in package wire.
var errorCodeSources = map[string]string{"wire/codes.go": "../wire/codes.go"}

// openAPIDoc is the part of an OpenAPI 3 document the test checks.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas    map[string]json.RawMessage `json:"schemas"`
		Parameters map[string]openAPIParam    `json:"parameters"`
	} `json:"components"`
}

type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

type openAPIOp struct {
	OperationID string         `json:"operationId"`
	Parameters  []openAPIParam `json:"parameters"`
	Responses   map[string]struct {
		ErrorCodes []string `json:"x-error-codes"`
	} `json:"responses"`
}

var openAPIMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// muxVar matches a gorilla/mux variable with a pattern, {key:.+}, which
// OpenAPI writes {key}.
var muxVar = regexp.MustCompile(`\{([A-Za-z0-9_]+):[^}]*\}`)

var pathVar = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatalf("read the API reference: %v", err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not valid JSON: %v", openAPIPath, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("%s: openapi is %q, want 3.x", openAPIPath, doc.OpenAPI)
	}
	return &doc
}

// servedRoutes returns every route the API's router serves, as "METHOD
// /path" (mux patterns written as OpenAPI path templates), with the route
// name ("" for routes outside the table).
func servedRoutes(t *testing.T) map[string]string {
	t.Helper()
	// A registry makes the router serve /metrics too; no node is needed to
	// build the routes.
	s := New(Deps{Config: config.DefaultConfig(), Registry: prometheus.NewRegistry()})
	out := map[string]string{}
	err := s.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := r.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := r.GetMethods()
		if err != nil {
			return err
		}
		for _, m := range methods {
			out[m+" "+muxVar.ReplaceAllString(tpl, "{$1}")] = r.GetName()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the router: %v", err)
	}
	// The route table is what the router is built from: every entry must
	// be served under its name.
	for _, rt := range s.routeTable() {
		key := rt.method + " " + muxVar.ReplaceAllString(rt.path, "{$1}")
		if name, ok := out[key]; !ok || name != rt.name {
			t.Errorf("route table entry %s (%s) is not served by the router", key, rt.name)
		}
	}
	for _, extra := range []string{"GET /healthz", "GET /readyz", "GET /metrics"} {
		if _, ok := out[extra]; !ok {
			t.Errorf("the router does not serve %s", extra)
		}
	}
	return out
}

// documentedOps returns the operations of the document by "METHOD /path".
func documentedOps(t *testing.T, doc *openAPIDoc) map[string]openAPIOp {
	t.Helper()
	out := map[string]openAPIOp{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			if !slices.Contains(openAPIMethods, key) {
				continue // parameters, summary, description, servers
			}
			var op openAPIOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", key, path, err)
			}
			out[strings.ToUpper(key)+" "+path] = op
		}
	}
	return out
}

// TestOpenAPIDocumentsEveryRoute checks docs/openapi.json against the
// router: every route served is documented (method and path), every
// documented operation is a route, and operationId is the route's name.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	served := servedRoutes(t)
	documented := documentedOps(t, doc)

	for _, key := range openAPIKeys(served) {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is not documented in %s", key, openAPIPath)
			continue
		}
		if name := served[key]; name != "" && op.OperationID != name {
			t.Errorf("%s: operationId %q, want the route name %q", key, op.OperationID, name)
		}
	}
	for _, key := range openAPIKeys(documented) {
		if _, ok := served[key]; !ok {
			t.Errorf("%s documents %s, which is not a route", openAPIPath, key)
		}
	}

	// Every path variable is declared as a path parameter.
	for _, key := range openAPIKeys(documented) {
		op := documented[key]
		_, path, _ := strings.Cut(key, " ")
		declared := map[string]bool{}
		for _, p := range op.Parameters {
			if p.Ref != "" {
				name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/")
				if !ok {
					t.Errorf("%s: parameter $ref %q is not a component parameter", key, p.Ref)
					continue
				}
				c, ok := doc.Components.Parameters[name]
				if !ok {
					t.Errorf("%s: parameter $ref %q names no component", key, p.Ref)
					continue
				}
				p = c
			}
			if p.In == "path" {
				declared[p.Name] = true
			}
		}
		for _, m := range pathVar.FindAllStringSubmatch(path, -1) {
			if !declared[m[1]] {
				t.Errorf("%s: path variable {%s} is not declared as a path parameter", key, m[1])
			}
		}
	}
}

// TestOpenAPIDocumentsEveryErrorCode checks the error-code enum of
// docs/openapi.json against the Code constants of wire/codes.go: a code added to the source and not documented, or a
// documented code that no longer exists, fails. Each operation's
// x-error-codes must name documented codes.
func TestOpenAPIDocumentsEveryErrorCode(t *testing.T) {
	doc := loadOpenAPI(t)
	raw, ok := doc.Components.Schemas["ErrorCode"]
	if !ok {
		t.Fatalf("%s has no components.schemas.ErrorCode", openAPIPath)
	}
	var schema struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("ErrorCode schema: %v", err)
	}
	enum := map[string]bool{}
	for _, c := range schema.Enum {
		if enum[c] {
			t.Errorf("ErrorCode enum lists %q twice", c)
		}
		enum[c] = true
	}

	codes := map[string]string{} // code -> where it is declared
	for _, label := range openAPIKeys(errorCodeSources) {
		for name, code := range codeConstantsOf(t, errorCodeSources[label]) {
			if prev, dup := codes[code]; dup {
				t.Errorf("code %q is declared twice: %s and %s %s", code, prev, label, name)
			}
			codes[code] = label + " " + name
		}
	}
	if len(codes) < 20 {
		t.Fatalf("found only %d Code constants in %v; has the source moved?", len(codes), errorCodeSources)
	}
	for _, code := range openAPIKeys(codes) {
		if !enum[code] {
			t.Errorf("error code %q (%s) is missing from the ErrorCode enum of %s", code, codes[code], openAPIPath)
		}
	}
	for _, code := range schema.Enum {
		if _, ok := codes[code]; !ok {
			t.Errorf("%s documents error code %q, which no Code constant declares", openAPIPath, code)
		}
	}

	ops := documentedOps(t, doc)
	for _, key := range openAPIKeys(ops) {
		for status, resp := range ops[key].Responses {
			if n, err := strconv.Atoi(status); err == nil && n >= 400 && len(resp.ErrorCodes) == 0 {
				t.Errorf("%s: error response %s lists no x-error-codes", key, status)
			}
			for _, c := range resp.ErrorCodes {
				if !enum[c] {
					t.Errorf("%s: response %s lists %q, which is not in the ErrorCode enum", key, status, c)
				}
			}
		}
	}
}

// codeConstants parses a Go file and returns its constants whose name
// starts with "Code" and whose value is a string literal.
func codeConstantsOf(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: constant %s is not a string literal; the test cannot read its code", file, name.Name)
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %s: %v", file, name.Name, err)
				}
				out[name.Name] = v
			}
		}
	}
	return out
}

func openAPIKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
