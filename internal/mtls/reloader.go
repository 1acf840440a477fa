package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCheckInterval is how often, at most, a handshake makes the
// Reloader look at the files' modification times.
const DefaultCheckInterval = time.Second

// Files names the TLS material of a member.
type Files struct {
	// CertFile and KeyFile are the member certificate (PEM, leaf first,
	// intermediates after it) and its private key (PEM).
	CertFile string
	KeyFile  string
	// CAFile is the PEM bundle of CA certificates member certificates
	// chain to. During a CA rotation it holds the old and the new CA.
	CAFile string
}

// Options tune a Reloader.
type Options struct {
	// Logger receives reloads (info) and rejected files (error). Nil
	// discards.
	Logger *slog.Logger
	// Registerer receives metastore_tls_reloads_total and
	// metastore_tls_certificate_expiry_timestamp_seconds. May be nil.
	Registerer prometheus.Registerer
	// CheckInterval is the least time between two looks at the files'
	// modification times (default DefaultCheckInterval).
	CheckInterval time.Duration
	// Now is the clock (default time.Now): tests move it to make the next
	// handshake look at the files.
	Now func() time.Time
}

// material is one consistent set of certificate, key and CA pool.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool
	sig  signature
}

// signature identifies the versions of the three files by modification
// time and size; a change of either makes the Reloader read them again.
type signature [3]struct {
	mod  int64
	size int64
}

// Reloader holds the current TLS material of a member and re-reads it when
// the files change: at most once per CheckInterval on a handshake, and on
// Reload (which serve calls on SIGHUP). New connections use the new
// material; established connections keep theirs. A file that cannot be
// loaded, or a certificate that does not chain to the CA bundle, leaves the
// current material in place; the failure is logged once per version of the
// files and counted as metastore_tls_reloads_total{result="error"}.
type Reloader struct {
	files    Files
	log      *slog.Logger
	now      func() time.Time
	interval time.Duration

	cur atomic.Pointer[material]

	// mu serialises looks at the files; a handshake that finds it held
	// uses the current material instead of waiting.
	mu        sync.Mutex
	lastCheck time.Time
	failed    signature // files whose load failed, not retried until they change
	hasFailed bool

	reloads *prometheus.CounterVec
}

// NewReloader loads the material in files. It fails when a file cannot be
// read or parsed, or when the certificate is not a valid member
// certificate of the CA bundle at this moment.
func NewReloader(files Files, opts Options) (*Reloader, error) {
	r := &Reloader{files: files, log: opts.Logger, now: opts.Now, interval: opts.CheckInterval}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.interval <= 0 {
		r.interval = DefaultCheckInterval
	}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.lastCheck = r.now()
	if err := r.register(opts.Registerer); err != nil {
		return nil, err
	}
	r.log.Info("TLS material loaded", "cert_file", files.CertFile, "ca_file", files.CAFile,
		"subject", m.cert.Leaf.Subject.CommonName, "not_after", m.cert.Leaf.NotAfter)
	return r, nil
}

func (r *Reloader) register(reg prometheus.Registerer) error {
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metastore_tls_reloads_total",
		Help: "Reloads of the TLS certificate, key and CA files by result (ok, or error: the old material was kept).",
	}, []string{"result"})
	r.reloads.WithLabelValues("ok")
	r.reloads.WithLabelValues("error")
	if reg == nil {
		return nil
	}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "metastore_tls_certificate_expiry_timestamp_seconds",
		Help: "Expiry (NotAfter, Unix seconds) of the member certificate in use.",
	}, func() float64 { return float64(r.cur.Load().cert.Leaf.NotAfter.Unix()) })
	for _, c := range []prometheus.Collector{r.reloads, expiry} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("mtls: register metrics: %w", err)
		}
	}
	return nil
}

// Files returns the files the Reloader reads.
func (r *Reloader) Files() Files { return r.files }

// Certificate returns the member certificate in use (after looking at the
// files if CheckInterval has passed).
func (r *Reloader) Certificate() *tls.Certificate { return r.current().cert }

// Pool returns the CA pool in use (after looking at the files if
// CheckInterval has passed).
func (r *Reloader) Pool() *x509.CertPool { return r.current().pool }

// ReloadErrors returns how many reloads failed since the start.
func (r *Reloader) ReloadErrors() float64 {
	return counterValue(r.reloads.WithLabelValues("error"))
}

// current returns the material to use for a handshake, first looking at
// the files if CheckInterval has passed since the last look.
func (r *Reloader) current() *material {
	if r.mu.TryLock() {
		if r.now().Sub(r.lastCheck) >= r.interval {
			r.lastCheck = r.now()
			r.checkLocked(false)
		}
		r.mu.Unlock()
	}
	return r.cur.Load()
}

// Reload reads the files again now if they changed since the material in
// use was loaded (or since a failed attempt), and returns the error of a
// failed load; the material in use is kept then. serve calls it on SIGHUP.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastCheck = r.now()
	return r.checkLocked(true)
}

