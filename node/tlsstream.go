package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/internal/mtls"
)

// raftHandshakeTimeout bounds one TLS handshake of a Raft connection, on
// either side.
const raftHandshakeTimeout = 5 * time.Second

// tlsStreamLayer is the Raft stream layer with mutual TLS: a TCP listener
// whose connections are TLS servers, and a dialer of TLS clients. Both
// sides take the member certificate and the CA pool from the Reloader at
// each handshake and accept only a peer presenting a member certificate of
// the CA (mtls.VerifyMember).
//
// raft.NetworkTransport calls Accept in a single loop and hands every
// connection to a goroutine of its own, so Accept does not handshake: the
// server handshake runs on the connection's first Read or Write, in that
// goroutine, bounded by the handshake timeout. A peer that connects and
// never completes the handshake holds up nobody but itself.
type tlsStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	material  *mtls.Reloader
	timeout   time.Duration
	log       *slog.Logger
	// failures counts refused handshakes by side (accept, dial).
	failures *prometheus.CounterVec
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

func newTLSStreamLayer(ln net.Listener, advertise net.Addr, material *mtls.Reloader, log *slog.Logger) *tlsStreamLayer {
	s := &tlsStreamLayer{
		ln:        ln,
		advertise: advertise,
		server:    material.RaftServerConfig(),
		material:  material,
		timeout:   raftHandshakeTimeout,
		log:       log,
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metastore_raft_tls_handshake_failures_total",
			Help: "Raft connections whose TLS handshake failed (peer without a member certificate of the CA, timeout, ...), by side (accept, dial).",
		}, []string{"side"}),
	}
	s.failures.WithLabelValues("accept")
	s.failures.WithLabelValues("dial")
	return s
}

// Accept returns the next connection as a TLS server connection whose
// handshake has not happened yet (see tlsStreamLayer).
func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsServerConn{Conn: tls.Server(c, s.server), layer: s}, nil
}

// Close closes the listener.
func (s *tlsStreamLayer) Close() error { return s.ln.Close() }

// Addr is the advertised address.
func (s *tlsStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

// Dial connects to address within timeout and completes the TLS handshake
// within the handshake timeout; a peer that is not a member is refused
// here, before any Raft message is sent.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	raw, err := (&net.Dialer{Timeout: timeout}).Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, s.material.RaftClientConfig())
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		s.failures.WithLabelValues("dial").Inc()
		s.log.Error("raft: TLS handshake with a member failed; no Raft traffic to it",
			"address", string(address), "err", err)
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", address, err)
	}
	return conn, nil
}

// tlsServerConn is an accepted connection that runs its server handshake,
// bounded by the layer's timeout, before its first Read or Write.
type tlsServerConn struct {
	*tls.Conn
	layer *tlsStreamLayer
	once  sync.Once
	err   error
}

func (c *tlsServerConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.layer.timeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
		if c.err == nil {
			if st := c.Conn.ConnectionState(); len(st.PeerCertificates) > 0 {
				c.layer.log.Debug("raft: member connected", "remote", c.RemoteAddr().String(),
					"peer", st.PeerCertificates[0].Subject.CommonName)
			}
			return
		}
		c.layer.failures.WithLabelValues("accept").Inc()
		if errors.Is(c.err, context.DeadlineExceeded) {
			c.err = fmt.Errorf("TLS handshake not completed within %s: %w", c.layer.timeout, c.err)
		}
		msg := "raft: refused a connection: TLS handshake failed (the peer presented no member certificate of this cluster's CA, or did not finish the handshake)"
		// crypto/tls reports an alert sent by the peer as a *net.OpError
		// with Op "remote error".
		var remote *net.OpError
		if errors.As(c.err, &remote) && remote.Op == "remote error" {
			msg = "raft: refused a connection: the connecting peer rejected this member's certificate (is it signed by the cluster's CA?)"
		}
		c.layer.log.Error(msg, "remote", c.RemoteAddr().String(), "err", c.err)
		c.Conn.Close()
	})
	return c.err
}

func (c *tlsServerConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *tlsServerConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// listenRaftTLS binds the Raft address and returns the TLS stream layer
// on it, with the same checks of the advertised address as raft's TCP
// transport.
func listenRaftTLS(bind string, advertise *net.TCPAddr, material *mtls.Reloader, log *slog.Logger) (*tlsStreamLayer, error) {
	if advertise == nil || advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %v is not advertisable", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return newTLSStreamLayer(ln, advertise, material, log), nil
}
