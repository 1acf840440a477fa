package ui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMount: every view's URL answers the page, the page's files are
// served with their types, everything else under /ui/ is a JSON error, and
// other paths reach the API.
func TestMount(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Mount(api)
	do := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for _, p := range []string{"/ui/", "/ui/cluster", "/ui/gc", "/ui/jobs/demo", "/ui/jobs/demo/epochs/12", "/ui/jobs/a.b-c_d/epochs/1"} {
		w := do("GET", p)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %d %s", p, w.Code, w.Header().Get("Content-Type"))
			continue
		}
		if !strings.Contains(w.Body.String(), `<script src="/ui/static/app.js">`) {
			t.Errorf("GET %s: not the console page", p)
		}
		csp := w.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", p, w.Header())
		}
	}
	if w := do("HEAD", "/ui/jobs/demo"); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d, %d bytes", w.Code, w.Body.Len())
	}
	for name, ctype := range map[string]string{"app.js": "text/javascript", "style.css": "text/css", "favicon.svg": "image/svg+xml"} {
		w := do("GET", "/ui/static/"+name)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d %s, %d bytes", name, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
	}
	if w := do("GET", "/ui"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %s", w.Code, w.Header().Get("Location"))
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/ui/nope", 404, "route_not_found"},
		{"GET", "/ui/static/index.html", 404, "route_not_found"},
		{"GET", "/ui/static/../ui.go", 404, "route_not_found"},
		{"GET", "/ui/jobs", 404, "route_not_found"},
		{"GET", "/ui/jobs/demo/epochs", 404, "route_not_found"},
		{"GET", "/ui/jobs/demo/attempts/1", 404, "route_not_found"},
		{"GET", "/ui/jobs/demo/epochs/1/more", 404, "route_not_found"},
		{"GET", "/ui/jobs/-bad/epochs/1", 400, "invalid_argument"},
		{"GET", "/ui/jobs/demo/epochs/0", 400, "invalid_argument"},
		{"GET", "/ui/jobs/demo/epochs/x", 400, "invalid_argument"},
		{"POST", "/ui/", 405, "method_not_allowed"},
		{"DELETE", "/ui/jobs/demo", 405, "method_not_allowed"},
	} {
		w := do(tc.method, tc.path)
		var body struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != tc.status || body.Error.Code != tc.code || body.Error.Message == "" {
			t.Errorf("%s %s: %d %q, want %d %s", tc.method, tc.path, w.Code, w.Body.String(), tc.status, tc.code)
		}
	}
	for _, p := range []string{"/v1/jobs", "/", "/uix", "/metrics"} {
		if w := do("GET", p); w.Code != http.StatusTeapot {
			t.Errorf("GET %s: %d, want the API's answer", p, w.Code)
		}
	}
}

// TestConsoleSize keeps the console light.
func TestConsoleSize(t *testing.T) {
	entries, err := static.ReadDir("static")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range entries {
		b, err := static.ReadFile("static/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	if total == 0 || total > 300<<10 {
		t.Fatalf("console files: %d bytes, want at most 300 KiB", total)
	}
}
