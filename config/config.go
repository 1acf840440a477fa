// Package config holds the settings of one metastore node: where it keeps its
// data, where it listens, how it joins a cluster and how Raft is tuned.
//
// The struct is filled from DefaultConfig, then from METASTORE_* environment
// variables, then from command-line flags (the binding lives in cmd/metastore
// only). Validate reports the first bad setting by its flag name.
package config

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DefaultHTTPAddr is the loopback address the embedded single-node store
// serves its HTTP API on when no address is configured.
const DefaultHTTPAddr = "127.0.0.1:7070"

// DefaultRaftAddr is the loopback address Raft traffic uses by default.
const DefaultRaftAddr = "127.0.0.1:7071"

// DefaultDataDir is the data directory, relative to the working directory,
// used when none is configured.
const DefaultDataDir = "metastore-data"

// Peer is one member of the initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

// Config is the complete configuration of one node.
type Config struct {
	// NodeID names this node in the Raft configuration. It must be unique in
	// the cluster and stable across restarts.
	NodeID string
	// DataDir holds the Raft log, the snapshots and the state machine.
	DataDir string

	// HTTPAddr is the address the HTTP API listens on.
	HTTPAddr string
	// HTTPAdvertise is the address other members and clients use to reach
	// the HTTP API; empty means HTTPAddr.
	HTTPAdvertise string
	// RaftAddr is the address Raft listens on.
	RaftAddr string
	// RaftAdvertise is the address other members dial for Raft; empty means
	// RaftAddr.
	RaftAdvertise string

	// InitialCluster is the static set of members bootstrapped when the node
	// starts with an empty data directory. Empty (and no Join) means a single
	// node cluster made of this node alone.
	InitialCluster []Peer
	// Join lists HTTP addresses of running members. A node with Join set
	// never bootstraps; it asks the cluster to add it as a voter.
	Join []string
	// JoinTimeout bounds how long a node with Join keeps asking (with
	// backoff, refusals included) before it gives up and exits non-zero.
	JoinTimeout time.Duration

	// Raft tuning.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	SnapshotRetain     int

	// ApplyTimeout bounds how long a write waits for its Raft entry to commit
	// and apply before the client is told the outcome is unknown.
	ApplyTimeout time.Duration
	// ApplyBatch is the most commands the leader groups into one Raft
	// entry (group commit: commands proposed while earlier entries are in
	// flight, ApplyInflight, share the next); 1 proposes every command
	// alone.
	ApplyBatch int
	// ApplyInflight is the most batch entries the leader has proposed and
	// not yet applied at once; commands proposed meanwhile queue and go
	// together in the next entry, so under load entries grow instead of
	// multiplying. 0: no bound (an entry whenever Raft takes one); no
	// bound either with ApplyBatch 1 (no grouping).
	ApplyInflight int
	// StateCommitInterval is how long the state machine keeps applying
	// Raft batches to one open transaction of its file before it commits
	// them together (fsm/commit.go; a read, a snapshot or
	// StateCommitEntries commits earlier); 0 commits after every batch.
	StateCommitInterval time.Duration
	// StateCommitIntervalFollower replaces StateCommitInterval while the
	// member follows: a follower's apply is on no client's path, so it
	// commits less often for less CPU and fewer bytes written.
	StateCommitIntervalFollower time.Duration
	// GoGCPercent is the Go garbage collector's heap growth between
	// collections (the runtime's GOGC). Each ack allocates its decoded
	// command and records on every member, so the collector's share of
	// the CPU falls as this rises, for a larger heap. A GOGC in the
	// process environment takes precedence.
	GoGCPercent int
	// StateCommitEntries is the most Raft entries one state machine
	// commit holds.
	StateCommitEntries int
	// StateCommitWrites is the most writes (puts and deletes of keys) one
	// state machine commit holds; 0: no bound. It bounds what a long
	// interval holds in memory when a load writes many distinct keys.
	StateCommitWrites int
	// RaftLogStore is the Raft log store a new data directory gets:
	// RaftLogStoreWAL or RaftLogStoreBoltDB. A directory that holds one
	// keeps it (node/raftstore.go).
	RaftLogStore string
	// RaftWALSegmentSize is the size of a raft-wal segment file, in bytes:
	// each is preallocated when created, and compacted entries leave the
	// disk a whole segment at a time.
	RaftWALSegmentSize int64
	// EnablePprof serves Go's profiler under /debug/pprof/ on the HTTP
	// address (CPU, heap, goroutine profiles; off by default).
	EnablePprof bool
	// MaxBodyBytes bounds the size of an HTTP request body.
	MaxBodyBytes int64
	// ShutdownTimeout bounds a clean shutdown (leadership transfer included).
	ShutdownTimeout time.Duration
	// BlobStore locates the object store for checkpoint blobs:
	// "s3://bucket/prefix", "file:///dir", or empty for the directory
	// "blobs" in DataDir (the embedded default).
	BlobStore string
	// S3Endpoint, S3Region and S3PathStyle configure an S3 blob store;
	// credentials come from the AWS SDK's default chain (environment,
	// shared config, instance roles).
	S3Endpoint  string
	S3Region    string
	S3PathStyle bool
	// S3Timeout bounds one object-store call, the SDK's retries included
	// (for a blob read: until its answer starts). S3AttemptTimeout bounds one
	// HTTP attempt's wait for the answer's headers, S3ConnectTimeout a
	// new connection's TCP connect and TLS handshake; S3MaxAttempts is the
	// SDK standard retryer's attempts per request.
	S3Timeout        time.Duration
	S3AttemptTimeout time.Duration
	S3ConnectTimeout time.Duration
	S3MaxAttempts    int
	// UploadLease is how long an upload intent holds its key before an
	// unused upload becomes garbage.
	UploadLease time.Duration
	// MaxBlobBytes bounds one blob uploaded through the metastore's own
	// upload endpoint (local store).
	MaxBlobBytes int64

	// Garbage collector.
	GCInterval     time.Duration
	GCGrace        time.Duration
	GCBatch        int
	GCRate         float64
	GCTombstoneTTL time.Duration
	GCOrphanGrace  time.Duration
	GCOrphanEvery  time.Duration

	// Authentication (docs/operations.md, "Authentication and tokens").
	// Auth requires a bearer token on every API request except /healthz
	// and /readyz; off by default, so the embedded loopback store stays
	// open.
	Auth bool
	// AuthBootstrapTokenFile names a file holding the first operator
	// token; the leader creates it when the cluster has no token.
	AuthBootstrapTokenFile string
	// AuthJoinTokenFile names a file holding an operator token a node
	// started with Join sends with its join request.
	AuthJoinTokenFile string
	// AuthMetricsOpen leaves /metrics open when Auth is on.
	AuthMetricsOpen bool
	// AuthObjectURLTTL is how long the signed object-read URLs handed out
	// with a restore plan stay valid.
	AuthObjectURLTTL time.Duration
	// TLSCertFile, TLSKeyFile and TLSCAFile are the member's TLS material
	// (all three or none): its certificate (server certificate of the HTTP
	// API and of Raft, client certificate towards other members), its key,
	// and the CA bundle member certificates chain to. When set, the HTTP
	// API is served over https and Raft uses mutual TLS.
	TLSCertFile string
	TLSKeyFile  string
	TLSCAFile   string
	// MinFreeDisk is the free space, in bytes, below which the data
	// directory's file system makes the node refuse new writes (HTTP 507
	// insufficient_storage) while reads go on; 0 disables the check. The
	// margin lets writes already in flight, snapshots and Raft's term and
	// vote records finish (node/disk.go).
	MinFreeDisk int64
	// HTTP server limits and per-client rate limits (api/limits.go).
	HTTPLimits
	// Browser safety, Raft exposure, quotas, access log (security.go).
	Security

	// LogLevel is one of debug, info, warn, error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
}

