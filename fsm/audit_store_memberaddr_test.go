package fsm_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestAuditMemberAddrBounds: the form check of a member's address at the
// edges of each rule: the port's digits, the length of the address, of
// the host name and of a label, hyphens at either end of a label,
// brackets around a name, IPv6 zones and the unspecified addresses.
func TestAuditMemberAddrBounds(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 253-3*64) // 253 bytes
	if len(name253) != 253 {
		t.Fatalf("name of %d bytes", len(name253))
	}
	name251 := name253[:251]
	for _, addr := range []string{
		label63 + ".example:1",
		name253 + ":1",
		name253 + ".:1",   // a trailing dot is not counted
		name251 + ":1234", // 256 bytes
		"x-y.example:65535",
		"[fe80::1]:7071",
	} {
		if err := fsm.CheckMemberAddr("raft_addr", addr); err != nil {
			t.Errorf("%q (%d bytes) refused: %v", addr, len(addr), err)
		}
	}
	for _, addr := range []string{
		"127.0.0.1:080",
		"127.0.0.1:0",
		"127.0.0.1:00",
		label63 + "a.example:1",
		name253 + "b:1",
		name251 + ":12345", // 257 bytes, each part valid
		"x-.example:1",
		"-x.example:1",
		"[node.example]:1",
		"[fe80::1%eth0]:7071",
		"[::]:7071",
		"0.0.0.0:7071",
		"node.123:7071",
		":7071",
	} {
		err := fsm.CheckMemberAddr("raft_addr", addr)
		if !isRule(err, wire.ErrInvalid) {
			t.Errorf("%q (%d bytes): %v, want invalid", addr, len(addr), err)
		}
	}
}

// TestAuditMemberAddrVersion1Length: a version-1 member record, applied
// under the check it was written with, takes addresses up to 256 bytes.
func TestAuditMemberAddrVersion1Length(t *testing.T) {
	h := newHarness(t)
	addr := strings.Repeat("a", 256)
	data, err := fsm.EncodeVersion(fsm.CmdMemberUpsert, 1, h.now, fsm.MemberUpsert{ID: "m", RaftAddr: addr, HTTPAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result); !ok || res.Err != nil {
		t.Fatalf("version-1 record with 256-byte addresses: %+v", res)
	}
	if m, err := h.f.Members(); err != nil || len(m) != 1 || m[0].RaftAddr != addr {
		t.Fatalf("members %+v %v", m, err)
	}
}
