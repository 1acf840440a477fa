// Package freeport gives tests loopback addresses for servers they start
// later, where the listener itself cannot be handed over: in another
// process (cmd/metastore's tests run the binary), inside hashicorp/raft's
// transport (which binds its own address), or on a member restarted on
// the address it had.
//
// The race it narrows: a test listens on port 0, closes the listener and
// passes the address on; until the server binds it, anything may take the
// port, and the server then fails with "address already in use". Nearly
// every taker is the kernel's own choice of a port: each listen on port 0
// and each outgoing connection (Raft's, HTTP clients', every test process
// on the machine makes many) is given one from the ephemeral range,
// net.ipv4.ip_local_port_range (32768-60999 by default). So Addr picks
// ports outside that range, which the kernel never hands out by itself:
// only an explicit bind can take one, in practice another test process
// using this package that picks the same random port in that moment. A
// process never hands out the same port twice, so two servers of one test
// never share one, and a member stopped and restarted on its address finds
// it free.
//
// Where the range cannot be read or leaves too little room, Addr falls back
// to listening on port 0 (the race stays as it was).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
)

// Ports are picked from [lowest, first ephemeral port) or (last ephemeral
// port, 65535], whichever is larger, when it holds at least minRoom ports.
const (
	lowest  = 10000
	minRoom = 2000
)

var (
	rangeOnce sync.Once
	lo, hi    int // the range ports are picked from; 0, 0: port 0

	mu    sync.Mutex
	given = map[int]bool{}
)

// pickRange reads the kernel's ephemeral range and sets lo and hi.
func pickRange() {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return
	}
	var first, last int
	if _, err := fmt.Sscan(strings.TrimSpace(string(raw)), &first, &last); err != nil {
		return
	}
	below, above := first-lowest, 65535-last
	switch {
	case below >= minRoom && below >= above:
		lo, hi = lowest, first-1
	case above >= minRoom:
		lo, hi = last+1, 65535
	}
}

// Addr returns a loopback address ("127.0.0.1:port") whose port is free
// now, outside the kernel's ephemeral range, and not returned before by
// this process.
func Addr(t testing.TB) string {
	t.Helper()
	rangeOnce.Do(pickRange)
	mu.Lock()
	defer mu.Unlock()
	if lo == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	for range 1000 {
		port := lo + rand.IntN(hi-lo+1)
		if given[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		l.Close()
		given[port] = true
		return addr
	}
	t.Fatalf("freeport: no free port found in %d-%d", lo, hi)
	return ""
}