// checkLocked reloads when the files' signature differs from the loaded
// one. A signature that failed before is retried only when forced.
func (r *Reloader) checkLocked(force bool) error {
	sig := r.signature()
	if sig == r.cur.Load().sig {
		return nil
	}
	if !force && r.hasFailed && sig == r.failed {
		return nil
	}
	m, err := r.load()
	if err != nil {
		r.failed, r.hasFailed = sig, true
		r.reloads.WithLabelValues("error").Inc()
		r.log.Error("TLS files changed but cannot be used; keeping the certificate in use",
			"cert_file", r.files.CertFile, "key_file", r.files.KeyFile, "ca_file", r.files.CAFile, "err", err)
		return err
	}
	r.hasFailed = false
	old := r.cur.Swap(m)
	r.reloads.WithLabelValues("ok").Inc()
	r.log.Info("TLS material reloaded; new connections use it",
		"subject", m.cert.Leaf.Subject.CommonName, "serial", m.cert.Leaf.SerialNumber.String(),
		"not_after", m.cert.Leaf.NotAfter, "previous_serial", old.cert.Leaf.SerialNumber.String())
	return nil
}

func (r *Reloader) signature() signature {
	var s signature
	for i, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.CAFile} {
		fi, err := os.Stat(f)
		if err != nil {
			s[i].mod, s[i].size = -1, -1
			continue
		}
		s[i].mod, s[i].size = fi.ModTime().UnixNano(), fi.Size()
	}
	return s
}

// load reads the three files and checks that they belong together: the
// key matches the certificate and the certificate is a member certificate
// of the CA bundle, valid now.
func (r *Reloader) load() (*material, error) {
	// The signature is taken before reading, so a file that changes while
	// it is read is read again at the next look.
	sig := r.signature()
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: load certificate %s and key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("mtls: parse certificate %s: %w", r.files.CertFile, err)
		}
	}
	pool, err := LoadPool(r.files.CAFile)
	if err != nil {
		return nil, err
	}
	chain := []*x509.Certificate{cert.Leaf}
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("mtls: parse intermediate in %s: %w", r.files.CertFile, err)
		}
		chain = append(chain, c)
	}
	if err := VerifyMember(chain, pool, r.now()); err != nil {
		return nil, fmt.Errorf("mtls: %s cannot be used with the CA bundle %s: %w", r.files.CertFile, r.files.CAFile, err)
	}
	if fi, err := os.Stat(r.files.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		r.log.Warn("the TLS key file is readable by other users; chmod 600 it", "key_file", r.files.KeyFile, "mode", fi.Mode().Perm().String())
	}
	return &material{cert: &cert, pool: pool, sig: sig}, nil
}

// LoadPool reads a PEM bundle of CA certificates. It fails when the file
// holds no certificate or anything that does not parse.
func LoadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("mtls: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("mtls: CA bundle %s holds a %q block; want only certificates", file, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("mtls: CA bundle %s: %w", file, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("mtls: CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

// VerifyMember checks that chain (leaf first, then any intermediates the
// peer sent) is a member certificate: it chains to a CA in roots at time
// now, and its extended key usage allows both server and client
// authentication. The peer's address is not checked (see the package
// documentation for why).
func VerifyMember(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
		if err != nil {
			return fmt.Errorf("certificate %q (issuer %q) is not a member certificate of this cluster: %w",
				leaf.Subject.CommonName, leaf.Issuer.CommonName, err)
		}
	}
	return nil
}

// ServerConfig is the TLS configuration of the HTTP API: TLS 1.2 or newer,
// the member certificate in use, and a client certificate verified against
// the CA when one is presented (none is required).
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   tls.VerifyClientCertIfGiven,
				NextProtos:   []string{"h2", "http/1.1"},
			}, nil
		},
	}
}

// clientHandshakeTimeout bounds the TLS handshake of DialTLS.
const clientHandshakeTimeout = 10 * time.Second

// ClientConfig is the TLS configuration of an https connection to another
// member at host (a name or an IP address): the usual verification, the
// server's certificate chaining to the CA in use and naming host; the
// member certificate is offered as client certificate.
func (r *Reloader) ClientConfig(host string) *tls.Config {
	m := r.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    m.pool,
		ServerName: host,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.cert, nil
		},
	}
}

// DialTLS returns a DialTLSContext for an http.Transport that talks https
// to other members: it connects with dialer and handshakes with
// ClientConfig for the host of the address, so every new connection uses
// the material in use at that moment. The handshake is bounded by ctx and
// by a timeout of its own.
func (r *Reloader) DialTLS(dialer *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hctx, cancel := context.WithTimeout(ctx, clientHandshakeTimeout)
		defer cancel()
		c := tls.Client(raw, r.ClientConfig(host))
		if err := c.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}

// RaftServerConfig is the TLS configuration of the Raft listener: mutual
// TLS 1.3; the dialing member must present a member certificate of the CA
// in use (VerifyMember).
func (r *Reloader) RaftServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return VerifyMember(cs.PeerCertificates, m.pool, r.now())
				},
			}, nil
		},
	}
}

// RaftClientConfig is the TLS configuration of a Raft dial: mutual TLS
// 1.3; the listening member must present a member certificate of the CA in
// use (VerifyMember), whatever address it was dialled at.
func (r *Reloader) RaftClientConfig() *tls.Config {
	m := r.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// VerifyConnection does the verification, without the host name
		// check (see the package documentation).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyMember(cs.PeerCertificates, m.pool, r.now())
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.cert, nil
		},
	}
}
