// Package zksut is the ZooKeeper baseline of the benchmark: a three-member
// ZooKeeper ensemble (the Debian package zookeeper, ZooKeeper 3.8) on
// loopback, driven through github.com/go-zookeeper/zk the way a careful
// user keeps checkpoint metadata in ZooKeeper, in one of two designs:
//
//   - lean (New, "zookeeper"; lean.go): an ack is one multi with a check
//     of the version of the job's generation znode, creating the task's
//     ack znode under the epoch znode and its segment znodes; no znode is
//     written by more than one task of a job, and the coordinator learns
//     that an epoch is complete from a child watch on the epoch znode and
//     writes the completion itself;
//   - compare-and-swap (NewCAS, "zookeeper-cas"; records.go, described
//     below): an ack reads and rewrites the epoch znode every task of the
//     job shares, at its version, and retries when another task's ack came
//     first.
//
// # Record layout (compare-and-swap design)
//
// Every record is a znode holding JSON:
//
//	/jobs/J                         {"tasks":["t1","t2"]}                 job
//	/jobs/J/current                 {"epoch":7}                           job's current epoch
//	/jobs/J/epochs/EEEE…(20)        {"tasks":2,"acks":1,"completed":false} epoch
//	/jobs/J/tasks/T                 {"acked_epoch":7,"segments":42}       task
//	/jobs/J/tasks/T/seg/BBBBBB/IIIIIIIII {"key":…,"offset":…,"length":…,"first_seq":…,"last_seq":…}
//
// Segment I of a task (numbered from 0 in ack order) lives in bucket
// B = I/1000. A znode's children are listed in one response, which must fit
// in jute.maxbuffer (1 MiB by default, left so): a task of 100,000 segments
// directly under one parent would exceed it, buckets of at most 1,000 do
// not. The task record's segment count tells a reader which segments exist,
// so a manifest read needs no child listing at all: it gets the task record
// and then every segment znode, pipelined over one session.
//
// # Transactions (compare-and-swap design)
//
// CreateJob creates the job, current-epoch, epochs and tasks znodes in one
// multi. BeginEpoch reads the current-epoch znode and, in one multi, sets
// it at the version read and creates the epoch znode. Ack reads the epoch
// and task znodes and, in one multi, creates the new segment znodes (and a
// bucket znode where a segment starts one), sets the task znode (created by
// the task's first ack) and sets the epoch znode (one more ack; completed
// with the last task), the sets conditional on the versions read. Tasks of
// one job ack the same epoch concurrently, so a multi fails with a bad
// version when another task's ack committed in between; the ack then reads
// again and retries. Retries counts these conflicts.
//
// An ack is all-or-nothing and applied at most once: a task's znode names
// the last epoch it acknowledged. A multi whose outcome is unknown (the
// connection was lost) is retried after reading again; finding the task's
// znode at this epoch then means the lost attempt committed.
//
// ZooKeeper reads are served by the member a session is connected to,
// without consulting the leader. ReadManifest without stale reads through a
// session on the leader after a sync, ZooKeeper's way to a read that
// reflects every write committed before it (the sync makes the session's
// member catch up with whoever leads, so the read stays correct should that
// member have lost the leadership since it was found); with stale it reads
// through a session on a follower, without a sync. Each task acks through a session of its own
// and each job's epochs begin through another, as separate worker and
// coordinator processes would (up to 64 sessions, then shared), each on the
// ensemble (the client picks a member, and moves on when it fails). A task
// reads the epoch znode the coordinator created through its own session,
// possibly on a member that has not applied it yet: as ZooKeeper's
// documentation prescribes for a write another client announced, a read
// that finds the epoch missing, and the read after a conflict, are preceded
// by a sync.
//
// # Server configuration
//
// Each member runs QuorumPeerMain under Java with -Xmx512m and a zoo.cfg
// holding ZooKeeper's defaults (tickTime 2000, initLimit 10, syncLimit 5),
// forceSync=yes (fsync of the transaction log before acknowledging, the
// default, set explicitly), the client port on 127.0.0.1, the admin HTTP
// server off, and the srvr four-letter word allowed (it tells leader from
// follower). Each member logs to NAME.log beside its data directory.
package zksut

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metastore/metastore/bench/internal/procs"
	"github.com/metastore/metastore/bench/internal/sut"
)

