package mssut

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// Settings of the object store the system runs.
const (
	// Bucket is the S3 server's bucket; the metastore keeps its blobs
	// under the prefix MetastorePrefix, the naive restore of Resume its
	// objects under NaivePrefix.
	Bucket          = "checkpoints"
	MetastorePrefix = "ms"
	NaivePrefix     = "naive"

	accessKeyID     = "mssut"
	secretAccessKey = "mssut-secret-access-key"
	region          = "us-east-1"
)

// Defaults of Options.
const (
	DefaultGCGrace              = 2 * time.Second
	DefaultGCInterval           = time.Hour
	DefaultGCBatch              = 1000
	DefaultMaxBodyBytes         = 1 << 20
	DefaultSegmentBytes         = 4096
	DefaultSegmentsPerBlob      = 1000
	DefaultGCObjectBytes        = 1024
	DefaultConcurrency          = 8
	DefaultResumeEpochs         = 3
	DefaultStartTimeout         = 2 * time.Minute
	DefaultFootprintBlobBytes   = 64 << 10
	defaultStatusRequestTimeout = 10 * time.Second
)

// Options configure a System. The zero value is usable: every field has a
// default.
type Options struct {
	// SourceDir is the directory go build runs in to build the metastore
	// and S3 server binaries (any directory of a module that requires the
	// metastore module, such as the bench module). Default: the directory
	// of this package's source, else the working directory.
	SourceDir string
	// MetastoreBin and S3ServerBin are prebuilt binaries; empty ones are
	// built into DIR/bin by Start.
	MetastoreBin string
	S3ServerBin  string

	// GCGrace is the members' --gc-grace (default 2s), the time a blob
	// must have been unreferenced before the collector deletes it.
	GCGrace time.Duration
	// GCInterval is the members' --gc-interval (default 1h): cycles are
	// started by Extras.GC (POST /v1/gc/run), so the periodic one stays
	// out of the measurements.
	GCInterval time.Duration
	// GCBatch is --gc-batch (default and maximum 1000): keys per deletion
	// mark and per DeleteObjects request.
	GCBatch int
	// GCRate is --gc-rate, deletions per second (default 0: unlimited).
	GCRate float64
	// MaxBodyBytes is the largest request body the members accept
	// (--max-body-bytes; default 1 MiB, the store's default, which is then
	// not passed). Preload packs its acks to fit.
	MaxBodyBytes int64
	// ExtraFlags are appended to every member's serve command line.
	ExtraFlags []string
	// Name is the system's name in the results (default "metastore").
	Name string
	// MaxAckRequests is the workers' client's Config.MaxAckRequests
	// (0: the client's default; -1: every ack sent alone).
	MaxAckRequests int

	// SegmentBytes is the length of each segment Preload acknowledges
	// (default 4096); SegmentsPerBlob how many segments, at consecutive
	// offsets, it puts in one blob (default 1000).
	SegmentBytes    int64
	SegmentsPerBlob int
	// GCObjectBytes is the size of each object Extras.GC uploads (default
	// 1024).
	GCObjectBytes int
	// FootprintBlobBytes is the size each blob of Extras.Footprint is
	// committed with (default 64 KiB; no bytes are uploaded).
	FootprintBlobBytes int64
	// Concurrency bounds the parallel uploads and loads of the extras
	// (default 8).
	Concurrency int
	// ResumeEpochs is the number of epochs Extras.Resume checkpoints
	// before the restart (default 3).
	ResumeEpochs int
	// StartTimeout bounds the wait for a leader at Start and for a
	// restarted member to catch up (default 2m).
	StartTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.SourceDir == "" {
		o.SourceDir = sourceDir()
	}
	if o.GCGrace <= 0 {
		o.GCGrace = DefaultGCGrace
	}
	if o.GCInterval <= 0 {
		o.GCInterval = DefaultGCInterval
	}
	if o.GCBatch <= 0 {
		o.GCBatch = DefaultGCBatch
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentsPerBlob <= 0 {
		o.SegmentsPerBlob = DefaultSegmentsPerBlob
	}
	if o.GCObjectBytes <= 0 {
		o.GCObjectBytes = DefaultGCObjectBytes
	}
	if o.FootprintBlobBytes <= 0 {
		o.FootprintBlobBytes = DefaultFootprintBlobBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.ResumeEpochs <= 0 {
		o.ResumeEpochs = DefaultResumeEpochs
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	return o
}

// System is the metastore under test: three `metastore serve` processes on
// loopback with their blobs in an S3-protocol server process (cmd/s3server,
// objects on disk), driven through the project's Go client. It implements
// sut.System and sut.Extras.
type System struct {
	opts Options

	mu      sync.Mutex
	started bool
	stopped bool
	dir     string
	members []*proc
	s3      *s3Proc
	// lastLeader is the id of the member last seen leading.
	lastLeader string

	c      *client.Client            // all members, leader-following
	stale  map[string]*client.Client // member id -> client of that member only, stale reads
	bucket *blobstore.S3             // the whole bucket, for listings and the naive restore
	hc     *http.Client              // operator endpoints (status, gc, snapshot)

	jobsMu sync.Mutex
	jobs   map[string]*jobState

	seq atomic.Uint64 // names of the extras' jobs and files
}

var (
	_ sut.System = (*System)(nil)
	_ sut.Extras = (*System)(nil)
)

// New returns a System that Start launches.
func New(opts Options) *System {
	return &System{opts: opts.withDefaults(), jobs: map[string]*jobState{}}
}

// Name is Options.Name, "metastore" by default.
func (s *System) Name() string {
	if s.opts.Name != "" {
		return s.opts.Name
	}
	return "metastore"
}

// Client returns the client of all members (nil before Start), for
// callers that want requests the interfaces do not cover.
func (s *System) Client() *client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// Start builds the binaries (unless given), starts the S3 server with its
// objects under dir/s3 and three members with their data under dir/n1..n3,
// and waits until every member is ready, a leader is known and a write
// (PUT /v1/jobs/mssut-ready) succeeds.
func (s *System) Start(ctx context.Context, dir string) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("mssut: Start called twice")
	}
	s.started = true
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	s.dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return fmt.Errorf("mssut: %w", err)
	}
	msBin, s3Bin := s.opts.MetastoreBin, s.opts.S3ServerBin
	if msBin == "" {
		msBin = filepath.Join(dir, "bin", "metastore")
		if err := buildBinary(ctx, s.opts.SourceDir, metastorePackage, msBin); err != nil {
			return err
		}
	}
	if s3Bin == "" {
		s3Bin = filepath.Join(dir, "bin", "s3server")
		if err := buildBinary(ctx, s.opts.SourceDir, s3serverPackage, s3Bin); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			s.stopLocked()
		}
	}()

	s.s3, err = startS3Server(ctx, s3Bin, filepath.Join(dir, "s3"), Bucket, accessKeyID, secretAccessKey, filepath.Join(dir, "s3server.log"))
	if err != nil {
		return err
	}
	s.bucket, err = blobstore.NewS3(ctx, blobstore.S3Config{
		Bucket: Bucket, Region: region, Endpoint: s.s3.endpoint, PathStyle: true,
		AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey,
	})
	if err != nil {
		return fmt.Errorf("mssut: S3 client: %w", err)
	}

	addrs, err := freeAddrs(6)
	if err != nil {
		return err
	}
	var peers []string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		p := &proc{id: id, httpAddr: addrs[2*i], raftAddr: addrs[2*i+1], dataDir: filepath.Join(dir, id),
			logPath: filepath.Join(dir, id+".log"), bin: msBin}
		peers = append(peers, id+"="+p.raftAddr)
		s.members = append(s.members, p)
	}
	env := childEnv("AWS_ACCESS_KEY_ID="+accessKeyID, "AWS_SECRET_ACCESS_KEY="+secretAccessKey, "AWS_REGION="+region)
	for _, p := range s.members {
		p.args = append([]string{"serve",
			"--node-id", p.id, "--data-dir", p.dataDir,
			"--http-addr", p.httpAddr, "--raft-addr", p.raftAddr,
			"--initial-cluster", strings.Join(peers, ","),
			"--blob-store", "s3://" + Bucket + "/" + MetastorePrefix,
			"--s3-endpoint", s.s3.endpoint, "--s3-path-style", "--s3-region", region,
			"--gc-interval", s.opts.GCInterval.String(),
			"--gc-grace", s.opts.GCGrace.String(),
			"--gc-batch", strconv.Itoa(s.opts.GCBatch),
			"--gc-rate", strconv.FormatFloat(s.opts.GCRate, 'g', -1, 64),
			// The orphan sweep stays on, as by default: with it off the
			// leader records upload slots through Raft instead of
			// signing them. Start sweeps once; the period keeps every
			// leader from sweeping again during a run (Extras.GC's
			// timed cycles included).
			"--gc-orphan-every", "24h",
		}, s.memberFlags()...)
		p.env = env
		if err := p.start(); err != nil {
			return err
		}
	}

	s.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	var urls []string
	s.stale = map[string]*client.Client{}
	for _, p := range s.members {
		urls = append(urls, p.url())
		sc, err := client.New(client.Config{
			Endpoints:        []string{p.url()},
			DisableDiscovery: true,
			HTTPClient:       &http.Client{Transport: staleReads{base: http.DefaultTransport.(*http.Transport).Clone()}},
		})
		if err != nil {
			return err
		}
		s.stale[p.id] = sc
	}
	if s.c, err = client.New(client.Config{Endpoints: urls, MaxAckRequests: s.opts.MaxAckRequests}); err != nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	if err := sut.WaitFor(wctx, 50*time.Millisecond, func() (bool, error) { return s.clusterReady(wctx) }); err != nil {
		return fmt.Errorf("mssut: waiting for the cluster to elect a leader: %w", err)
	}
	if _, err := s.c.PutJob(wctx, "mssut-ready", wire.JobConfig{}); err != nil {
		return fmt.Errorf("mssut: the leader does not accept writes: %w", err)
	}
	// The cluster's first orphan sweep, before any workload: the sweep
	// schedule is the cluster's (the last sweep's slot cut-off), so no
	// leader sweeps again within --gc-orphan-every, and no timed GC cycle
	// lists the bucket.
	// (Through the client: Start holds s.mu, which onLeader takes.)
	rep, err := s.c.RunGC(wctx, wire.GCRunOptions{Orphans: true})
	if err != nil {
		return fmt.Errorf("mssut: the first orphan sweep: %w", err)
	}
	if !rep.OrphanSweep || rep.Error != "" {
		return fmt.Errorf("mssut: the first orphan sweep did not run: %+v", rep)
	}
	return nil
}

