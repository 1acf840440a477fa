package main

import (
	"net/http"
	"strings"
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
