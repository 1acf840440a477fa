// Package cluster runs the metastore cluster under test for the
// consistency suite: real processes in their own network namespaces, a real
// S3-protocol server process behind a fault-injecting, request-recording
// proxy, and userspace TCP proxies on the Raft links. It needs root.
//
// # Layout
//
//	root namespace                           namespace PREFIX-nK (K = 1..N+spares)
//	--------------                           -------------------------------------
//	bridge PREFIX-br  SUBNET.1/24  <--veth-->  eth0 SUBNET.(10+K)
//	  s3server process   SUBNET.1:port            metastore serve (nK)
//	  S3 proxy           SUBNET.1:port  <-- S3      HTTP API   SUBNET.(10+K):7070
//	  Raft proxy of nK   SUBNET.1:port  --> Raft    Raft       SUBNET.(10+K):7071
//	                                                faultpoint SUBNET.(10+K):7079
//
// Every member advertises its Raft proxy as its Raft address, so every Raft
// connection to nK passes nK's proxy (SetLink, SetLinks: delay, resets,
// blackholes). The members' HTTP traffic (forwarding to the leader, joins)
// goes member to member directly. Clients in the test process reach every
// member's API over the bridge, and the S3 server through the proxy (the
// presigned URLs the members hand out name the proxy too).
//
// # Partitions
//
// Partition installs a Grudge with iptables inside the namespaces: for
// "A cannot send to B", A's namespace drops what A sends on connections A
// opens (conntrack --ctdir ORIGINAL) to B's address and to B's Raft proxy.
// Raft from A to B then fails at the IP layer, as does A's HTTP to B, while
// B may still open connections to A and get answers (a one-way partition
// is just a Grudge with one direction). The test process and the object
// store are never cut off. See net.go for the exact rules.
//
// # Life cycle
//
// Start takes the lock of its name prefix (a free default slot if none is
// given: see lock.go), removes any leftovers of a crashed run under that
// prefix (RemoveLeftovers), builds the binaries, sets up the network and starts
// everything; Close stops it and removes the network again. The work
// directory (binaries, data directories, node logs, the S3 request log)
// stays for the caller to keep or remove; StartT does both for a test.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/jepsen/s3proxy"
	"github.com/metastore/metastore/jepsen/tcpproxy"
)

// Options configure a cluster. Zero fields take the defaults in
// DefaultOptions.
type Options struct {
	// WorkDir holds bin/, data/, logs/ and s3/; it must not hold data of
	// an earlier cluster. Empty: a new directory in os.TempDir(), named
	// metastore-jepsen-*.
	WorkDir string
	// Prefix starts the names of namespaces, links and rules (at most 8
	// characters; interface names are limited to 15). Empty: the first
	// free default slot (msj on 10.77.0, msj1 on 10.77.1, ...; see
	// lock.go). One cluster per prefix runs at a time on a machine; Start
	// waits for the prefix to be free.
	Prefix string
	// Subnet is the first three octets of the private /24 the cluster
	// uses; the bridge is .1, member K is .(10+K). Clusters that run at
	// the same time need different subnets. Empty: the slot's (10.77.K),
	// or 10.77.0 with an explicit Prefix.
	Subnet string
	// Members is the size of the initial cluster (n1..nN); Spares adds
	// members outside it (n(N+1)...), which enter by StartJoin (0: one
	// spare; negative: none).
	Members int
	Spares  int
	// LossyDisk puts each member's data directory on a jepsen/lossyfs
	// mount (backed by DataDir+".disk"), so that Member.PowerLoss can drop
	// the writes not yet fsynced. It needs /dev/fuse.
	LossyDisk bool

	// Raft settings of every member.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	ApplyTimeout       time.Duration

	// GC and upload settings of every member.
	GCInterval    time.Duration
	GCGrace       time.Duration
	GCBatch       int
	GCOrphanGrace time.Duration
	GCOrphanEvery time.Duration
	UploadLease   time.Duration

	// LogLevel of the members (debug, info, warn, error).
	LogLevel string
	// ExtraArgs are appended to every member's serve command line; Env to
	// its environment.
	ExtraArgs []string
	Env       []string

	// Binary is a prebuilt metastore binary (built with -tags faultinject
	// for the fault points); empty builds ./cmd/metastore into the work
	// directory with BuildTags (default: faultinject) and, if Race, -race.
	Binary    string
	BuildTags []string
	Race      bool

	// Bucket and Prefix of the members' object store.
	Bucket   string
	S3Prefix string

	// StartTimeout bounds the wait for one member's API after a start.
	StartTimeout time.Duration
	// Logf receives progress lines (nil: discarded).
	Logf func(format string, args ...any)
}