// memberFlags are the flags of the serve command lines beyond addresses,
// blob store and collector.
func (s *System) memberFlags() []string {
	// The store's protective limits default below the rates measured
	// here: one client (the benchmark, all workers behind one IP) may
	// make 5,000 requests a second (--rate-limit) and one job 2,000 acks
	// a second (--quota-ack-rate), while the throughput workload aims at
	// thousands of acks a second plus their upload-slot calls from one
	// address. They guard an operator's cluster against one runaway
	// client; a benchmark of the ack path must not measure them, so they
	// are off (0). ExtraFlags come after and may set them again.
	f := []string{"--rate-limit=0", "--quota-ack-rate=0"}
	if s.opts.MaxBodyBytes != DefaultMaxBodyBytes {
		f = append(f, "--max-body-bytes", strconv.FormatInt(s.opts.MaxBodyBytes, 10))
	}
	return append(f, s.opts.ExtraFlags...)
}

// clusterReady reports whether every member is ready (/readyz), they agree
// on a leader, and the leader lists every member with its HTTP address
// (each member's record was written through Raft).
func (s *System) clusterReady(ctx context.Context) (bool, error) {
	leaders := map[string]bool{}
	var leaderStatus *memberStatus
	for _, p := range s.members {
		if _, ok := p.running(); !ok {
			return false, p.exitErr()
		}
		if !s.ready(ctx, p) {
			return false, nil
		}
		st, err := s.status(ctx, p)
		if err != nil || st.LeaderID == "" {
			return false, nil
		}
		leaders[st.LeaderID] = true
		if st.State == "leader" {
			leaderStatus = st
		}
	}
	if len(leaders) != 1 || leaderStatus == nil {
		return false, nil
	}
	withAddr := 0
	for _, m := range leaderStatus.Members {
		if m.HTTPAddr != "" && m.Suffrage == "voter" {
			withAddr++
		}
	}
	return withAddr == len(s.members), nil
}