const (
	// clusterSize is the number of members.
	clusterSize = 3
	// heap is the members' maximum Java heap.
	heap = "-Xmx512m"
	// sessionTimeout is the clients' requested session timeout (within
	// the default bounds of 2 and 20 ticks).
	sessionTimeout = 10 * time.Second
	// pollInterval is how often readiness and leadership are polled.
	pollInterval = 50 * time.Millisecond
	// probeTimeout bounds one four-letter-word probe of a member.
	probeTimeout = 2 * time.Second
	// rootPath is the parent of every job.
	rootPath = "/jobs"
	// maxSessions is the number of sessions jobs and tasks get (see
	// sessionFor).
	maxSessions = 64
)

// System is the ZooKeeper ensemble under test. The zero value is not
// usable: use New.
type System struct {
	// beforeCommit, when set, runs between an ack's read and its guarded
	// multi (tests use it to force a conflict).
	beforeCommit func(job, task string)

	// name is the system's name; lean selects the znodes and multis of
	// the lean design (lean.go) over those of the compare-and-swap design
	// (records.go).
	name string
	lean bool

	keyPrefix string
	keySeq    atomic.Uint64
	retries   atomic.Uint64
	// completions counts epochs whose completion a coordinator wrote
	// after its child watch saw every task's ack (lean design).
	completions atomic.Uint64
	// absentRetries counts the extra sync-and-read rounds of acks that
	// found their epoch znode missing after a sync.
	absentRetries atomic.Uint64

	mu       sync.Mutex
	started  bool
	rt       Runtime
	members  []*member
	addrs    []string            // every member's client address
	conn     *zk.Conn            // session on the ensemble for setup
	pool     []*zk.Conn          // sessions on the ensemble for jobs and tasks
	sessions map[string]*zk.Conn // job or job/task → its session from pool
	leader   *member             // cached leader for linearizable reads
	follower *member             // cached follower for stale reads
	version  string

	// watchCtx bounds the coordinators' watches (lean design); Stop
	// cancels it.
	watchCtx    context.Context
	watchCancel context.CancelFunc

	jobsMu sync.Mutex
	jobs   map[string][]string     // job → tasks (immutable once written)
	coords map[string]*coordinator // job → its coordinator's state (lean design)
}

// member is one ZooKeeper process and a session of its own.
type member struct {
	name       string
	dataDir    string
	logPath    string
	clientAddr string
	args       []string

	// guarded by System.mu
	proc *procs.Process
	conn *zk.Conn // session on this member only
}

var _ sut.System = (*System)(nil)

// New returns the lean design ("zookeeper", lean.go), not started.
func New() *System { return newSystem("zookeeper", true) }

// NewCAS returns the compare-and-swap design ("zookeeper-cas",
// records.go), not started.
func NewCAS() *System { return newSystem("zookeeper-cas", false) }

func newSystem(name string, lean bool) *System {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("zksut: random key prefix: %v", err))
	}
	return &System{name: name, lean: lean, keyPrefix: hex.EncodeToString(b[:]), jobs: map[string][]string{}, coords: map[string]*coordinator{}}
}

// Name is "zookeeper" (lean design) or "zookeeper-cas".
func (s *System) Name() string { return s.name }

// Retries returns how many ack and epoch-begin multis were retried because
// a concurrent writer changed a znode they were conditional on (a bad
// version, or a znode another ack created), since New. Re-sends after a
// lost connection are not counted.
func (s *System) Retries() uint64 { return s.retries.Load() }

// Counters are the system's counts over its life, for the results:
// compare-and-swap conflicts retried and extra sync-and-read rounds of acks
// (compare-and-swap design), epochs completed by their coordinator's watch
// (lean design).
func (s *System) Counters() map[string]uint64 {
	if s.lean {
		return map[string]uint64{"watch_completions": s.completions.Load()}
	}
	return map[string]uint64{
		"cas_retries":          s.Retries(),
		"absent_epoch_rereads": s.AbsentRetries(),
	}
}

// AbsentRetries counts the extra sync-and-read rounds of acks that found
// their epoch znode missing after a sync (see Ack).
func (s *System) AbsentRetries() uint64 { return s.absentRetries.Load() }