// DefaultOptions are the settings used for zero fields: a three-member
// cluster and one spare, timeouts short enough for a test (heartbeat and
// election 500ms, lease 250ms), snapshots every 256 entries keeping 128.
func DefaultOptions() Options {
	return Options{
		Members:            3,
		Spares:             1,
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
		SnapshotInterval:   500 * time.Millisecond,
		SnapshotThreshold:  256,
		TrailingLogs:       128,
		ApplyTimeout:       5 * time.Second,
		GCInterval:         2 * time.Second,
		GCGrace:            2 * time.Second,
		GCBatch:            100,
		GCOrphanGrace:      time.Minute,
		GCOrphanEvery:      0,
		UploadLease:        time.Minute,
		LogLevel:           "info",
		BuildTags:          []string{FaultInjectTag},
		Bucket:             "jepsen",
		S3Prefix:           "ms",
		StartTimeout:       60 * time.Second,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	set := func(dst *time.Duration, v time.Duration) {
		if *dst == 0 {
			*dst = v
		}
	}
	if o.Members == 0 {
		o.Members = d.Members
	}
	if o.Spares == 0 {
		o.Spares = d.Spares
	} else if o.Spares < 0 {
		o.Spares = 0
	}
	set(&o.HeartbeatTimeout, d.HeartbeatTimeout)
	set(&o.ElectionTimeout, d.ElectionTimeout)
	set(&o.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	set(&o.CommitTimeout, d.CommitTimeout)
	set(&o.SnapshotInterval, d.SnapshotInterval)
	set(&o.ApplyTimeout, d.ApplyTimeout)
	set(&o.GCInterval, d.GCInterval)
	set(&o.GCGrace, d.GCGrace)
	set(&o.GCOrphanGrace, d.GCOrphanGrace)
	set(&o.UploadLease, d.UploadLease)
	set(&o.StartTimeout, d.StartTimeout)
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = d.SnapshotThreshold
	}
	if o.TrailingLogs == 0 {
		o.TrailingLogs = d.TrailingLogs
	}
	if o.GCBatch == 0 {
		o.GCBatch = d.GCBatch
	}
	if o.LogLevel == "" {
		o.LogLevel = d.LogLevel
	}
	if o.BuildTags == nil {
		o.BuildTags = d.BuildTags
	}
	if o.Bucket == "" {
		o.Bucket = d.Bucket
	}
	if o.S3Prefix == "" {
		o.S3Prefix = d.S3Prefix
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// Cluster is a running cluster under test. Its methods are safe for
// concurrent use.
type Cluster struct {
	opts    Options
	workDir string
	binary  string
	net     network
	lock    *machineLock
	http    *http.Client

	// S3 is the proxy in front of the S3 server: its request log and its
	// fault rules. The members' --s3-endpoint is S3.Endpoint().
	S3 *s3proxy.Proxy
	s3 *s3Process

	members []*Member

	mu     sync.Mutex
	grudge Grudge
	closed bool
	exits  []Exit
}

func (c *Cluster) recordExit(e Exit) {
	c.mu.Lock()
	c.exits = append(c.exits, e)
	c.mu.Unlock()
	c.logf("cluster: %s exited by itself: %s", e.Member, e.Status)
}

// UnexpectedExits lists the member processes that ended without the
// harness killing or stopping them: crashes, injected crashes at fault
// points (exit status 137), os.Exit calls. A checker compares them with
// the faults it injected.
func (c *Cluster) UnexpectedExits() []Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Exit(nil), c.exits...)
}

// Start builds the binaries, creates the network and starts the S3
// server, the proxies and the initial members, and waits until the
// cluster is healthy (WaitHealthy). On error everything started is
// removed again. It needs root (see Supported).
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if len(opts.Prefix) > 8 {
		return nil, fmt.Errorf("cluster: prefix %q is longer than 8 characters", opts.Prefix)
	}
	if n := opts.Members + opts.Spares; n < 1 || n > 200 {
		return nil, fmt.Errorf("cluster: %d members and spares", n)
	}
	lock, err := acquireSlot(ctx, &opts)
	if err != nil {
		return nil, err
	}
	if opts.Subnet == "" {
		opts.Subnet = "10.77.0"
	}
	c := &Cluster{
		opts: opts,
		lock: lock,
		net:  network{prefix: opts.Prefix, subnet: opts.Subnet},
		http: &http.Client{
			Timeout:   15 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 32, DialContext: (&net.Dialer{Timeout: 3 * time.Second}).DialContext},
		},
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if err := RemoveLeftovers(ctx, opts.Prefix); err != nil {
		return nil, fmt.Errorf("cluster: removing leftovers of an earlier run: %w", err)
	}

	c.workDir = opts.WorkDir
	if c.workDir == "" {
		if c.workDir, err = os.MkdirTemp("", "metastore-jepsen-*"); err != nil {
			return nil, err
		}
	} else if entries, _ := os.ReadDir(filepath.Join(c.workDir, "data")); len(entries) > 0 {
		return nil, fmt.Errorf("cluster: work directory %s already holds a cluster's data; give an empty one", c.workDir)
	}
	for _, d := range []string{"bin", "data", "logs", "s3"} {
		if err := os.MkdirAll(filepath.Join(c.workDir, d), 0o755); err != nil {
			return nil, err
		}
	}

	// Build.
	start := time.Now()
	c.binary = opts.Binary
	s3bin := filepath.Join(c.workDir, "bin", "s3server")
	var wg sync.WaitGroup
	var errMS, errS3 error
	if c.binary == "" {
		c.binary = filepath.Join(c.workDir, "bin", "metastore")
		wg.Add(1)
		go func() { defer wg.Done(); errMS = Build(ctx, MetastorePackage, c.binary, opts.BuildTags, opts.Race) }()
	}
	errS3 = Build(ctx, S3ServerPackage, s3bin, nil, false)
	wg.Wait()
	if err := errors.Join(errMS, errS3); err != nil {
		return nil, err
	}
	opts.Logf("cluster: built metastore (tags %v, race %v) and s3server in %s", opts.BuildTags, opts.Race, time.Since(start).Round(time.Millisecond))

	// Network.
	addrs := map[string]string{}
	for i := 1; i <= opts.Members+opts.Spares; i++ {
		id := fmt.Sprintf("n%d", i)
		addrs[id] = fmt.Sprintf("%s.%d", opts.Subnet, 10+i)
	}
	if err := c.net.setup(ctx, addrs); err != nil {
		return nil, err
	}
	bridgeIP := c.net.bridgeIP()

	// Object store: the server process, then the proxy.
	if c.s3, err = startS3(ctx, s3bin, bridgeIP+":0", opts.Bucket, filepath.Join(c.workDir, "s3")); err != nil {
		return nil, err
	}
	names := map[string]string{bridgeIP: "test"}
	for id, ip := range addrs {
		names[ip] = id
	}
	if c.S3, err = s3proxy.Start(bridgeIP+":0", c.s3.endpoint, s3proxy.Options{
		LogPath:    filepath.Join(c.workDir, "logs", "s3-requests.jsonl"),
		ClientName: func(ip string) string { return names[ip] },
	}); err != nil {
		return nil, err
	}

	// Members and their Raft proxies.
	for i := 1; i <= opts.Members+opts.Spares; i++ {
		id := fmt.Sprintf("n%d", i)
		ip := addrs[id]
		m := &Member{
			ID:        id,
			IP:        ip,
			NS:        c.net.ns(id),
			HTTPAddr:  net.JoinHostPort(ip, fmt.Sprint(HTTPPort)),
			RaftAddr:  net.JoinHostPort(ip, fmt.Sprint(RaftPort)),
			FaultAddr: net.JoinHostPort(ip, fmt.Sprint(FaultPort)),
			DataDir:   filepath.Join(c.workDir, "data", id),
			LogPath:   filepath.Join(c.workDir, "logs", id+".log"),
			Spare:     i > opts.Members,
			c:         c,
		}
		if m.proxy, err = tcpproxy.Listen(bridgeIP+":0", m.RaftAddr); err != nil {
			return nil, err
		}
		if opts.LossyDisk {
			if err := m.mountDisk(); err != nil {
				return nil, err
			}
		}
		m.RaftAdvertise = m.proxy.Addr()
		c.members = append(c.members, m)
	}
	opts.Logf("cluster: network %s.0/24 on bridge %s, S3 proxy %s -> %s, work dir %s", opts.Subnet, c.net.bridge(), c.S3.Endpoint(), c.s3.endpoint, c.workDir)

	errs := make([]error, len(c.members))
	for i, m := range c.members {
		if m.Spare {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Start(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return nil, fmt.Errorf("cluster: not healthy after start: %w", err)
	}
	opts.Logf("cluster: %d members healthy %s after start", opts.Members, time.Since(start).Round(time.Millisecond))
	return c, nil
}

func (c *Cluster) logf(format string, args ...any) { c.opts.Logf(format, args...) }

// Options returns the options the cluster runs with, defaults filled in.
func (c *Cluster) Options() Options { return c.opts }

// WorkDir is the directory holding binaries, data, logs and the S3 data.
func (c *Cluster) WorkDir() string { return c.workDir }

// Binary is the metastore binary the members run.
func (c *Cluster) Binary() string { return c.binary }

// BridgeIP is the root namespace's address on the bridge.
func (c *Cluster) BridgeIP() string { return c.net.bridgeIP() }

// HTTPClient is the client the cluster's helpers use (15 s timeout).
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// Members returns every member slot, spares included, in id order.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Member returns the member with id, or nil.
func (c *Cluster) Member(id string) *Member {
	for _, m := range c.members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// Serving returns the members whose process runs and is not paused.
func (c *Cluster) Serving() []*Member {
	var out []*Member
	for _, m := range c.members {
		if m.Serving() {
			out = append(out, m)
		}
	}
	return out
}

// IDs returns the ids of ms.
func IDs(ms []*Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		if !m.Spare {
			parts = append(parts, m.ID+"="+m.RaftAdvertise)
		}
	}
	return strings.Join(parts, ",")
}

// S3Endpoint is the S3 server's own endpoint (bypassing the proxy), for
// checkers that need the bucket's true content.
func (c *Cluster) S3Endpoint() string { return c.s3.endpoint }

// Bucket returns a store on the members' bucket and prefix that talks to
// the S3 server directly, not through the proxy: what the bucket really
// holds. Keys are relative to the prefix, as in the metastore's API.
func (c *Cluster) Bucket(ctx context.Context) (blobstore.Store, error) {
	return blobstore.NewS3(ctx, blobtest.Config(c.s3.endpoint, c.opts.Bucket, c.opts.S3Prefix))
}

// S3KeyPrefix is the prefix (with a trailing slash) that object keys carry
// in the proxy's request log: metastore key K is S3KeyPrefix()+K.
func (c *Cluster) S3KeyPrefix() string { return c.opts.S3Prefix + "/" }

// SetLink sets the fault of Raft connections that member from opens to
// member to (both directions of those connections pass to's proxy).
func (c *Cluster) SetLink(from, to string, l tcpproxy.Link) error {
	f, t := c.Member(from), c.Member(to)
	if f == nil || t == nil {
		return fmt.Errorf("cluster: no member %q or %q", from, to)
	}
	t.proxy.SetSource(f.IP, l)
	return nil
}

// SetLinks sets the fault of every Raft connection between members.
func (c *Cluster) SetLinks(l tcpproxy.Link) {
	for _, m := range c.members {
		m.proxy.SetDefault(l)
	}
}

// ClearLinks removes every link fault.
func (c *Cluster) ClearLinks() {
	for _, m := range c.members {
		m.proxy.Clear()
	}
}

// Partition replaces the current partition with g (nil or empty heals).
func (c *Cluster) Partition(ctx context.Context, g Grudge) error {
	for from, tos := range g {
		if c.Member(from) == nil {
			return fmt.Errorf("cluster: partition: no member %q", from)
		}
		for _, to := range tos {
			if c.Member(to) == nil {
				return fmt.Errorf("cluster: partition: no member %q", to)
			}
		}
	}
	// A cut from->to drops everything from sends to to, on connections
	// either of them opened: packets to to's address (HTTP, both ways),
	// from's Raft connections to to's proxy, and, held in from's own
	// proxy, what from answers on the Raft connections to opened.
	var errs []error
	for _, m := range c.members {
		m.proxy.Release()
	}
	for _, m := range c.members {
		var rules [][]string
		tos := append([]string(nil), g[m.ID]...)
		sort.Strings(tos)
		for _, to := range tos {
			t := c.Member(to)
			_, port, _ := net.SplitHostPort(t.RaftAdvertise)
			rules = append(rules,
				[]string{"-d", t.IP + "/32", "-j", "DROP"},
				[]string{"-d", c.net.bridgeIP() + "/32", "-p", "tcp", "--dport", port, "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"},
			)
			m.proxy.Hold(t.IP, tcpproxy.FromTarget)
		}
		if err := c.net.setRules(ctx, m.ID, rules); err != nil {
			errs = append(errs, err)
		}
	}
	c.mu.Lock()
	c.grudge = g.clone()
	c.mu.Unlock()
	if len(g) > 0 {
		c.logf("cluster: partition %s", g)
	} else {
		c.logf("cluster: network healed")
	}
	return errors.Join(errs...)
}

// Heal removes every partition.
func (c *Cluster) Heal(ctx context.Context) error { return c.Partition(ctx, nil) }

// CurrentPartition returns the partition in force.
func (c *Cluster) CurrentPartition() Grudge {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grudge.clone()
}

// PartitionRules returns the iptables rules in force in member id's
// namespace, as iptables -S prints them.
func (c *Cluster) PartitionRules(ctx context.Context, id string) (string, error) {
	return c.net.rules(ctx, id)
}

// Close kills every member, stops the proxies and the S3 server, removes
// the network and releases the machine lock. The work directory stays.
// Calling it again does nothing.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, m := range c.members {
		if m.Paused() {
			_ = m.Resume()
		}
		if err := m.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range c.members {
		if m.proxy != nil {
			_ = m.proxy.Close()
		}
		if m.disk != nil {
			if err := m.disk.Unmount(); err != nil {
				errs = append(errs, fmt.Errorf("cluster: unmount %s: %w", m.DataDir, err))
			}
		}
	}
	if c.S3 != nil {
		_ = c.S3.Close()
	}
	if c.s3 != nil {
		c.s3.stop()
	}
	if c.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := RemoveLeftovers(ctx, c.opts.Prefix); err != nil {
			errs = append(errs, err)
		}
		c.lock.release()
	}
	return errors.Join(errs...)
}