// DefaultMinFreeDisk is the default of MinFreeDisk: 256 MiB.
const DefaultMinFreeDisk = 256 << 20

// maxApplyBatch bounds ApplyBatch (the state machine's limit on the
// commands of one batch entry, fsm.MaxBatchCommands).
const maxApplyBatch = 4096

// DefaultConfig returns the configuration of the embedded single-node store.
func DefaultConfig() Config {
	return Config{
		NodeID:   "node1",
		DataDir:  DefaultDataDir,
		HTTPAddr: DefaultHTTPAddr,
		RaftAddr: DefaultRaftAddr,
		// A follower that hears nothing for a random 0.5 to 1 s stands for
		// election: a killed leader is replaced in about a second. Raise
		// these on slow networks or overloaded machines.
		HeartbeatTimeout:            500 * time.Millisecond,
		ElectionTimeout:             500 * time.Millisecond,
		LeaderLeaseTimeout:          250 * time.Millisecond,
		CommitTimeout:               50 * time.Millisecond,
		SnapshotInterval:            120 * time.Second,
		SnapshotThreshold:           8192,
		TrailingLogs:                10240,
		SnapshotRetain:              2,
		ApplyTimeout:                10 * time.Second,
		ApplyBatch:                  256,
		ApplyInflight:               1,
		StateCommitInterval:         100 * time.Millisecond,
		StateCommitIntervalFollower: time.Second,
		StateCommitEntries:          10_000,
		StateCommitWrites:           100_000,
		GoGCPercent:                 200,
		RaftLogStore:                RaftLogStoreWAL,
		RaftWALSegmentSize:          64 << 20,
		MaxBodyBytes:                1 << 20,
		MinFreeDisk:                 DefaultMinFreeDisk,
		ShutdownTimeout:             10 * time.Second,
		JoinTimeout:                 5 * time.Minute,
		S3Timeout:                   30 * time.Second,
		S3AttemptTimeout:            10 * time.Second,
		S3ConnectTimeout:            5 * time.Second,
		S3MaxAttempts:               5,
		UploadLease:                 time.Hour,
		MaxBlobBytes:                5 << 30,
		GCInterval:                  30 * time.Second,
		GCGrace:                     10 * time.Minute,
		GCBatch:                     1000,
		GCTombstoneTTL:              24 * time.Hour,
		GCOrphanGrace:               time.Hour,
		GCOrphanEvery:               time.Hour,
		AuthObjectURLTTL:            time.Hour,
		LogLevel:                    "info",
		LogFormat:                   "text",
		HTTPLimits:                  DefaultHTTPLimits(),
		Security:                    DefaultSecurity(),
	}
}

