// Package tcpproxy is a userspace TCP forwarder with injectable link
// faults: latency (with jitter), random connection resets, refused
// connections and blackholes, configurable per source host at run time.
//
// The consistency suite puts one in front of each member's Raft listener
// (this machine's kernel has no netem, so delay and loss cannot be done with
// tc): members advertise the proxy's address, so every Raft connection to a
// member X passes X's proxy, which knows the dialling member from the
// connection's source address.
//
// Faults apply per connection direction as data is forwarded:
//
//   - Delay and Jitter: every chunk read from one side is written to the
//     other no earlier than Delay plus a random part of Jitter after it was
//     read. Order is kept (a chunk never overtakes an earlier one), so a
//     stream sees added latency, never reordering.
//   - ResetProb: the probability, per forwarded chunk, that the connection
//     is reset (both sides closed with SO_LINGER 0, so peers see a reset).
//   - RefuseProb: the probability that a new connection is closed at once.
//   - Blackhole: nothing is forwarded (data waits in the proxy and TCP
//     buffers, as in a network that drops every packet and lets TCP
//     retransmit); new connections are held the same way. Lifting the
//     blackhole delivers what waited, unless a side gave up meanwhile.
//
// Hold does what Blackhole does for one direction of one source's
// connections, apart from the link faults (so a partition and a slow
// link can be in force together): holding FromTarget for source B on
// member A's proxy drops what A answers on the connections B opened to
// A, the half of a one-way cut A->B that a filter on A's own outgoing
// connections does not reach.
//
// A Link change applies at once to open connections.
package tcpproxy

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is the fault setting for traffic through the proxy. The zero Link
// forwards everything at once.
type Link struct {
	Delay  time.Duration `json:"delay,omitempty"`
	Jitter time.Duration `json:"jitter,omitempty"`
	// ResetProb is the probability in [0, 1] that a forwarded chunk resets
	// its connection instead.
	ResetProb float64 `json:"reset_prob,omitempty"`
	// RefuseProb is the probability in [0, 1] that a new connection is
	// closed right after it was accepted.
	RefuseProb float64 `json:"refuse_prob,omitempty"`
	// Blackhole stops all forwarding until it is lifted.
	Blackhole bool `json:"blackhole,omitempty"`
}

// IsZero reports whether l injects nothing.
func (l Link) IsZero() bool { return l == Link{} }

// Stats counts what the proxy did since it started.
type Stats struct {
	Accepted int64 `json:"accepted"`
	Refused  int64 `json:"refused"`
	Resets   int64 `json:"resets"`
	// DialErrors counts connections whose target could not be dialled
	// (the member is down).
	DialErrors int64 `json:"dial_errors"`
	Open       int64 `json:"open"`
	// BytesToTarget and BytesFromTarget count forwarded bytes.
	BytesToTarget   int64 `json:"bytes_to_target"`
	BytesFromTarget int64 `json:"bytes_from_target"`
}

// Proxy forwards connections accepted on its listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	def      Link
	bySource map[string]Link // source host -> link
	held     map[string]Direction
	conns    map[*conn]struct{}
	// changed is closed and replaced when a link changes, to wake held
	// writers.
	changed chan struct{}
	closed  bool

	accepted, refused, resets, dialErrors, open, toTarget, fromTarget atomic.Int64

	wg sync.WaitGroup
}

