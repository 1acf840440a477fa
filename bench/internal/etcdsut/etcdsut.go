// Package etcdsut is the etcd baseline of the benchmark: a three-member
// etcd cluster (the Debian package etcd-server, etcd 3.4) on loopback,
// driven through go.etcd.io/etcd/client/v3 the way a careful user keeps
// checkpoint metadata in etcd, in one of three designs:
//
//   - lean (New, "etcd"; lean.go): an ack is one transaction guarded by a
//     compare on the job's generation key, putting the task's ack record
//     and its segment records; no record is shared between the tasks of a
//     job, and the coordinator learns that an epoch is complete by
//     watching the epoch's ack prefix and writes the completion itself;
//   - lean, batched (NewBatched, "etcd-batched"; batch.go): the lean
//     design with the acks made while four transactions are in flight
//     sent together, in one transaction of nested per-ack transactions;
//   - compare-and-swap (NewCAS, "etcd-cas"; records.go, described below):
//     an ack reads and rewrites the epoch record every task of the job
//     shares, and retries when another task's ack came first.
//
// All read a manifest the same way (ReadManifest, below).
//
// # Record layout (compare-and-swap design)
//
// Every record is a JSON value under one key:
//
//	/jobs/J                       {"tasks":["t1","t2"]}                 job
//	/jobs/J/current               {"epoch":7}                           job's current epoch
//	/jobs/J/epochs/EEEE…(20)      {"tasks":2,"acks":1,"completed":false} epoch
//	/jobs/J/tasks/T               {"acked_epoch":7,"segments":42}       task
//	/jobs/J/tasks/T/seg/IIII…(10) {"key":…,"offset":…,"length":…,"first_seq":…,"last_seq":…}
//
// Numbers in keys are zero-padded so that key order is numeric order: a
// task's manifest is the key range of its segment prefix, read in pages.
//
// # Transactions (compare-and-swap design)
//
// CreateJob writes the job and its current-epoch record in one transaction
// that requires the job not to exist. BeginEpoch reads the current-epoch
// record and writes it together with the new epoch record, guarded by the
// current-epoch record's ModRevision and the epoch key's absence. Ack reads
// the epoch and task records and commits one transaction that puts the new
// segment records (numbered on from the task's segment count), the task
// record and the epoch record (one more ack; completed with the last task),
// guarded by the ModRevision of both records it read. Tasks of one job ack
// the same epoch concurrently, so the guard fails when another task's ack
// committed in between; the transaction's Else branch returns both records
// again and the ack is recomputed and retried. Retries counts these
// conflicts.
//
// An ack is all-or-nothing and applied at most once: a task's record names
// the last epoch it acknowledged, so a retried or repeated ack cannot count
// twice. A commit whose outcome is unknown (the connection or the leader
// was lost) is retried after reading the records again; finding the task's
// record at this epoch then means the lost attempt committed.
//
// ReadManifest reads the segment prefix in pages of 10,000 keys, all pages
// at the revision of the first, so the manifest is one snapshot: a
// linearizable range on a client of the leader's endpoint, or with stale a
// serializable range on a follower's. Writes go through one client of all
// three endpoints, as a user's would (followers forward proposals to the
// leader).
//
// # Server flags
//
// The members run with etcd's defaults (fsync on every commit) except
// --max-txn-ops, raised from 128 to 1024 so that an ack of up to 1022
// segments is one transaction (Preload acks 1,000 at a time), and periodic
// auto-compaction keeping five minutes of history, which an operator of a
// continuously written etcd sets so that the MVCC history does not grow
// without bound. Each member logs to NAME.log beside its data directory.
package etcdsut

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/metastore/metastore/bench/internal/procs"
	"github.com/metastore/metastore/bench/internal/sut"
)

const (
	// clusterSize is the number of members.
	clusterSize = 3
	// maxTxnOps is the --max-txn-ops the members run with.
	maxTxnOps = 1024
	// readyKey is written once the cluster accepts writes.
	readyKey = "/bench/ready"
	// pollInterval is how often readiness and leadership are polled.
	pollInterval = 50 * time.Millisecond
	// callTimeout bounds one probe of a member.
	callTimeout = 2 * time.Second
)

