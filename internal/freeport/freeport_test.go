package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddr: the addresses are distinct, bindable, and outside the
// kernel's ephemeral range when Addr picks from a range.
func TestAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		addr := Addr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if lo != 0 && (port < lo || port > hi) {
			t.Fatalf("%s outside %d-%d", addr, lo, hi)
		}
	}
	l, err := net.Listen("tcp", Addr(t))
	if err != nil {
		t.Fatalf("the address is not free: %v", err)
	}
	l.Close()
	if lo == 0 {
		t.Log("the ephemeral range left no room: ports came from port 0")
	} else {
		t.Logf("ports picked from %d-%d", lo, hi)
	}
}
