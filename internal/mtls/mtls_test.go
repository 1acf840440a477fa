package mtls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writeMember writes a member certificate of ca for 127.0.0.1 to dir.
func writeMember(t *testing.T, ca *CA, dir, name string) (certFile, keyFile string) {
	t.Helper()
	c, k, err := ca.WriteMember(dir, MemberOptions{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// touch gives a file a modification time no other version had, so a
// change is seen whatever the file system's timestamp granularity.
var touchSeq = time.Now()

func touch(t *testing.T, files ...string) {
	t.Helper()
	touchSeq = touchSeq.Add(time.Second)
	for _, f := range files {
		if err := os.Chtimes(f, touchSeq, touchSeq); err != nil {
			t.Fatal(err)
		}
	}
}

// serverSerial makes one TLS handshake with a server using cfg and returns
// the serial number of the certificate it presented.
func serverSerial(t *testing.T, cfg *tls.Config, pool *x509.CertPool) *big.Int {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- c.(*tls.Conn).Handshake()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func serialOf(t *testing.T, certFile string) *big.Int {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

func TestReloadOnChangeAndKeepOnBadFile(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	caFile, _, err := ca.WriteCA(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeMember(t, ca, dir, "n1")
	first := serialOf(t, certFile)
	clock := &fakeClock{t: time.Now()}
	r, err := NewReloader(Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, Options{Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := LoadPool(caFile)
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(first) != 0 {
		t.Fatalf("first handshake used serial %v, want %v", got, first)
	}

	// A new certificate on disk: not looked at before the check interval
	// has passed, used by the next handshake after it.
	writeMember(t, ca, dir, "n1")
	touch(t, certFile, keyFile)
	second := serialOf(t, certFile)
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(first) != 0 {
		t.Fatalf("handshake within the check interval used serial %v, want the old %v", got, first)
	}
	clock.add(DefaultCheckInterval)
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(second) != 0 {
		t.Fatalf("handshake after the change used serial %v, want the new %v", got, second)
	}

	// A broken certificate file: the old material stays, the error is
	// counted once for this version of the files.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	touch(t, certFile)
	clock.add(DefaultCheckInterval)
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(second) != 0 {
		t.Fatalf("after a bad file the handshake used serial %v, want the kept %v", got, second)
	}
	if n := r.ReloadErrors(); n != 1 {
		t.Fatalf("reload errors %v, want 1", n)
	}
	clock.add(DefaultCheckInterval)
	serverSerial(t, r.ServerConfig(), pool)
	if n := r.ReloadErrors(); n != 1 {
		t.Fatalf("reload errors %v after another look at the same bad file, want still 1", n)
	}
	// A forced Reload retries and reports the error.
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "load certificate") {
		t.Fatalf("Reload of a bad file: %v", err)
	}

	// A certificate of another CA is refused as well.
	other := newCA(t, "other")
	writeMember(t, other, dir, "n1")
	touch(t, certFile, keyFile)
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "not a member certificate") {
		t.Fatalf("Reload of a certificate of another CA: %v", err)
	}
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(second) != 0 {
		t.Fatalf("after a foreign certificate the handshake used serial %v, want the kept %v", got, second)
	}

	// A good certificate again, picked up by an explicit Reload (SIGHUP)
	// without moving the clock.
	writeMember(t, ca, dir, "n1")
	touch(t, certFile, keyFile)
	third := serialOf(t, certFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := serverSerial(t, r.ServerConfig(), pool); got.Cmp(third) != 0 {
		t.Fatalf("after Reload the handshake used serial %v, want %v", got, third)
	}
}

// TestCARotation follows the documented rotation: a bundle of the old and
// the new CA first, then member certificates of the new CA.
func TestCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newCA(t, "old"), newCA(t, "new")
	caFile := filepath.Join(dir, "bundle.crt")
	if err := WriteFileAtomic(caFile, oldCA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeMember(t, oldCA, dir, "n1")
	r, err := NewReloader(Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Step 1: both CAs trusted.
	if err := WriteFileAtomic(caFile, append(oldCA.CertPEM(), newCA.CertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	touch(t, caFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	peerNew := parseCert(t, newCAMember(t, newCA))
	if err := VerifyMember([]*x509.Certificate{peerNew}, r.Pool(), time.Now()); err != nil {
		t.Fatalf("a member of the new CA during the rotation: %v", err)
	}
	// Step 2: this member's certificate from the new CA.
	writeMember(t, newCA, dir, "n1")
	touch(t, certFile, keyFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	// Step 3: the old CA dropped; an old-CA member is no longer accepted.
	if err := WriteFileAtomic(caFile, newCA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	touch(t, caFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	peerOld := parseCert(t, newCAMember(t, oldCA))
	if err := VerifyMember([]*x509.Certificate{peerOld}, r.Pool(), time.Now()); err == nil {
		t.Fatal("a member of the dropped CA is still accepted")
	}
}

func newCAMember(t *testing.T, ca *CA) []byte {
	t.Helper()
	c, _, err := ca.NewMember(MemberOptions{Name: "peer", DNSNames: []string{"peer"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestVerifyMemberNeedsBothUsages: a certificate of the CA that allows only
// client (or only server) authentication is not a member certificate.
func TestVerifyMemberNeedsBothUsages(t *testing.T) {
	ca := newCA(t, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, tc := range []struct {
		name  string
		usage []x509.ExtKeyUsage
		ok    bool
	}{
		{"server and client", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, true},
		{"client only", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, false},
		{"server only", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			tmpl := &x509.Certificate{
				SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "x"},
				NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: tc.usage,
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := x509.ParseCertificate(der)
			err = VerifyMember([]*x509.Certificate{c}, pool, time.Now())
			if (err == nil) != tc.ok {
				t.Fatalf("VerifyMember: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if err := VerifyMember(nil, pool, time.Now()); err == nil {
		t.Fatal("no certificate accepted")
	}
}

// TestClientConfigChecksHostAndCA: member-to-member https verifies the CA
// in use and the host name.
func TestClientConfigChecksHostAndCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	caFile, _, _ := ca.WriteCA(dir, false)
	certFile, keyFile := writeMember(t, ca, dir, "n1")
	r, err := NewReloader(Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	dial := func(serverName string) error {
		c, err := tls.Dial("tcp", ln.Addr().String(), r.ClientConfig(serverName))
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial("127.0.0.1"); err != nil {
		t.Fatalf("dial the name in the certificate: %v", err)
	}
	c, err := r.DialTLS(&net.Dialer{})(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialTLS: %v", err)
	}
	c.Close()
	var hostErr x509.HostnameError
	if err := dial("10.9.9.9"); !errors.As(err, &hostErr) {
		t.Fatalf("dial a name not in the certificate: %v, want a host name error", err)
	}
}

func TestWriteFilesModesAndNoOverwrite(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	certFile, keyFile, err := ca.WriteCA(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{certFile: 0o644, keyFile: 0o600} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Fatalf("%s has mode %v, want %v", f, fi.Mode().Perm(), want)
		}
	}
	if _, _, err := ca.WriteCA(dir, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second WriteCA: %v", err)
	}
	loaded, err := LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Fatal("LoadCA returned another certificate")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
	// A member certificate never outlives its CA.
	c, _, err := ca.NewMember(MemberOptions{Name: "n1", DNSNames: []string{"a"}, Validity: 10 * DefaultMemberValidity})
	if err != nil {
		t.Fatal(err)
	}
	if got := parseCert(t, c).NotAfter; got.After(ca.Cert.NotAfter) {
		t.Fatalf("member expires %v after its CA %v", got, ca.Cert.NotAfter)
	}
}