// Listen starts a proxy listening on listenAddr ("host:0" picks a port)
// and forwarding to target.
func Listen(listenAddr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, bySource: map[string]Link{}, held: map[string]Direction{}, conns: map[*conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// SetDefault sets the link used for sources without their own setting.
func (p *Proxy) SetDefault(l Link) {
	p.mu.Lock()
	p.def = l
	p.notifyLocked()
	p.mu.Unlock()
}

// SetSource sets the link for connections from host (an IP address, as in
// the connection's remote address).
func (p *Proxy) SetSource(host string, l Link) {
	p.mu.Lock()
	if l.IsZero() {
		delete(p.bySource, host)
	} else {
		p.bySource[host] = l
	}
	p.notifyLocked()
	p.mu.Unlock()
}

// Direction is a direction of forwarding, as a set.
type Direction uint8

// Directions.
const (
	// ToTarget is what the connecting source sends.
	ToTarget Direction = 1 << iota
	// FromTarget is what the target answers.
	FromTarget
)

// Hold stops forwarding in directions d (added to those already held) on
// every connection from host, open or new, until Release.
func (p *Proxy) Hold(host string, d Direction) {
	p.mu.Lock()
	p.held[host] |= d
	p.notifyLocked()
	p.mu.Unlock()
}

// Release lifts every Hold; what waited is delivered.
func (p *Proxy) Release() {
	p.mu.Lock()
	clear(p.held)
	p.notifyLocked()
	p.mu.Unlock()
}

// Held returns the directions held for host.
func (p *Proxy) Held(host string) Direction {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[host]
}

// Clear removes every link fault: default and per-source links (not the
// holds).
func (p *Proxy) Clear() {
	p.mu.Lock()
	p.def = Link{}
	clear(p.bySource)
	p.notifyLocked()
	p.mu.Unlock()
}

// LinkFor returns the link that applies to connections from host.
func (p *Proxy) LinkFor(host string) Link {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.linkLocked(host)
}

func (p *Proxy) linkLocked(host string) Link {
	if l, ok := p.bySource[host]; ok {
		return l
	}
	return p.def
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// ResetAll resets every open connection.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.accepted.Load(), Refused: p.refused.Load(), Resets: p.resets.Load(),
		DialErrors: p.dialErrors.Load(), Open: p.open.Load(),
		BytesToTarget: p.toTarget.Load(), BytesFromTarget: p.fromTarget.Load(),
	}
}

// Close stops accepting, resets every open connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.notifyLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		if l := p.LinkFor(host); l.RefuseProb > 0 && rand.Float64() < l.RefuseProb {
			p.refused.Add(1)
			abort(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c, host)
	}
}

// conn is one proxied connection.
type conn struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// reset closes both sides with a reset.
func (c *conn) reset() {
	c.once.Do(func() {
		close(c.done)
		abort(c.client)
		if c.server != nil {
			abort(c.server)
		}
	})
}

// closeGracefully closes both sides normally.
func (c *conn) closeGracefully() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	})
}

func (p *Proxy) serve(client net.Conn, host string) {
	defer p.wg.Done()
	c := &conn{client: client, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		abort(client)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.open.Add(1)
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		p.open.Add(-1)
	}()

	// A blackhole holds new connections before they reach the target.
	if !p.waitOpen(c, host, ToTarget) {
		c.reset()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.dialErrors.Add(1)
		c.reset()
		return
	}
	p.mu.Lock()
	c.server = server
	p.mu.Unlock()
	select {
	case <-c.done: // reset while dialling
		abort(server)
		return
	default:
	}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, host, ToTarget, client, server, &p.toTarget) }()
	go func() { defer wg.Done(); p.pipe(c, host, FromTarget, server, client, &p.fromTarget) }()
	wg.Wait()
	c.closeGracefully()
}

// waitOpen blocks while host's link is a blackhole or direction dir of
// its connections is held; false if the connection or proxy closed
// meanwhile.
func (p *Proxy) waitOpen(c *conn, host string, dir Direction) bool {
	for {
		p.mu.Lock()
		l, held, ch, closed := p.linkLocked(host), p.held[host], p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !l.Blackhole && held&dir == 0 {
			return true
		}
		select {
		case <-ch:
		case <-c.done:
			return false
		}
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through a queue that holds each chunk until it is
// due and while the link is a blackhole. It returns when either side fails
// or the connection is reset; at EOF of src it half-closes dst.
func (p *Proxy) pipe(c *conn, host string, dir Direction, src, dst net.Conn, counter *atomic.Int64) {
	queue := make(chan chunk, 256)
	readerDone := make(chan struct{})
	var readErr error
	go func() {
		defer close(readerDone)
		defer close(queue)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				l := p.LinkFor(host)
				due := time.Now().Add(l.Delay)
				if l.Jitter > 0 {
					due = due.Add(rand.N(l.Jitter))
				}
				if due.Before(last) {
					due = last
				}
				last = due
				select {
				case queue <- chunk{buf[:n], due}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	for ch := range queue {
		for {
			if wait := time.Until(ch.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.done:
					t.Stop()
					return
				}
			}
			if p.waitOpen(c, host, dir) {
				break
			}
			return
		}
		if l := p.LinkFor(host); l.ResetProb > 0 && rand.Float64() < l.ResetProb {
			p.resets.Add(1)
			c.reset()
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.reset()
			return
		}
		counter.Add(int64(len(ch.data)))
	}
	<-readerDone
	select {
	case <-c.done:
		return
	default:
	}
	if !errors.Is(readErr, io.EOF) {
		c.reset()
		return
	}
	// src reached EOF: pass the half-close on.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

var _ io.Closer = (*Proxy)(nil)
