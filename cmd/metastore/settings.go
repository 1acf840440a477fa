package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/config"
)

// envPrefix starts the name of every environment variable the binary reads.
const envPrefix = "METASTORE_"

// setting binds one config.Config field to a flag and an environment
// variable. The name is the flag name and the Setting that config.Validate
// reports, so a validation error names exactly what the operator typed.
type setting struct {
	name  string
	usage string
	// value returns a flag.Value that reads and writes the field in c.
	value func(c *config.Config) flag.Value
}

// envName is the environment variable of a setting or client option:
// METASTORE_ followed by the name in upper snake case.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// settings is the one table of serve settings: flags, environment variables
// and the configuration table in README.md are all derived from it.
var settings = []setting{
	{"node-id", "name of this node in the Raft configuration; unique in the cluster and stable across restarts",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.NodeID) }},
	{"data-dir", "directory holding the Raft log, snapshots and state machine (created with mode 0700)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.DataDir) }},
	{"http-addr", "host:port the HTTP API listens on",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.HTTPAddr) }},
	{"http-advertise", "host:port other members and clients use to reach the HTTP API (default: --http-addr)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.HTTPAdvertise) }},
	{"raft-addr", "host:port Raft listens on",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.RaftAddr) }},
	{"raft-advertise", "host:port other members dial for Raft (default: --raft-addr)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.RaftAdvertise) }},
	{"initial-cluster", "members bootstrapped on first start, as id=raft-host:port,...; must list this node",
		func(c *config.Config) flag.Value { return (*peersValue)(&c.InitialCluster) }},
	{"join", "comma-separated HTTP addresses of running members to ask for admission; never bootstraps",
		func(c *config.Config) flag.Value { return (*listValue)(&c.Join) }},
	{"join-timeout", "how long --join keeps asking, with backoff and refusals included, before the node exits with status 1",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.JoinTimeout) }},
	{"heartbeat-timeout", "Raft follower heartbeat timeout: a follower that hears no leader for a random 1 to 2 times this stands for election",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.HeartbeatTimeout) }},
	{"election-timeout", "Raft candidate election timeout",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.ElectionTimeout) }},
	{"leader-lease-timeout", "time a leader stays leader without reaching a quorum (at most --heartbeat-timeout)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.LeaderLeaseTimeout) }},
	{"commit-timeout", "time without new entries after which the leader tells followers the commit index",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.CommitTimeout) }},
	{"snapshot-interval", "how often Raft checks whether to take a snapshot",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.SnapshotInterval) }},
	{"snapshot-threshold", "number of new log entries that triggers a snapshot",
		func(c *config.Config) flag.Value { return (*uint64Value)(&c.SnapshotThreshold) }},
	{"trailing-logs", "log entries kept after a snapshot, so slow followers catch up without one",
		func(c *config.Config) flag.Value { return (*uint64Value)(&c.TrailingLogs) }},
	{"snapshot-retain", "number of snapshots kept on disk",
		func(c *config.Config) flag.Value { return (*intValue)(&c.SnapshotRetain) }},
	{"apply-timeout", "how long a write waits to commit before its outcome is reported unknown",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.ApplyTimeout) }},
	{"apply-batch", "most commands grouped into one Raft entry: those that arrive while earlier entries are in flight (1: no grouping)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.ApplyBatch) }},
	{"apply-inflight", "most grouped Raft entries proposed and not yet applied at once; commands proposed meanwhile wait and go together in the next (0, or --apply-batch 1: no bound)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.ApplyInflight) }},
	{"state-commit-interval", "how long the state machine applies Raft batches to one open transaction before committing them together (reads and snapshots commit earlier; 0: commit every batch)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.StateCommitInterval) }},
	{"state-commit-interval-follower", "the state commit interval while the member follows (0: --state-commit-interval); a follower's apply is on no client's path",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.StateCommitIntervalFollower) }},
	{"state-commit-entries", "most Raft entries in one commit of the state machine file",
		func(c *config.Config) flag.Value { return (*intValue)(&c.StateCommitEntries) }},
	{"state-commit-writes", "most writes (puts and deletes of keys) in one commit of the state machine file; bounds the memory a commit interval holds under a load of many distinct keys (0: no bound)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.StateCommitWrites) }},
	{"go-gc-percent", "the Go garbage collector's heap growth between collections, in percent (the runtime's GOGC, which takes precedence when set): higher spends less CPU on collection for a larger heap",
		func(c *config.Config) flag.Value { return (*intValue)(&c.GoGCPercent) }},
	{"raft-log-store", "Raft log store of a new data directory: wal (segment files, hashicorp/raft-wal) or boltdb (raft.db, hashicorp/raft-boltdb); a directory that holds one keeps it",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.RaftLogStore) }},
	{"raft-wal-segment-size", "size in bytes of a segment file of the wal Raft log store, preallocated when created; compacted entries leave the disk a segment at a time",
		func(c *config.Config) flag.Value { return (*int64Value)(&c.RaftWALSegmentSize) }},
	{"enable-pprof", "serve Go's profiler under /debug/pprof/ on the HTTP address",
		func(c *config.Config) flag.Value { return (*boolValue)(&c.EnablePprof) }},
	{"max-body-bytes", "largest HTTP request body accepted, in bytes",
		func(c *config.Config) flag.Value { return (*int64Value)(&c.MaxBodyBytes) }},
	{"min-free-disk", "free bytes below which the data directory's file system makes the node refuse writes (HTTP 507 insufficient_storage); reads go on; 0 disables",
		func(c *config.Config) flag.Value { return (*int64Value)(&c.MinFreeDisk) }},
	{"shutdown-timeout", "bound on a clean shutdown on SIGTERM or SIGINT, leadership transfer included",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.ShutdownTimeout) }},
	{"blob-store", "object store for checkpoint blobs: s3://bucket[/prefix] or file:///dir (default: the directory blobs in --data-dir)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.BlobStore) }},
	{"s3-endpoint", "S3 endpoint URL for S3-compatible servers (default: AWS)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.S3Endpoint) }},
	{"s3-region", "S3 region",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.S3Region) }},
	{"s3-path-style", "address S3 buckets by path (http://host/bucket/key), as most S3-compatible servers need",
		func(c *config.Config) flag.Value { return (*boolValue)(&c.S3PathStyle) }},
	{"s3-timeout", "bound on one object-store call, the S3 client's retries and their backoff included (a blob read: until its answer starts)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.S3Timeout) }},
	{"s3-attempt-timeout", "bound on one S3 HTTP attempt's wait for its answer's headers once the request is sent; the S3 client then retries within --s3-timeout",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.S3AttemptTimeout) }},
	{"s3-connect-timeout", "bound on the TCP connect and the TLS handshake of a new S3 connection",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.S3ConnectTimeout) }},
	{"s3-max-attempts", "attempts per S3 request of the SDK's standard retryer (1: no retries)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.S3MaxAttempts) }},
	{"upload-lease", "how long an upload intent holds its key; an upload not committed by then is garbage",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.UploadLease) }},
	{"max-blob-bytes", "largest blob accepted by the metastore's own upload endpoint (local blob store)",
		func(c *config.Config) flag.Value { return (*int64Value)(&c.MaxBlobBytes) }},
	{"gc-interval", "time between garbage-collection cycles of the leader",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.GCInterval) }},
	{"gc-grace", "how long a blob must have been unreferenced before the collector deletes it",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.GCGrace) }},
	{"gc-batch", "blobs per deletion mark and per DeleteObjects request (at most 1000)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.GCBatch) }},
	{"gc-rate", "maximum object deletions per second (0: unlimited)",
		func(c *config.Config) flag.Value { return (*float64Value)(&c.GCRate) }},
	{"gc-tombstone-ttl", "how long records of deleted blobs are kept, to answer late references clearly",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.GCTombstoneTTL) }},
	{"gc-orphan-grace", "age an object unknown to the store must reach before the orphan sweep deletes it",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.GCOrphanGrace) }},
	{"gc-orphan-every", "period of the orphan sweep, which lists the store (0: never)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.GCOrphanEvery) }},
	{"auth", "require a bearer token on every API request except /healthz and /readyz (see docs/operations.md)",
		func(c *config.Config) flag.Value { return (*boolValue)(&c.Auth) }},
	{"auth-bootstrap-token-file", "file holding the first operator token, created by the leader when the cluster has no token (needs --auth)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.AuthBootstrapTokenFile) }},
	{"auth-join-token-file", "file holding an operator token sent with the join request (with --join and --auth)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.AuthJoinTokenFile) }},
	{"auth-metrics-open", "with --auth, serve /metrics without a token",
		func(c *config.Config) flag.Value { return (*boolValue)(&c.AuthMetricsOpen) }},
	{"auth-object-url-ttl", "with --auth, how long the signed blob-read URLs of a restore plan stay valid",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.AuthObjectURLTTL) }},
	{"tls-cert-file", "PEM certificate of this member (server certificate of HTTP and Raft, client certificate towards members); with --tls-key-file and --tls-ca-file: https and mutual-TLS Raft; reloaded when it changes",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.TLSCertFile) }},
	{"tls-key-file", "PEM private key of --tls-cert-file (keep it mode 0600)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.TLSKeyFile) }},
	{"tls-ca-file", "PEM bundle of the CA(s) member certificates chain to; Raft peers must present a member certificate of it",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.TLSCAFile) }},
	// HTTP server limits and per-client rate limits.
	{"http-read-header-timeout", "time a client has to send a request's headers",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.ReadHeaderTimeout) }},
	{"http-body-timeout", "time a client has to send the body of an ordinary (JSON) request",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.BodyTimeout) }},
	{"http-transfer-timeout", "time a blob or snapshot upload or download through the API may take",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.TransferTimeout) }},
	{"http-write-timeout", "time to answer an ordinary request (blocking queries, verify, fsck, gc run and member changes get 5m more)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.WriteTimeout) }},
	{"http-idle-timeout", "time an idle keep-alive connection stays open",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.IdleTimeout) }},
	{"http-max-header-bytes", "largest request line and headers accepted, in bytes (larger: 431)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.MaxHeaderBytes) }},
	{"rate-limit", "requests per second one client (remote IP) may make, answered 429 above it (0: no limit)",
		func(c *config.Config) flag.Value { return (*float64Value)(&c.RateLimit) }},
	{"rate-burst", "requests one client may make at once above --rate-limit",
		func(c *config.Config) flag.Value { return (*intValue)(&c.RateBurst) }},
	{"rate-max-inflight", "requests one client may have in progress at once, answered 429 above it (0: no limit)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.MaxInFlight) }},
	{"allowed-origins", "comma-separated web origins (scheme://host[:port]) whose pages may call the API from a browser, besides the store's own pages; a request whose Origin or Sec-Fetch-Site shows another site is refused 403",
		func(c *config.Config) flag.Value { return (*listValue)(&c.AllowedOrigins) }},
	{"allowed-hosts", "comma-separated host names the API answers to in the Host header besides IP literals, localhost, this member's advertised names and the members' names (others: 421, so DNS rebinding fails); * disables the check",
		func(c *config.Config) flag.Value { return (*listValue)(&c.AllowedHosts) }},
	{"insecure-raft", "with --auth, start although Raft listens on a non-loopback address without TLS (anyone reaching the Raft port can then write the state, tokens included; see docs/operations.md)",
		func(c *config.Config) flag.Value { return (*boolValue)(&c.InsecureRaft) }},
	{"quota-open-intents", "upload intents one job may hold open at once, answered 507 quota_exceeded above it (0: no limit)",
		func(c *config.Config) flag.Value { return (*intValue)(&c.QuotaOpenIntents) }},
	{"quota-live-bytes", "bytes of live blobs one job may hold; new uploads and acks adding blobs are answered 507 quota_exceeded above it (0: no limit)",
		func(c *config.Config) flag.Value { return (*int64Value)(&c.QuotaLiveBytes) }},
	{"quota-ack-rate", "acks per second one job may send, answered 429 rate_limited above it (0: no limit)",
		func(c *config.Config) flag.Value { return (*float64Value)(&c.QuotaAckRate) }},
	{"quota-ack-burst", "acks one job may send at once above --quota-ack-rate",
		func(c *config.Config) flag.Value { return (*intValue)(&c.QuotaAckBurst) }},
	{"access-log", "one line per HTTP request (method, path, status, bytes, duration, client, token accessor; never a secret): - for stderr, or a file appended to (default: off)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.AccessLog) }},
	{"log-repeat-window", "repeated warnings of one kind (TLS handshake errors, refused requests) are logged once per window with a count of those suppressed (0: log every one)",
		func(c *config.Config) flag.Value { return (*durationValue)(&c.LogRepeatWindow) }},
	{"log-level", "debug, info, warn or error",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.LogLevel) }},
	{"log-format", "text or json (logs go to stderr)",
		func(c *config.Config) flag.Value { return (*stringValue)(&c.LogFormat) }},
}