// Stop kills every member and stops the S3 server; data directories stay.
func (s *System) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *System) stopLocked() error {
	s.stopped = true
	var errs []error
	for _, p := range s.members {
		errs = append(errs, p.kill())
	}
	if s.s3 != nil {
		errs = append(errs, s.s3.stop())
	}
	return errors.Join(errs...)
}

// Members returns the running members.
func (s *System) Members() []sut.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sut.Member
	for _, p := range s.members {
		if pid, ok := p.running(); ok {
			out = append(out, sut.Member{ID: p.id, PID: pid, DataDir: p.dataDir})
		}
	}
	return out
}

// S3ServerPID is the S3 server's process id, 0 before Start.
func (s *System) S3ServerPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s3 == nil {
		return 0
	}
	return s.s3.pid()
}

func (s *System) member(id string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.members {
		if p.id == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("mssut: no member %q", id)
}

func (s *System) running() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proc
	for _, p := range s.members {
		if _, ok := p.running(); ok {
			out = append(out, p)
		}
	}
	return out
}

// Leader returns the member that leads, waiting (within ctx) while an
// election is in progress: the running member whose own status says it is
// the leader.
func (s *System) Leader(ctx context.Context) (sut.Member, error) {
	p, err := s.leader(ctx)
	if err != nil {
		return sut.Member{}, err
	}
	pid, _ := p.running()
	return sut.Member{ID: p.id, PID: pid, DataDir: p.dataDir}, nil
}