// Cleanup is Close: it removes what the cluster created (namespaces,
// links, iptables rules, processes). It is idempotent.
func (c *Cluster) Cleanup() error { return c.Close() }

// s3Env gives a process the S3 server's credentials through the AWS SDK's
// default chain.
func s3Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + blobtest.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + blobtest.SecretAccessKey, "AWS_REGION=" + blobtest.Region}
}

// s3Process is the cmd/s3server process.
type s3Process struct {
	cmd      *exec.Cmd
	stdin    io.Closer
	endpoint string
	exited   chan struct{}
}

func startS3(ctx context.Context, bin, addr, bucket, dir string) (*s3Process, error) {
	cmd := exec.Command(bin, "--addr", addr, "--bucket", bucket, "--dir", dir,
		"--access-key", blobtest.AccessKeyID, "--secret-key", blobtest.SecretAccessKey, "--exit-on-stdin-eof")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(dir), "logs", "s3server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("cluster: start s3server: %w", err)
	}
	p := &s3Process{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, br)
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if u, err := url.Parse(addr); !ok || err != nil || u.Host == "" {
			p.stop()
			return nil, fmt.Errorf("cluster: s3server printed %q (see logs/s3server.log)", line)
		}
		p.endpoint = addr
		return p, nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return nil, errors.New("cluster: s3server did not print its address (see logs/s3server.log)")
}

func (p *s3Process) stop() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