// IDPattern is the charset of node ids (and of job and task ids in the API).
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Error names the setting (by its flag name) that failed validation.
type Error struct {
	Setting string
	Problem string
}

func (e *Error) Error() string { return fmt.Sprintf("invalid --%s: %s", e.Setting, e.Problem) }

func bad(setting, format string, args ...any) error {
	return &Error{Setting: setting, Problem: fmt.Sprintf(format, args...)}
}

// Validate checks every setting and returns the first problem as an *Error.
func (c *Config) Validate() error {
	if !IDPattern.MatchString(c.NodeID) {
		return bad("node-id", "%q must match %s", c.NodeID, IDPattern)
	}
	if strings.TrimSpace(c.DataDir) == "" {
		return bad("data-dir", "must not be empty")
	}
	if err := checkHostPort(c.HTTPAddr, false); err != nil {
		return bad("http-addr", "%v", err)
	}
	if c.HTTPAdvertise != "" {
		if err := checkHostPort(c.HTTPAdvertise, true); err != nil {
			return bad("http-advertise", "%v", err)
		}
	} else if host, _, _ := net.SplitHostPort(c.HTTPAddr); host == "" || host == "0.0.0.0" || host == "::" {
		return bad("http-advertise", "required when --http-addr %q does not name a routable host", c.HTTPAddr)
	}
	if err := checkHostPort(c.RaftAddr, false); err != nil {
		return bad("raft-addr", "%v", err)
	}
	if c.RaftAdvertise != "" {
		if err := checkHostPort(c.RaftAdvertise, true); err != nil {
			return bad("raft-advertise", "%v", err)
		}
	} else if host, _, _ := net.SplitHostPort(c.RaftAddr); host == "" || host == "0.0.0.0" || host == "::" {
		return bad("raft-advertise", "required when --raft-addr %q does not name a routable host", c.RaftAddr)
	}
	if len(c.InitialCluster) > 0 && len(c.Join) > 0 {
		return bad("join", "cannot be combined with --initial-cluster: a joining node never bootstraps")
	}
	if len(c.InitialCluster) > 0 {
		seen := map[string]bool{}
		self := false
		for _, p := range c.InitialCluster {
			if !IDPattern.MatchString(p.ID) {
				return bad("initial-cluster", "member id %q must match %s", p.ID, IDPattern)
			}
			if seen[p.ID] {
				return bad("initial-cluster", "member id %q appears twice", p.ID)
			}
			seen[p.ID] = true
			if err := checkHostPort(p.RaftAddr, true); err != nil {
				return bad("initial-cluster", "member %q: %v", p.ID, err)
			}
			if p.ID == c.NodeID {
				self = true
				if p.RaftAddr != c.RaftAdvertiseAddr() {
					return bad("initial-cluster", "member %q has raft address %q but this node advertises %q", p.ID, p.RaftAddr, c.RaftAdvertiseAddr())
				}
			}
		}
		if !self {
			return bad("initial-cluster", "does not list this node (--node-id %q)", c.NodeID)
		}
	}
	for _, j := range c.Join {
		if strings.TrimSpace(j) == "" {
			return bad("join", "empty address")
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"heartbeat-timeout", c.HeartbeatTimeout, 5 * time.Millisecond},
		{"election-timeout", c.ElectionTimeout, 5 * time.Millisecond},
		{"leader-lease-timeout", c.LeaderLeaseTimeout, 5 * time.Millisecond},
		{"commit-timeout", c.CommitTimeout, time.Millisecond},
		{"snapshot-interval", c.SnapshotInterval, 5 * time.Millisecond},
		{"apply-timeout", c.ApplyTimeout, 10 * time.Millisecond},
		{"shutdown-timeout", c.ShutdownTimeout, 0},
		{"join-timeout", c.JoinTimeout, time.Millisecond},
	} {
		if d.v < d.min {
			return bad(d.name, "%s is below the minimum %s", d.v, d.min)
		}
	}
	if c.StateCommitInterval < 0 || c.StateCommitInterval > time.Second {
		return bad("state-commit-interval", "%s is not between 0 and 1s", c.StateCommitInterval)
	}
	switch c.RaftLogStore {
	case RaftLogStoreWAL, RaftLogStoreBoltDB:
	default:
		return bad("raft-log-store", "%q is neither %q nor %q", c.RaftLogStore, RaftLogStoreWAL, RaftLogStoreBoltDB)
	}
	if c.RaftWALSegmentSize < 1<<20 || c.RaftWALSegmentSize > 1<<30 {
		return bad("raft-wal-segment-size", "%d is not between 1 MiB (1048576) and 1 GiB (1073741824)", c.RaftWALSegmentSize)
	}
	if c.StateCommitIntervalFollower < 0 || c.StateCommitIntervalFollower > 10*time.Second {
		return bad("state-commit-interval-follower", "%s is not between 0 and 10s", c.StateCommitIntervalFollower)
	}
	if c.GoGCPercent < 50 || c.GoGCPercent > 1000 {
		return bad("go-gc-percent", "%d is not between 50 and 1000", c.GoGCPercent)
	}
	if c.StateCommitEntries < 1 {
		return bad("state-commit-entries", "%d is not positive", c.StateCommitEntries)
	}
	if c.StateCommitWrites < 0 {
		return bad("state-commit-writes", "%d is negative", c.StateCommitWrites)
	}
	if c.ApplyBatch < 1 || c.ApplyBatch > maxApplyBatch {
		return bad("apply-batch", "%d is not between 1 and %d", c.ApplyBatch, maxApplyBatch)
	}
	if c.ApplyInflight < 0 {
		return bad("apply-inflight", "%d is negative", c.ApplyInflight)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("leader-lease-timeout", "%s must not exceed --heartbeat-timeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.SnapshotThreshold == 0 {
		return bad("snapshot-threshold", "must be positive")
	}
	if c.SnapshotRetain < 1 {
		return bad("snapshot-retain", "must be at least 1")
	}
	if c.MinFreeDisk < 0 {
		return bad("min-free-disk", "cannot be negative (0 disables the check)")
	}
	if c.MaxBodyBytes < 64<<10 {
		return bad("max-body-bytes", "%d is below the minimum %d", c.MaxBodyBytes, 64<<10)
	}
	if c.BlobStore != "" && !strings.HasPrefix(c.BlobStore, "s3://") && !strings.HasPrefix(c.BlobStore, "file:///") {
		return bad("blob-store", "%q is not s3://bucket[/prefix] or file:///dir", c.BlobStore)
	}
	if strings.HasPrefix(c.BlobStore, "s3://") && strings.TrimPrefix(c.BlobStore, "s3://") == "" {
		return bad("blob-store", "%q names no bucket", c.BlobStore)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"s3-timeout", c.S3Timeout}, {"s3-attempt-timeout", c.S3AttemptTimeout}, {"s3-connect-timeout", c.S3ConnectTimeout}} {
		if t.d < 10*time.Millisecond || t.d > time.Hour {
			return bad(t.name, "%s is not between 10ms and 1h", t.d)
		}
	}
	if c.S3MaxAttempts < 1 || c.S3MaxAttempts > 20 {
		return bad("s3-max-attempts", "%d is not between 1 and 20", c.S3MaxAttempts)
	}
	if c.UploadLease < time.Second {
		return bad("upload-lease", "%s is below the minimum 1s", c.UploadLease)
	}
	if c.MaxBlobBytes < 1 {
		return bad("max-blob-bytes", "must be positive")
	}
	if c.GCInterval < 10*time.Millisecond {
		return bad("gc-interval", "%s is below the minimum 10ms", c.GCInterval)
	}
	if c.GCGrace < 0 || c.GCTombstoneTTL < 0 || c.GCOrphanGrace < 0 || c.GCOrphanEvery < 0 {
		return bad("gc-grace", "GC durations cannot be negative")
	}
	if c.GCBatch < 1 || c.GCBatch > 1000 {
		return bad("gc-batch", "%d is not between 1 and 1000", c.GCBatch)
	}
	if c.GCRate < 0 {
		return bad("gc-rate", "cannot be negative")
	}
	if c.AuthBootstrapTokenFile != "" && !c.Auth {
		return bad("auth-bootstrap-token-file", "requires --auth")
	}
	if c.AuthObjectURLTTL < time.Second {
		return bad("auth-object-url-ttl", "%s is below the minimum 1s", c.AuthObjectURLTTL)
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.HTTPLimits.validate(); err != nil {
		return err
	}
	if err := c.Security.validate(); err != nil {
		return err
	}
	if err := c.checkRaftExposure(); err != nil {
		return err
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log-level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return bad("log-format", "%q is not one of text, json", c.LogFormat)
	}
	return nil
}

// validateTLS checks that the TLS files are set together, and that no
// join address asks for plain http when members serve https.
func (c *Config) validateTLS() error {
	files := []struct{ name, v string }{
		{"tls-cert-file", c.TLSCertFile}, {"tls-key-file", c.TLSKeyFile}, {"tls-ca-file", c.TLSCAFile},
	}
	var set, unset []string
	for _, f := range files {
		if strings.TrimSpace(f.v) != "" {
			set = append(set, "--"+f.name)
		} else {
			unset = append(unset, f.name)
		}
	}
	if len(set) > 0 && len(unset) > 0 {
		verb := "is"
		if len(set) > 1 {
			verb = "are"
		}
		return bad(unset[0], "required when %s %s set: TLS needs the certificate, its key and the CA file", strings.Join(set, " and "), verb)
	}
	if c.TLSEnabled() {
		for _, j := range c.Join {
			if strings.HasPrefix(strings.ToLower(j), "http://") {
				return bad("join", "%q is plain http but TLS is on: members serve https (give host:port or https://)", j)
			}
		}
	}
	return nil
}

// TLSEnabled reports whether the TLS files are configured.
func (c *Config) TLSEnabled() bool {
	return c.TLSCertFile != "" && c.TLSKeyFile != "" && c.TLSCAFile != ""
}

// HTTPScheme is the scheme of this node's HTTP API, and of every member's
// in its cluster: "https" with TLS, else "http".
func (c *Config) HTTPScheme() string {
	if c.TLSEnabled() {
		return "https"
	}
	return "http"
}

// HTTPAdvertiseAddr is the HTTP address other members use to reach this node.
func (c *Config) HTTPAdvertiseAddr() string {
	if c.HTTPAdvertise != "" {
		return c.HTTPAdvertise
	}
	return c.HTTPAddr
}

// RaftAdvertiseAddr is the Raft address other members dial.
func (c *Config) RaftAdvertiseAddr() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	return c.RaftAddr
}