// System is the etcd cluster under test. The zero value is not usable: use
// New.
type System struct {
	// beforeCommit, when set, runs between an ack's read and its guarded
	// commit (tests use it to force a conflict).
	beforeCommit func(job, task string)

	// name is the system's name; lean selects the records and
	// transactions of the lean design (lean.go) over those of the
	// compare-and-swap design (records.go).
	name string
	lean bool
	// acks batches the acks of the batched lean design (batch.go); nil
	// sends each alone.
	acks *ackBatcher

	keyPrefix string
	keySeq    atomic.Uint64
	retries   atomic.Uint64
	// completions counts epochs whose completion a coordinator wrote
	// after its watch saw every task's ack (lean design).
	completions atomic.Uint64

	mu       sync.Mutex
	started  bool
	bin      string
	members  []*member
	cli      *clientv3.Client // all members' endpoints
	leader   *member          // cached leader for linearizable reads
	follower *member          // cached follower for stale reads
	version  string

	// watchCtx bounds the coordinators' watches (lean design); Stop
	// cancels it.
	watchCtx    context.Context
	watchCancel context.CancelFunc

	jobsMu sync.Mutex
	jobs   map[string][]string     // job → tasks (immutable once written)
	coords map[string]*coordinator // job → its coordinator's state (lean design)
}

// member is one etcd process and its own client.
type member struct {
	name      string
	dataDir   string
	logPath   string
	clientURL string
	args      []string

	// guarded by System.mu
	proc *procs.Process
	cli  *clientv3.Client // this member's endpoint only
}

var _ sut.System = (*System)(nil)

// New returns the lean design ("etcd", lean.go), not started.
func New() *System { return newSystem("etcd", true) }

// NewBatched returns the lean design with its acks batched
// ("etcd-batched", batch.go), not started.
func NewBatched() *System { return newBatched(maxAckRequests) }

// newBatched is NewBatched with at most limit ack requests in flight.
func newBatched(limit int) *System {
	s := newSystem("etcd-batched", true)
	s.acks = &ackBatcher{limit: limit}
	return s
}

// NewCAS returns the compare-and-swap design ("etcd-cas", records.go), not
// started.
func NewCAS() *System { return newSystem("etcd-cas", false) }

func newSystem(name string, lean bool) *System {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("etcdsut: random key prefix: %v", err))
	}
	return &System{name: name, lean: lean, keyPrefix: hex.EncodeToString(b[:]), jobs: map[string][]string{}, coords: map[string]*coordinator{}}
}

// Name is "etcd" (lean design), "etcd-batched" or "etcd-cas".
func (s *System) Name() string { return s.name }

// Retries returns how many ack and epoch-begin transactions were retried
// because a concurrent writer changed a record they were guarded by (a
// compare-and-swap conflict), since New. Re-sends after a lost connection
// are not counted.
func (s *System) Retries() uint64 { return s.retries.Load() }

// Counters are the system's counts over its life, for the results:
// compare-and-swap conflicts retried (compare-and-swap design), epochs
// completed by their coordinator's watch (lean design).
func (s *System) Counters() map[string]uint64 {
	if s.lean {
		return map[string]uint64{"watch_completions": s.completions.Load()}
	}
	return map[string]uint64{
		"cas_retries": s.Retries(),
	}
}