// loadConfig builds the serve configuration: defaults, then the METASTORE_*
// environment (looked up with getenv), then the flags in args. It does not
// validate the result. A bad value is reported as a *config.Error naming the
// setting (and the environment variable when that is where it came from).
// flag.ErrHelp is returned when args ask for help; other errors are usage
// errors (an unknown flag, a stray argument).
func loadConfig(args []string, getenv func(string) string, usageOut io.Writer) (config.Config, map[string]string, error) {
	cfg := config.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var badFlag *config.Error
	for _, s := range settings {
		fs.Var(&checkedValue{name: s.name, v: s.value(&cfg), bad: &badFlag}, s.name, s.usage)
	}

	// origin records, for each setting set from the environment, the
	// variable it came from, so a validation error can name it.
	origin := map[string]string{}
	for _, s := range settings {
		env := envName(s.name)
		raw := getenv(env)
		if raw == "" {
			// An empty variable counts as unset, as is usual for
			// environment configuration.
			continue
		}
		if err := s.value(&cfg).Set(raw); err != nil {
			return cfg, nil, &config.Error{Setting: s.name, Problem: fmt.Sprintf("%s (from %s)", problem(err), env)}
		}
		origin[s.name] = env
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printServeUsage(fs, usageOut)
			return cfg, nil, flag.ErrHelp
		}
		if badFlag != nil {
			return cfg, nil, badFlag
		}
		return cfg, nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return cfg, nil, usageError{fmt.Sprintf("serve takes no arguments, got %q", fs.Arg(0))}
	}
	fs.Visit(func(f *flag.Flag) { delete(origin, f.Name) })
	return cfg, origin, nil
}

