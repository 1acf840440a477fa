package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// TestNodeErrorsAnswered: the errors of the node a request may meet,
// wrapped as callers wrap them, are answered with their documented status
// and code, and retryable exactly when repeating the request is safe
// and may succeed. Most arise only in races (leadership lost during a
// proposal, a commit whose outcome is unknown), which no HTTP test
// produces on demand. Found by a mutation audit: swapping their status or
// retryable flag survived every API test.
func TestNodeErrorsAnswered(t *testing.T) {
	for _, c := range []struct {
		err       error
		status    int
		code      wire.Code
		retryable bool
	}{
		{node.ErrNotLeader, http.StatusServiceUnavailable, wire.CodeNotLeader, true},
		{node.ErrNoLeader, http.StatusServiceUnavailable, wire.CodeNoLeader, true},
		{node.ErrUnknownOutcome, http.StatusServiceUnavailable, wire.CodeOutcomeUnknown, true},
		{node.ErrShutdown, http.StatusServiceUnavailable, wire.CodeUnavailable, true},
		{node.ErrTryAgain, http.StatusServiceUnavailable, wire.CodeUnavailable, true},
		{node.ErrQuorumAtRisk, http.StatusConflict, wire.CodeQuorumAtRisk, false},
		{node.ErrMemberConflict, http.StatusConflict, wire.CodeConflict, false},
		{node.ErrBadBackup, http.StatusBadRequest, wire.CodeBadBackup, false},
		{node.ErrUnknownMember, http.StatusNotFound, wire.CodeNotFound, false},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, wire.CodeTimeout, true},
		{context.Canceled, 499, wire.CodeTimeout, true},
	} {
		err := fmt.Errorf("propose: %w", c.err)
		e := toAPIError(err)
		if e.Status != c.status || e.Code != c.code || e.Retryable != c.retryable || e.Message == "" {
			t.Errorf("%v: answered %d %s retryable=%v %q, want %d %s retryable=%v", c.err, e.Status, e.Code, e.Retryable, e.Message, c.status, c.code, c.retryable)
		}
		w := httptest.NewRecorder()
		writeError(w, e)
		if got := w.Header().Get("Retry-After") != ""; got != c.retryable {
			t.Errorf("%v: Retry-After %q", c.err, w.Header().Get("Retry-After"))
		}
	}
}

// TestForwardFailuresAnswered: a forward to the leader that fails is
// answered by whether it may have taken effect, over real connections: a
// leader that cannot be reached (nothing listens, its name does not
// resolve) is 503 unavailable; a leader that took the request and closed
// or reset the connection without an answer is 502 unavailable for a read, but 503 outcome_unknown for a
// write (it may have been applied; a repeat is safe). All are retryable.
// Found by a mutation audit: swapping the read and write answers, or
// counting a failed dial as an unknown outcome, survived every API test.
func TestForwardFailuresAnswered(t *testing.T) {
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// A leader that reads the request and hangs up.
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangup.Close()
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	// A leader that reads the request and resets the connection.
	reset, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reset.Close()
	go func() {
		for {
			c, err := reset.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	f := newForwarder("n2", nil, "http", nil)
	for _, c := range []struct {
		method, leader string
		status         int
		code           wire.Code
		says           string
	}{
		{"GET", closed, http.StatusServiceUnavailable, wire.CodeUnavailable, "cannot reach"},
		{"PUT", "leader.invalid:1", http.StatusServiceUnavailable, wire.CodeUnavailable, "cannot reach"},
		{"PUT", reset.Addr().String(), http.StatusServiceUnavailable, wire.CodeOutcomeUnknown, "may or may not"},
		{"PUT", closed, http.StatusServiceUnavailable, wire.CodeUnavailable, "cannot reach"},
		{"GET", hangup.Addr().String(), http.StatusBadGateway, wire.CodeUnavailable, "failed"},
		{"PUT", hangup.Addr().String(), http.StatusServiceUnavailable, wire.CodeOutcomeUnknown, "may or may not"},
		{"POST", hangup.Addr().String(), http.StatusServiceUnavailable, wire.CodeOutcomeUnknown, "may or may not"},
	} {
		r := httptest.NewRequest(c.method, "http://n2/v1/jobs/j", strings.NewReader("{}"))
		w := httptest.NewRecorder()
		f.serve(w, r, c.leader)
		body := w.Body.String()
		if w.Code != c.status || !strings.Contains(body, `"code": "`+string(c.code)+`"`) || !strings.Contains(body, `"retryable": true`) || !strings.Contains(body, c.says) {
			t.Errorf("%s forwarded to %s: %d %s, want %d %s", c.method, c.leader, w.Code, body, c.status, c.code)
		}
	}
}