// PeerVersion returns the etcd server version the cluster reported at
// Start ("3.4.23"), or "" before.
func (s *System) PeerVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Start launches three members on 127.0.0.1 with data under dir/etcdN and
// waits until the cluster accepts a write. dir must not hold an earlier
// cluster's members.
func (s *System) Start(ctx context.Context, dir string) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("etcdsut: already started")
	}
	bin, err := Find()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("etcdsut: data directory: %w", err)
	}
	for i := range clusterSize {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("etcd%d", i+1))); err == nil {
			return fmt.Errorf("etcdsut: %s holds an earlier cluster's data: Start needs a fresh directory", dir)
		}
	}
	ports, err := procs.FreePorts(2 * clusterSize)
	if err != nil {
		return fmt.Errorf("etcdsut: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("etcdsut: cluster token: %w", err)
	}
	token := "bench-" + hex.EncodeToString(b[:])

	peers := make([]string, clusterSize)
	for i := range clusterSize {
		peers[i] = fmt.Sprintf("etcd%d=http://127.0.0.1:%d", i+1, ports[2*i+1])
	}
	members := make([]*member, clusterSize)
	for i := range clusterSize {
		name := fmt.Sprintf("etcd%d", i+1)
		clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		dataDir := filepath.Join(dir, name)
		members[i] = &member{
			name:      name,
			dataDir:   dataDir,
			logPath:   filepath.Join(dir, name+".log"),
			clientURL: clientURL,
			args: []string{
				"--name", name,
				"--data-dir", dataDir,
				"--listen-client-urls", clientURL,
				"--advertise-client-urls", clientURL,
				"--listen-peer-urls", peerURL,
				"--initial-advertise-peer-urls", peerURL,
				"--initial-cluster", strings.Join(peers, ","),
				"--initial-cluster-state", "new",
				"--initial-cluster-token", token,
				fmt.Sprintf("--max-txn-ops=%d", maxTxnOps),
				"--auto-compaction-mode=periodic",
				"--auto-compaction-retention=5m",
				"--logger=zap",
				"--log-outputs=stderr",
			},
		}
	}
	s.bin = bin
	s.members = members
	s.jobsMu.Lock()
	s.jobs = map[string][]string{}
	s.coords = map[string]*coordinator{}
	s.jobsMu.Unlock()
	s.watchCtx, s.watchCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.stopLocked()
		}
	}()
	for _, m := range members {
		if err := s.launchLocked(m); err != nil {
			return err
		}
	}
	eps := make([]string, len(members))
	for i, m := range members {
		eps[i] = m.clientURL
	}
	s.cli, err = newClient(eps...)
	if err != nil {
		return err
	}
	err = sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		for _, m := range members {
			if !m.proc.Running() {
				return false, fmt.Errorf("etcdsut: %s exited during start: %v\n%s", m.name, m.proc.ExitErr(), procs.LogTail(m.logPath, 2000))
			}
		}
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := s.cli.Put(c, readyKey, "1")
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("etcdsut: wait for the cluster to accept writes: %w", err)
	}
	st, err := members[0].cli.Status(ctx, members[0].clientURL)
	if err != nil {
		return fmt.Errorf("etcdsut: status of %s: %w", members[0].name, err)
	}
	s.version = st.Version
	s.started = true
	return nil
}

// launchLocked starts m's process and a fresh client for its endpoint.
func (s *System) launchLocked(m *member) error {
	p, err := procs.Start(procs.Spec{Path: s.bin, Args: m.args, Env: serverEnv(), Log: m.logPath})
	if err != nil {
		return fmt.Errorf("etcdsut: %s: %w", m.name, err)
	}
	m.proc = p
	if m.cli != nil {
		m.cli.Close()
	}
	m.cli, err = newClient(m.clientURL)
	return err
}

// serverEnv is this process's environment without ETCD_ variables, which
// etcd would read as flags.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

func newClient(endpoints ...string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		Logger:               zap.NewNop(),
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdsut: client for %v: %w", endpoints, err)
	}
	return c, nil
}

// Stop kills every member and closes the clients; data directories stay.
func (s *System) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *System) stopLocked() error {
	var errs []error
	if s.watchCancel != nil {
		s.watchCancel()
	}
	if s.cli != nil {
		s.cli.Close()
		s.cli = nil
	}
	for _, m := range s.members {
		if m.cli != nil {
			m.cli.Close()
			m.cli = nil
		}
		if m.proc != nil {
			if err := m.proc.Kill(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.members = nil
	s.leader, s.follower = nil, nil
	s.started = false
	return errors.Join(errs...)
}

// Members returns the running members.
func (s *System) Members() []sut.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ms []sut.Member
	for _, m := range s.members {
		if m.proc != nil && m.proc.Running() {
			ms = append(ms, sut.Member{ID: m.name, PID: m.proc.PID(), DataDir: m.dataDir})
		}
	}
	return ms
}

// client returns the cluster client.
func (s *System) client() (*clientv3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil, errors.New("etcdsut: not started")
	}
	return s.cli, nil
}

// running returns the running members and their clients.
func (s *System) running() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ms []*member
	for _, m := range s.members {
		if m.proc != nil && m.proc.Running() {
			ms = append(ms, &member{name: m.name, dataDir: m.dataDir, clientURL: m.clientURL, proc: m.proc, cli: m.cli})
		}
	}
	return ms
}