// PeerVersion returns the ZooKeeper version a member reported at Start
// ("3.8.0-…"), or "" before.
func (s *System) PeerVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Start launches three members on 127.0.0.1 with data under dir/zkN and
// waits until the ensemble accepts a write. dir must not hold an earlier
// ensemble's members.
func (s *System) Start(ctx context.Context, dir string) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("zksut: already started")
	}
	rt, err := Find()
	if err != nil {
		return err
	}
	for i := range clusterSize {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("zk%d", i+1))); err == nil {
			return fmt.Errorf("zksut: %s holds an earlier ensemble's data: Start needs a fresh directory", dir)
		}
	}
	ports, err := procs.FreePorts(3 * clusterSize)
	if err != nil {
		return fmt.Errorf("zksut: %w", err)
	}
	servers := make([]string, clusterSize)
	for i := range clusterSize {
		servers[i] = fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2])
	}
	members := make([]*member, clusterSize)
	for i := range clusterSize {
		name := fmt.Sprintf("zk%d", i+1)
		m := &member{
			name:       name,
			dataDir:    filepath.Join(dir, name),
			logPath:    filepath.Join(dir, name+".log"),
			clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
		}
		cfgPath := filepath.Join(dir, name+".cfg")
		if err := writeConfig(cfgPath, m.dataDir, i+1, ports[3*i], servers); err != nil {
			return err
		}
		m.args = []string{
			heap,
			"-XX:+ExitOnOutOfMemoryError",
			"-Djava.net.preferIPv4Stack=true",
			"-Dorg.slf4j.simpleLogger.showDateTime=true",
			"-cp", rt.Classpath,
			mainClass, cfgPath,
		}
		members[i] = m
	}
	s.rt = rt
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
	addrs := make([]string, len(members))
	for i, m := range members {
		addrs[i] = m.clientAddr
	}
	s.addrs = addrs
	s.sessions = map[string]*zk.Conn{}
	if s.conn, err = connect(addrs...); err != nil {
		return err
	}
	err = sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		for _, m := range members {
			if !m.proc.Running() {
				return false, fmt.Errorf("zksut: %s exited during start: %v\n%s", m.name, m.proc.ExitErr(), procs.LogTail(m.logPath, 2000))
			}
			if st, _ := srvr(m.clientAddr); st.mode == "" {
				return false, nil
			}
		}
		_, err := s.conn.Create(rootPath, nil, 0, zk.WorldACL(zk.PermAll))
		return err == nil || errors.Is(err, zk.ErrNodeExists), nil
	})
	if err != nil {
		return fmt.Errorf("zksut: wait for the ensemble to accept writes: %w", err)
	}
	st, err := srvr(members[0].clientAddr)
	if err != nil {
		return err
	}
	s.version = st.version
	s.started = true
	return nil
}

// writeConfig writes a member's zoo.cfg and its data directory's myid.
func writeConfig(path, dataDir string, id, clientPort int, servers []string) error {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("zksut: data directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
		return fmt.Errorf("zksut: myid: %w", err)
	}
	lines := []string{
		"tickTime=2000",
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + dataDir,
		"clientPortAddress=127.0.0.1",
		fmt.Sprintf("clientPort=%d", clientPort),
		"forceSync=yes",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr,ruok",
	}
	lines = append(lines, servers...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("zksut: config: %w", err)
	}
	return nil
}

// launchLocked starts m's process and a fresh session on it.
func (s *System) launchLocked(m *member) error {
	p, err := procs.Start(procs.Spec{Path: s.rt.Java, Args: m.args, Log: m.logPath})
	if err != nil {
		return fmt.Errorf("zksut: %s: %w", m.name, err)
	}
	m.proc = p
	if m.conn != nil {
		m.conn.Close()
	}
	m.conn, err = connect(m.clientAddr)
	return err
}

// discard is a zk.Logger that drops the client's connection chatter.
type discard struct{}

func (discard) Printf(string, ...any) {}

func connect(addrs ...string) (*zk.Conn, error) {
	c, _, err := zk.Connect(addrs, sessionTimeout, zk.WithLogger(discard{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zksut: session on %v: %w", addrs, err)
	}
	return c, nil
}

// srvrStatus is what a member's srvr four-letter word says.
type srvrStatus struct {
	version string
	mode    string // "leader", "follower", or "" when not serving
}

// srvr asks the member at addr for its status.
func srvr(addr string) (srvrStatus, error) {
	var st srvrStatus
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return st, fmt.Errorf("zksut: srvr %s: %w", addr, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return st, fmt.Errorf("zksut: srvr %s: %w", addr, err)
	}
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return st, fmt.Errorf("zksut: srvr %s: %w", addr, err)
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
			// Debian's build leaves the commit placeholder in the
			// version ("3.8.0-${mvngit.commit.id}, built on …").
			v, _, _ = strings.Cut(v, ",")
			v, _, _ = strings.Cut(v, "-${")
			st.version = v
		}
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			st.mode = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("zksut: srvr %s: %w", addr, err)
	}
	return st, nil
}