// validate runs config.Validate and, when the offending setting came from the
// environment, says so.
func validate(cfg *config.Config, origin map[string]string) error {
	err := cfg.Validate()
	var ce *config.Error
	if errors.As(err, &ce) {
		if env, ok := origin[ce.Setting]; ok {
			return &config.Error{Setting: ce.Setting, Problem: fmt.Sprintf("%s (from %s)", ce.Problem, env)}
		}
	}
	return err
}

func printServeUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: metastore serve [flags]\n\n")
	fmt.Fprintf(w, "Runs a metastore node. With no flags: a single-node store with data in\n./%s and the HTTP API on %s.\n", config.DefaultDataDir, config.DefaultHTTPAddr)
	fmt.Fprintf(w, "Every flag can also be set with the environment variable METASTORE_<NAME>\n(e.g. --node-id: %s); flags override the environment.\n\nFlags:\n", envName("node-id"))
	for _, s := range settings {
		f := fs.Lookup(s.name)
		def := ""
		if f.DefValue != "" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s\n    \t%s%s [%s]\n", f.Name, f.Usage, def, envName(f.Name))
	}
}

// usageError is a malformed command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// problem extracts the description of what is wrong from a Set error.
func problem(err error) string {
	var ce *config.Error
	if errors.As(err, &ce) {
		return ce.Problem
	}
	return err.Error()
}