// Leader returns the member that reports itself leader, waiting while an
// election is under way (until ctx ends).
func (s *System) Leader(ctx context.Context) (sut.Member, error) {
	if _, err := s.client(); err != nil {
		return sut.Member{}, err
	}
	var leader *member
	err := sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		leader = s.findLeader(ctx)
		return leader != nil, nil
	})
	if err != nil {
		return sut.Member{}, fmt.Errorf("etcdsut: no member leads: %w", err)
	}
	return sut.Member{ID: leader.name, PID: leader.proc.PID(), DataDir: leader.dataDir}, nil
}

// findLeader asks each running member for its status and returns the one
// that is leader by its own account, or nil.
func (s *System) findLeader(ctx context.Context) *member {
	for _, m := range s.running() {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		st, err := m.cli.Status(c, m.clientURL)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m
		}
	}
	return nil
}

// memberClient returns the client of the leader, or with follower of a
// running member that does not lead, found once and kept until a member is
// killed or restarted.
func (s *System) memberClient(ctx context.Context, follower bool) (*clientv3.Client, error) {
	s.mu.Lock()
	cached := s.leader
	if follower {
		cached = s.follower
	}
	s.mu.Unlock()
	if cached != nil && cached.proc.Running() {
		return cached.cli, nil
	}
	leader, err := s.Leader(ctx)
	if err != nil {
		return nil, err
	}
	var pick *member
	for _, m := range s.running() {
		if (m.name == leader.ID) != follower {
			pick = m
			break
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("etcdsut: no running member to read from (follower %v)", follower)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if follower {
		s.follower = pick
	} else {
		s.leader = pick
	}
	return pick.cli, nil
}

// memberByID returns the member named id.
func (s *System) memberByID(id string) (*member, error) {
	for _, m := range s.members {
		if m.name == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("etcdsut: no member %q", id)
}

// Kill sends SIGKILL to m's process and waits until it has exited.
func (s *System) Kill(m sut.Member) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, err := s.memberByID(m.ID)
	if err != nil {
		return err
	}
	if mem.proc == nil || !mem.proc.Running() {
		return fmt.Errorf("etcdsut: %s is not running", m.ID)
	}
	s.leader, s.follower = nil, nil
	if err := mem.proc.Kill(); err != nil {
		return fmt.Errorf("etcdsut: kill %s: %w", m.ID, err)
	}
	return nil
}

// Restart starts the killed member m again from its data directory and
// waits until it serves a linearizable read, which it can only once it
// has rejoined the cluster and caught up with the leader's commit index.
func (s *System) Restart(ctx context.Context, m sut.Member) error {
	s.mu.Lock()
	mem, err := s.memberByID(m.ID)
	if err == nil && mem.proc != nil && mem.proc.Running() {
		err = fmt.Errorf("etcdsut: %s is running", m.ID)
	}
	if err == nil {
		s.leader, s.follower = nil, nil
		err = s.launchLocked(mem)
	}
	var proc *procs.Process
	var cli *clientv3.Client
	if err == nil {
		proc, cli = mem.proc, mem.cli
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	err = sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		if !proc.Running() {
			return false, fmt.Errorf("etcdsut: %s exited during restart: %v\n%s", m.ID, proc.ExitErr(), procs.LogTail(mem.logPath, 2000))
		}
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := cli.Get(c, readyKey)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("etcdsut: wait for %s to rejoin: %w", m.ID, err)
	}
	return nil
}
