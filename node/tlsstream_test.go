package node

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/metastore/metastore/internal/mtls"
)

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// memberMaterial writes a member certificate of ca to a new directory and
// loads it.
func memberMaterial(t *testing.T, ca *mtls.CA, name string) *mtls.Reloader {
	t.Helper()
	dir := t.TempDir()
	caFile, _, err := ca.WriteCA(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.WriteMember(dir, mtls.MemberOptions{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	r, err := mtls.NewReloader(mtls.Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testCA(t *testing.T, name string) *mtls.CA {
	t.Helper()
	ca, err := mtls.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newTestLayer listens on a loopback port with material.
func newTestLayer(t *testing.T, material *mtls.Reloader, logs io.Writer) *tlsStreamLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newTLSStreamLayer(ln, nil, material, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { s.Close() })
	return s
}

// serveEcho accepts connections as raft.NetworkTransport does (one loop,
// a goroutine per connection) and echoes one line per connection. The
// error of every connection's first read is sent on errs.
func serveEcho(s *tlsStreamLayer, errs chan<- error) {
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 5)
				_, err := io.ReadFull(c, buf)
				if err == nil {
					_, err = c.Write(buf)
				}
				errs <- err
			}()
		}
	}()
}

// roundTrip dials addr with layer d and checks the echo.
func roundTrip(t *testing.T, d *tlsStreamLayer, addr string) {
	t.Helper()
	c, err := d.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}

func TestTLSStreamLayerMutualHandshake(t *testing.T) {
	ca := testCA(t, "cluster")
	var logs logBuffer
	server := newTestLayer(t, memberMaterial(t, ca, "n1"), &logs)
	client := newTestLayer(t, memberMaterial(t, ca, "n2"), &logs)
	errs := make(chan error, 16)
	serveEcho(server, errs)
	roundTrip(t, client, server.ln.Addr().String())
	if err := <-errs; err != nil {
		t.Fatalf("server side: %v", err)
	}
	if n := counterValue(server.failures.WithLabelValues("accept")); n != 0 {
		t.Fatalf("%v accept failures", n)
	}
}

// TestTLSStreamLayerRefusesNonMembers: a peer without a certificate, or
// with one of another CA, is refused by the listener, which keeps serving
// members; a member does not talk to a listener of another CA.
func TestTLSStreamLayerRefusesNonMembers(t *testing.T) {
	ca, other := testCA(t, "cluster"), testCA(t, "other")
	var logs logBuffer
	server := newTestLayer(t, memberMaterial(t, ca, "n1"), &logs)
	member := newTestLayer(t, memberMaterial(t, ca, "n2"), &logs)
	errs := make(chan error, 16)
	serveEcho(server, errs)
	addr := server.ln.Addr().String()

	foreign := memberMaterial(t, other, "rogue")
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no certificate", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}},
		// GetClientCertificate sends the certificate even though the
		// listener asks for one of its own CA (Certificates would not).
		{"certificate of another CA", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return foreign.Certificate(), nil }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", addr, tc.cfg)
			if err == nil {
				// TLS 1.3: the client finishes before the server has
				// checked its certificate; the refusal arrives on read.
				_, _ = c.Write([]byte("hello"))
				_, err = io.ReadFull(c, make([]byte, 5))
				c.Close()
			}
			if err == nil {
				t.Fatal("a non-member exchanged data with the Raft listener")
			}
			if serr := <-errs; serr == nil {
				t.Fatal("the listener accepted a non-member")
			} else {
				t.Logf("refused: client %v; server %v", err, serr)
			}
			// The listener still serves members.
			roundTrip(t, member, addr)
			if err := <-errs; err != nil {
				t.Fatalf("member after the refusal: %v", err)
			}
		})
	}
	if n := counterValue(server.failures.WithLabelValues("accept")); n != 2 {
		t.Fatalf("%v accept failures counted, want 2", n)
	}
	if !strings.Contains(logs.String(), "raft: refused a connection") {
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}

	// A member dialing a listener whose certificate is of another CA
	// refuses it at Dial.
	rogue := newTestLayer(t, foreign, &logs)
	rogueErrs := make(chan error, 4)
	serveEcho(rogue, rogueErrs)
	_, err := member.Dial(raft.ServerAddress(rogue.ln.Addr().String()), 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not a member certificate") {
		t.Fatalf("dial of a foreign listener: %v", err)
	}
	if serr := <-rogueErrs; serr == nil {
		t.Fatal("the foreign listener completed a handshake with a member")
	}
	if n := counterValue(member.failures.WithLabelValues("dial")); n != 1 {
		t.Fatalf("%v dial failures counted, want 1", n)
	}
}

// TestTLSStreamLayerStalledHandshake: a peer that connects and sends
// nothing does not hold up Accept for members, and its handshake ends at
// the handshake timeout.
func TestTLSStreamLayerStalledHandshake(t *testing.T) {
	ca := testCA(t, "cluster")
	var logs logBuffer
	server := newTestLayer(t, memberMaterial(t, ca, "n1"), &logs)
	member := newTestLayer(t, memberMaterial(t, ca, "n2"), &logs)
	server.timeout = time.Minute // the stalled peer outlasts the test's exchanges
	errs := make(chan error, 16)
	serveEcho(server, errs)
	addr := server.ln.Addr().String()

	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	for range 3 {
		roundTrip(t, member, addr)
		if err := <-errs; err != nil {
			t.Fatalf("member while a peer stalls: %v", err)
		}
	}

	// With a short timeout the stalled handshake fails on its own.
	short := newTestLayer(t, memberMaterial(t, ca, "n3"), &logs)
	short.timeout = 50 * time.Millisecond
	shortErrs := make(chan error, 4)
	serveEcho(short, shortErrs)
	stalled2, err := net.Dial("tcp", short.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled2.Close()
	select {
	case err := <-shortErrs:
		if err == nil || !strings.Contains(err.Error(), "not completed within") {
			t.Fatalf("stalled handshake ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled handshake did not time out")
	}
	// The stalled peer's connection was closed by the listener.
	_ = stalled2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := stalled2.Read(make([]byte, 1)); err == nil {
		t.Fatal("the stalled connection is still open")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