// Stop kills every member and closes the sessions; data directories stay.
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
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	for _, c := range s.pool {
		c.Close()
	}
	s.pool, s.sessions = nil, nil
	for _, m := range s.members {
		if m.conn != nil {
			m.conn.Close()
			m.conn = nil
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

// session returns the session on the ensemble that sets up jobs.
func (s *System) session() (*zk.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil, errors.New("zksut: not started")
	}
	return s.conn, nil
}

// sessionFor returns the session on the ensemble of a job's coordinator
// (key "job") or of a task's worker (key "job/task"): a session of its own
// for each of the first maxSessions keys, then shared round robin. ZooKeeper
// answers a session's requests in the order they were sent, a read after
// the writes sent before it, so one session shared by every worker would
// queue each worker's reads behind the others' writes; separate processes
// have separate sessions.
func (s *System) sessionFor(key string) (*zk.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil, errors.New("zksut: not started")
	}
	if c, ok := s.sessions[key]; ok {
		return c, nil
	}
	i := len(s.sessions) % maxSessions
	if i == len(s.pool) {
		c, err := connect(s.addrs...)
		if err != nil {
			return nil, err
		}
		s.pool = append(s.pool, c)
	}
	s.sessions[key] = s.pool[i]
	return s.pool[i], nil
}

// running returns copies of the running members.
func (s *System) running() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ms []*member
	for _, m := range s.members {
		if m.proc != nil && m.proc.Running() {
			c := *m
			ms = append(ms, &c)
		}
	}
	return ms
}

// Leader returns the member whose srvr says it leads, waiting while an
// election is under way (until ctx ends).
func (s *System) Leader(ctx context.Context) (sut.Member, error) {
	l, err := s.findLeader(ctx)
	if err != nil {
		return sut.Member{}, err
	}
	return sut.Member{ID: l.name, PID: l.proc.PID(), DataDir: l.dataDir}, nil
}

func (s *System) findLeader(ctx context.Context) (*member, error) {
	if _, err := s.session(); err != nil {
		return nil, err
	}
	var leader *member
	err := sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		for _, m := range s.running() {
			if st, err := srvr(m.clientAddr); err == nil && st.mode == "leader" {
				leader = m
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("zksut: no member leads: %w", err)
	}
	return leader, nil
}

// memberSession returns the session on the leader, or with follower on a
// member that does not lead, found once and kept until a member is killed
// or restarted.
func (s *System) memberSession(ctx context.Context, follower bool) (*zk.Conn, error) {
	s.mu.Lock()
	cached := s.leader
	if follower {
		cached = s.follower
	}
	s.mu.Unlock()
	if cached != nil && cached.proc.Running() {
		return cached.conn, nil
	}
	leader, err := s.findLeader(ctx)
	if err != nil {
		return nil, err
	}
	pick := leader
	if follower {
		pick = nil
		for _, m := range s.running() {
			if m.name != leader.name {
				pick = m
				break
			}
		}
		if pick == nil {
			return nil, errors.New("zksut: no follower is running")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if follower {
		s.follower = pick
	} else {
		s.leader = pick
	}
	return pick.conn, nil
}

func (s *System) memberByID(id string) (*member, error) {
	for _, m := range s.members {
		if m.name == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("zksut: no member %q", id)
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
		return fmt.Errorf("zksut: %s is not running", m.ID)
	}
	s.leader, s.follower = nil, nil
	if err := mem.proc.Kill(); err != nil {
		return fmt.Errorf("zksut: kill %s: %w", m.ID, err)
	}
	return nil
}

// Restart starts the killed member m again from its data directory and
// waits until it serves again: srvr reports it leader or follower (it has
// synchronised with the leader) and a sync and a read through a session on
// it succeed.
func (s *System) Restart(ctx context.Context, m sut.Member) error {
	s.mu.Lock()
	mem, err := s.memberByID(m.ID)
	if err == nil && mem.proc != nil && mem.proc.Running() {
		err = fmt.Errorf("zksut: %s is running", m.ID)
	}
	if err == nil {
		s.leader, s.follower = nil, nil
		err = s.launchLocked(mem)
	}
	var proc *procs.Process
	var conn *zk.Conn
	if err == nil {
		proc, conn = mem.proc, mem.conn
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	err = sut.WaitFor(ctx, pollInterval, func() (bool, error) {
		if !proc.Running() {
			return false, fmt.Errorf("zksut: %s exited during restart: %v\n%s", m.ID, proc.ExitErr(), procs.LogTail(mem.logPath, 2000))
		}
		if st, _ := srvr(mem.clientAddr); st.mode == "" {
			return false, nil
		}
		if _, err := conn.Sync(rootPath); err != nil {
			return false, nil
		}
		_, _, err := conn.Exists(rootPath)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("zksut: wait for %s to rejoin: %w", m.ID, err)
	}
	return nil
}