// The Raft log stores a data directory can hold (node/raftstore.go).
const (
	// RaftLogStoreWAL is hashicorp/raft-wal: segment files in raft/wal/.
	RaftLogStoreWAL = "wal"
	// RaftLogStoreBoltDB is hashicorp/raft-boltdb: raft/raft.db.
	RaftLogStoreBoltDB = "boltdb"
)

// RaftDir, SnapshotDir and FSMPath locate the parts of the data directory.
func (c *Config) RaftDir() string     { return filepath.Join(c.DataDir, "raft") }
func (c *Config) SnapshotDir() string { return filepath.Join(c.DataDir, "snapshots") }
func (c *Config) FSMPath() string     { return filepath.Join(c.DataDir, "fsm.db") }

// BlobStoreLocation is BlobStore, or the local directory in DataDir.
func (c *Config) BlobStoreLocation() string {
	if c.BlobStore != "" {
		return c.BlobStore
	}
	dir, err := filepath.Abs(filepath.Join(c.DataDir, "blobs"))
	if err != nil {
		dir = filepath.Join(c.DataDir, "blobs")
	}
	return "file://" + dir
}

// ParseInitialCluster parses "id=host:port,id=host:port".
func ParseInitialCluster(s string) ([]Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, bad("initial-cluster", "%q is not id=host:port", part)
		}
		peers = append(peers, Peer{ID: id, RaftAddr: addr})
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	return peers, nil
}

func checkHostPort(addr string, needHost bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if needHost && (host == "" || host == "0.0.0.0" || host == "::") {
		return fmt.Errorf("%q must name a routable host", addr)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	return nil
}
