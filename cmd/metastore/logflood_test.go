package main

import (
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTLSHandshakeFloodIsFolded replays issue 13's sixth finding against
// a real TLS member: a thousand connections that are not TLS each make
// the HTTP server report a handshake error. The log holds a few lines
// and the count of the others, not a thousand lines.
func TestTLSHandshakeFloodIsFolded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a metastore process; skipped in -short mode")
	}
	dir := t.TempDir()
	caDir := filepath.Join(dir, "certs")
	for _, args := range [][]string{{"certs", "ca", "--out", caDir},
		{"certs", "member", "--ca-dir", caDir, "--name", "n1", "--ip", "127.0.0.1", "--dns", "localhost"}} {
		if code, out, errOut := runBinary(t, dir, nil, args...); code != 0 {
			t.Fatalf("metastore %q: exit %d: %s %s", args, code, out, errOut)
		}
	}
	caFile := filepath.Join(caDir, "ca.crt")
	p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(dir, "n1")}
	p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr, "--raft-addr", p.raftAddr,
		"--tls-cert-file", filepath.Join(caDir, "n1.crt"), "--tls-key-file", filepath.Join(caDir, "n1.key"), "--tls-ca-file", caFile,
		"--log-repeat-window", "1h"}, clRaftFlags...)
	p.start(t)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- stderr (last 4 KiB):\n%s", tail(p.stderr.String(), 4096))
		}
	})
	hc := httpsClient(t, caFile)
	waitFor(t, 30*time.Second, func() error {
		var st map[string]any
		return httpsGet(hc, "https://"+p.httpAddr+"/readyz", &st)
	})

	const flood = 1000
	for range flood {
		c, err := net.Dial("tcp", p.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		// Not a TLS record: the handshake fails at once and the server
		// closes the connection, after it logged the error.
		_, _ = c.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0})
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	if code := p.terminate(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	logged := 0
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, "msg=\"http: TLS handshake error") {
			logged++
		}
	}
	suppressed := 0
	for _, m := range regexp.MustCompile(`msg="(\d+) similar messages suppressed" [^\n]*TLS handshake error`).FindAllStringSubmatch(p.stderr.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		suppressed += n
	}
	if logged > 5 || logged+suppressed != flood {
		t.Fatalf("%d handshake errors logged and %d counted as suppressed; want at most 5 lines and %d in all", logged, suppressed, flood)
	}
	t.Logf("%d connections: %d handshake lines, %d suppressed and counted", flood, logged, suppressed)
}