// checkedValue remembers the first value the flag package rejects, as a
// *config.Error, so the report names the setting in the form Validate uses
// instead of the flag package's wording.
type checkedValue struct {
	name string
	v    flag.Value
	bad  **config.Error
}

func (c *checkedValue) String() string {
	if c.v == nil {
		return ""
	}
	return c.v.String()
}

// IsBoolFlag lets a boolean setting be given as a bare --flag.
func (c *checkedValue) IsBoolFlag() bool {
	b, ok := c.v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (c *checkedValue) Set(s string) error {
	if err := c.v.Set(s); err != nil {
		ce := &config.Error{Setting: c.name, Problem: problem(err)}
		if *c.bad == nil {
			*c.bad = ce
		}
		return ce
	}
	return nil
}

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 500ms, 10s, 2m)", s)
	}
	*v = durationValue(d)
	return nil
}

type uint64Value uint64

func (v *uint64Value) String() string { return strconv.FormatUint(uint64(*v), 10) }
func (v *uint64Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a non-negative integer", s)
	}
	*v = uint64Value(n)
	return nil
}

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = intValue(n)
	return nil
}

type int64Value int64

func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = int64Value(n)
	return nil
}

type boolValue bool

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v = boolValue(b)
	return nil
}

type float64Value float64

func (v *float64Value) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *float64Value) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v = float64Value(f)
	return nil
}

// peersValue is --initial-cluster: id=host:port,id=host:port.
type peersValue []config.Peer

func (v *peersValue) String() string {
	parts := make([]string, len(*v))
	for i, p := range *v {
		parts[i] = p.ID + "=" + p.RaftAddr
	}
	return strings.Join(parts, ",")
}

func (v *peersValue) Set(s string) error {
	peers, err := config.ParseInitialCluster(s)
	if err != nil {
		return err
	}
	*v = peers
	return nil
}

// listValue is a comma-separated list. An empty string is the empty list (so
// a flag can clear what the environment set); empty elements are kept, for
// Validate to reject.
type listValue []string

func (v *listValue) String() string { return strings.Join(*v, ",") }

func (v *listValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		*v = nil
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	*v = parts
	return nil
}
