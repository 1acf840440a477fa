// Package ui is the operator's web console: a page and a script, embedded
// in the binary, that every member serves under /ui/. The page holds no
// data: the script reads the JSON API of the member that served it (same
// origin, GET only), sending the operator's token, kept in the tab's
// sessionStorage, in the Authorization header. Every view has its own URL,
// answered with the same page:
//
//	/ui/                            jobs
//	/ui/jobs/{job}                  one job: checkpoint history, attempts
//	/ui/jobs/{job}/epochs/{epoch}   one epoch: per-task ack delays
//	/ui/cluster                     this member and the members it knows
//	/ui/gc                          garbage collector and blobs
package ui

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/wire"
)

//go:embed static
var static embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// contentSecurityPolicy lets the page load and call nothing but its own
// origin: no inline script, no frames, no form posts elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// writeTimeout bounds the time to send one of the console's files.
const writeTimeout = 30 * time.Second

// assets are the files under /ui/static/ with their content types.
var assets = map[string]string{
	"app.js":      "text/javascript; charset=utf-8",
	"style.css":   "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// Mount returns a handler that serves the console under /ui/ and passes
// every other request to api.
func Mount(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, Prefix) {
			serve(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func serve(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method %s is not allowed on %s", r.Method, r.URL.Path)
		return
	}
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, Prefix)
	if name, ok := strings.CutPrefix(rest, "static/"); ok {
		ctype, known := assets[name]
		if !known {
			writeError(w, http.StatusNotFound, "route_not_found", "no console file %s", r.URL.Path)
			return
		}
		body, err := static.ReadFile("static/" + name)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "console file %s: %v", name, err)
			return
		}
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
		return
	}
	if err := checkView(rest); err != nil {
		writeError(w, err.status, err.code, "%s", err.msg)
		return
	}
	body, err := static.ReadFile("static/index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "console page: %v", err)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

type viewError struct {
	status    int
	code, msg string
}

// checkView accepts the paths of the console's views (below /ui/): "",
// "cluster", "gc", "jobs/{job}" and "jobs/{job}/epochs/{epoch}", with ids
// and epochs as the API accepts them.
func checkView(rest string) *viewError {
	switch rest {
	case "", "cluster", "gc":
		return nil
	}
	parts := strings.Split(rest, "/")
	if parts[0] != "jobs" || (len(parts) != 2 && len(parts) != 4) || (len(parts) == 4 && parts[2] != "epochs") {
		return &viewError{http.StatusNotFound, string(wire.CodeRouteNotFound), "no console view /ui/" + rest}
	}
	if !wire.IDPattern.MatchString(parts[1]) {
		return &viewError{http.StatusBadRequest, string(wire.CodeInvalid), "job " + strconv.Quote(parts[1]) + " must match " + wire.IDPattern.String()}
	}
	if len(parts) == 4 {
		if n, err := strconv.ParseUint(parts[3], 10, 64); err != nil || n == 0 {
			return &viewError{http.StatusBadRequest, string(wire.CodeInvalid), "epoch " + strconv.Quote(parts[3]) + " is not a positive integer"}
		}
	}
	return nil
}

// writeError answers in the API's error format.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "retryable": false}})
}