func (s *System) leader(ctx context.Context) (*proc, error) {
	var found *proc
	err := sut.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, p := range s.running() {
			st, err := s.status(ctx, p)
			if err == nil && st.State == "leader" {
				found = p
				s.mu.Lock()
				s.lastLeader = p.id
				s.mu.Unlock()
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mssut: no leader: %w", err)
	}
	return found, nil
}

// Kill sends SIGKILL to the member and waits until it is gone.
func (s *System) Kill(m sut.Member) error {
	p, err := s.member(m.ID)
	if err != nil {
		return err
	}
	return p.kill()
}

// Restart starts a killed member again with its command line and data
// directory, and waits until it is ready (/readyz), knows a leader, and has
// applied everything the leader had applied once the member was back.
func (s *System) Restart(ctx context.Context, m sut.Member) error {
	p, err := s.member(m.ID)
	if err != nil {
		return err
	}
	_, err = s.restart(ctx, p, 0)
	return err
}

// rejoin is what a restart took, timed from just before the process was
// started.
type rejoin struct {
	// answered: until the member first answered GET /v1/status (its HTTP
	// server is up).
	answered time.Duration
	// caughtUp: until it was ready (/readyz), knew a leader and had
	// applied index.
	caughtUp time.Duration
	// index is the applied index it waited for: the leader's once the
	// member was ready, or the floor given to restart if higher.
	index uint64
}

// restartPoll is how often restart asks the member how far it is.
const restartPoll = 20 * time.Millisecond

// restart is Restart of member p that also waits until p has applied at
// least floor, and reports how long each stage took.
func (s *System) restart(ctx context.Context, p *proc, floor uint64) (rejoin, error) {
	var r rejoin
	start := time.Now()
	if err := p.start(); err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	err := sut.WaitFor(ctx, restartPoll, func() (bool, error) {
		if _, ok := p.running(); !ok {
			return false, p.exitErr()
		}
		st, err := s.status(ctx, p)
		if err != nil {
			return false, nil
		}
		if r.answered == 0 {
			r.answered = time.Since(start)
		}
		return st.LeaderID != "" && s.ready(ctx, p), nil
	})
	if err != nil {
		return r, fmt.Errorf("mssut: member %s did not rejoin: %w", p.id, err)
	}
	leader, err := s.leader(ctx)
	if err != nil {
		return r, err
	}
	lst, err := s.status(ctx, leader)
	if err != nil {
		return r, err
	}
	r.index = max(floor, lst.AppliedIndex)
	err = sut.WaitFor(ctx, restartPoll, func() (bool, error) {
		if _, ok := p.running(); !ok {
			return false, p.exitErr()
		}
		st, err := s.status(ctx, p)
		return err == nil && st.AppliedIndex >= r.index, nil
	})
	if err != nil {
		return r, fmt.Errorf("mssut: member %s did not catch up with the leader's applied index %d: %w", p.id, r.index, err)
	}
	r.caughtUp = time.Since(start)
	return r, nil
}
