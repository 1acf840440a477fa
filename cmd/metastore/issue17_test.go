package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestMembersAddChecksAddresses: members add refuses, without asking the
// node, an address no member could dial. Before, "not-an-addr" was sent and
// accepted, and the store lost its leader.
func TestMembersAddChecksAddresses(t *testing.T) {
	fake, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/members": answer(200, membersJSON),
	})
	for _, c := range []struct{ raft, http, flag string }{
		{"not-an-addr", "127.0.0.1:2", "--raft-addr"},
		{"127.0.0.1:0", "127.0.0.1:2", "--raft-addr"},
		{"127.0.0.1:7101", "127.0.0.1:70000", "--http-addr"},
		{"0.0.0.0:7101", "127.0.0.1:7100", "--raft-addr"},
	} {
		code, _, errOut := runCmd([]string{"members", "add", "zz", "--raft-addr", c.raft, "--http-addr", c.http, "--addr", srv.URL}, nil)
		if code != exitUsage || !strings.Contains(errOut, c.flag) {
			t.Errorf("%s %s: exit %d, stderr %q; want %d naming %s", c.raft, c.http, code, errOut, exitUsage, c.flag)
		}
	}
	if got := fake.seen(); len(got) != 0 {
		t.Fatalf("the node was asked: %v", got)
	}
	code, _, errOut := runCmd([]string{"members", "add", "n4", "--raft-addr", "127.0.0.1:7101", "--http-addr", "localhost:7100", "--addr", srv.URL}, nil)
	if code != exitOK {
		t.Fatalf("a valid member: exit %d, stderr %q", code, errOut)
	}
}

// TestJoinRefusedExits: a node whose --join is refused keeps asking with
// backoff for --join-timeout, then exits with status 1 and says why.
// Before, it logged the refusal once and idled forever.
func TestJoinRefusedExits(t *testing.T) {
	var calls atomic.Int32
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"error":{"code":"forbidden","message":"this token may not add members"}}`)
	}))
	defer refuse.Close()
	code, _, errOut := runBinary(t, t.TempDir(), nil, "serve", "--node-id", "n4",
		"--data-dir", t.TempDir(), "--blob-store", "file://"+t.TempDir(),
		"--http-addr", "127.0.0.1:0", "--raft-addr", freeAddr(t),
		"--join", refuse.Listener.Addr().String(), "--join-timeout", "1500ms")
	if code != exitFailure {
		t.Fatalf("exit %d, want %d\n%s", code, exitFailure, errOut)
	}
	if !strings.Contains(errOut, "cannot join the cluster") || !strings.Contains(errOut, "this token may not add members") {
		t.Errorf("stderr does not say why:\n%s", errOut)
	}
	if calls.Load() < 2 {
		t.Errorf("the refusal was not retried: %d join request(s)", calls.Load())
	}
}

// TestGlobalFlagsBeforeCommand: client flags work before the command, as
// people type them. Before, "metastore --addr X checkpoints list J" failed
// with unknown command "--addr".
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	fake, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/members": answer(200, membersJSON),
	})
	for _, args := range [][]string{
		{"--addr", srv.URL, "members", "list"},
		{"--addr=" + srv.URL, "--json", "members", "list"},
		{"--json", "--timeout", "5s", "--addr", srv.URL, "members", "list"},
		{"-addr", srv.URL, "members", "list", "--json"},
	} {
		code, out, errOut := runCmd(args, nil)
		if code != exitOK || !strings.Contains(out, "n2") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if n := len(fake.seen()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--raft-addr", "x", "members", "list"}, `unknown flag "--raft-addr" before the command`},
		{[]string{"--addr"}, "flag --addr needs a value"},
		{[]string{"--addr", srv.URL}, "want a command after the flags"},
		{[]string{"--addr", srv.URL, "version"}, "talks to no node"},
	} {
		code, _, errOut := runCmd(c.args, nil)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}
