package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/mtls"
	"github.com/metastore/metastore/wire"
)

const (
	// raftDBFile is the raft-boltdb file (log and stable store) in RaftDir
	// (raftstore.go).
	raftDBFile = "raft.db"
	// logCacheSize and logCacheBytes bound the recent log entries kept in
	// memory (logcache.go): 512 entries of at most 16 MiB in all.
	logCacheSize  = 512
	logCacheBytes = 16 << 20
	// transportMaxPool is the number of pooled connections per peer.
	transportMaxPool = 3
	// transportTimeout bounds one Raft RPC's I/O.
	transportTimeout = 10 * time.Second
	// boltOpenTimeout bounds waiting for a Raft store's file lock, so a second
	// process on the same data directory fails instead of hanging.
	boltOpenTimeout = 5 * time.Second
	// leaderPollInterval is how often the leadership loop re-checks Raft's
	// state in case an observation was dropped.
	leaderPollInterval = 500 * time.Millisecond
	// memberCheckInterval and memberCheckFastInterval pace a follower's check
	// of its own member record (fast just after a leader appeared).
	memberCheckInterval     = 2 * time.Second
	memberCheckFastInterval = 250 * time.Millisecond
	memberCheckFastPeriod   = 10 * time.Second
	// joinRequestTimeout bounds one join HTTP request.
	joinRequestTimeout = 10 * time.Second
)

// Deps are the collaborators of a Node.
type Deps struct {
	// Logger is the parent logger; the node logs as component=node and Raft
	// as component=raft (through an hclog adapter). Nil discards logs.
	Logger *slog.Logger
	// FSM is the replicated state machine, opened by the caller (who also
	// closes it after Shutdown).
	FSM *fsm.FSM
	// Registerer receives the node's metrics and, for the first node of the
	// process, hashicorp/raft's go-metrics. May be nil.
	Registerer prometheus.Registerer
	// JoinToken is the operator token a joining node sends with its join
	// request when the cluster requires tokens; "" sends none. It is never
	// logged.
	JoinToken string
	// TLS is the member's TLS material. When it is set, Raft traffic uses
	// mutual TLS and joining talks https; when it is nil and cfg names TLS
	// files, New loads them itself (without metrics or SIGHUP reload).
	TLS *mtls.Reloader
}

// Node is one Raft member of a metastore cluster.
type Node struct {
	// joinToken authenticates join requests (Deps.JoinToken).
	joinToken string

	// leaderChanges are the latest leader changes seen (runLeadership),
	// oldest first.
	leaderMu      sync.Mutex
	leaderChanges []LeaderChange

	cfg config.Config
	log *slog.Logger
	fsm *fsm.FSM
	// tasks are the leader tasks (Lead); leading is set once Lead ran.
	tasks   map[string]func(ctx context.Context)
	leading atomic.Bool

	raft      *raft.Raft
	trans     *heartbeatGate
	tlsStream *tlsStreamLayer // nil without TLS
	store     raftStore       // the Raft log and stable store (raftstore.go)
	storePath string          // its file or directory, as errors name it
	logs      *logCache       // log cache over store
	snaps     *raft.FileSnapshotStore
	metrics   *nodeMetrics
	disk      *DiskGuard // refuses writes while the data directory is nearly full (disk.go)
	// diskStop ends waits for disk space (stable.go) at shutdown;
	// raftStalled is true while Raft waits to record its term or vote, or
	// to create its log's next segment.
	diskStop     chan struct{}
	diskStopOnce sync.Once
	raftStalled  atomic.Bool
	// integrity records corrupt files found while running (integrity.go).
	integrity integrity

	observer *raft.Observer
	obsCh    chan raft.Observation
	kickCh   chan struct{} // wakes the member check loop

	httpClient *http.Client

	// proposals queue commands for the proposer (propose.go).
	proposals chan *proposal
	// inflight holds a token per batch entry proposed and not yet answered
	// (propose.go); nil: no bound.
	inflight chan struct{}

	// readyTerm is the term whose leader barrier has completed on this node:
	// linearizable reads are served only when it equals the current term.
	readyTerm atomic.Uint64

	// changeMu serialises membership changes.
	changeMu sync.Mutex

	// ctx lives until Shutdown; it parents leader sessions, the background
	// loops and Join.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closing atomic.Bool

	// restores counts the backup restores in Raft (userRestore); restoreMu
	// orders their start against closing: shutdown takes it after setting
	// closing and waits for the restores counted (waitRestores).
	// waitingRestore is set while it waits.
	restoreMu      sync.Mutex
	restores       sync.WaitGroup
	waitingRestore atomic.Bool

	shutdownOnce sync.Once
	shutdownErr  error
}

// The node's status is an answer of the API, declared in package wire.
type (
	Status       = wire.Status
	LeaderChange = wire.LeaderChange
	MemberStatus = wire.MemberStatus
	DiskStatus   = wire.DiskStatus
)

// MaxLeaderChanges bounds Status.LeaderChanges.
const MaxLeaderChanges = wire.MaxLeaderChanges

// New opens the Raft stores in cfg.DataDir, brings the FSM up to the newest
// snapshot if it is behind, starts Raft and bootstraps a new cluster when
// the data directory is empty and cfg.Join is empty. A node with cfg.Join
// set waits to be added: the caller runs Join (typically once its HTTP
// server is up).
func New(cfg config.Config, deps Deps) (_ *Node, err error) {
	if deps.FSM == nil {
		return nil, errors.New("node: Deps.FSM is nil")
	}
	if cfg.NodeID == "" {
		return nil, errors.New("node: config has no NodeID")
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = config.DefaultConfig().ApplyTimeout
	}
	if cfg.ApplyBatch <= 0 {
		cfg.ApplyBatch = config.DefaultConfig().ApplyBatch
	}
	cfg.ApplyBatch = min(cfg.ApplyBatch, fsm.MaxBatchCommands)
	n := &Node{
		cfg:        cfg,
		log:        logger.With("component", "node"),
		fsm:        deps.FSM,
		joinToken:  deps.JoinToken,
		obsCh:      make(chan raft.Observation, 64),
		kickCh:     make(chan struct{}, 1),
		httpClient: &http.Client{Timeout: joinRequestTimeout},
		disk:       NewDiskGuard(cfg.DataDir, uint64(max(cfg.MinFreeDisk, 0))),
		diskStop:   make(chan struct{}),
	}
	raftLog := logger.With("component", "raft")

	// Everything opened below is closed again if New fails.
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()

	for _, dir := range []string{cfg.DataDir, cfg.RaftDir(), cfg.SnapshotDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("node: create %s: %w", dir, err)
		}
	}

	// Writes of the Raft log and stable store wait for disk space (stable.go).
	space := spaceWait{log: n.log, stop: n.diskStop, stalled: &n.raftStalled}
	n.store, n.storePath, err = openRaftStore(cfg, n.log, raftLog, space)
	if err != nil {
		return nil, err
	}
	closers = append(closers, n.store.Close)
	if n.logs, err = newLogCache(logCacheSize, logCacheBytes, stopOnWriteError{LogStore: n.store, stopping: n.diskStop}); err != nil {
		return nil, fmt.Errorf("node: log cache: %w", err)
	}

	retain := cfg.SnapshotRetain
	if retain < 1 {
		retain = config.DefaultConfig().SnapshotRetain
	}
	if err := removePartialSnapshots(filepath.Join(cfg.SnapshotDir(), "snapshots"), n.log); err != nil {
		return nil, err
	}
	// The store keeps its snapshots in SnapshotDir()/snapshots.
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.SnapshotDir(), retain, newHCLogger(raftLog, "snapshot"))
	if err != nil {
		return nil, fmt.Errorf("node: open snapshot store: %w", err)
	}

	if err := checkSnapshots(filepath.Join(cfg.SnapshotDir(), "snapshots"), n.snaps); err != nil {
		return nil, err
	}

	hasState, err := raft.HasExistingState(n.logs, n.store, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("node: inspect raft state: %w", err)
	}
	if !hasState && n.fsm.AppliedIndex() > 0 {
		// Bootstrapping or joining with a state machine that is ahead of an
		// empty log would make the FSM skip new entries at or below its
		// index: silent divergence.
		return nil, fmt.Errorf("node: %s has applied index %d but the Raft state in %s is empty: "+
			"remove the state machine file to rebuild this member from the cluster, or restore the Raft directory",
			cfg.FSMPath(), n.fsm.AppliedIndex(), cfg.RaftDir())
	}
	// Snapshots are listed newest first.
	metas, err := n.snaps.List()
	if err != nil {
		return nil, fmt.Errorf("node: list snapshots: %w", err)
	}
	var snapIndex uint64
	if len(metas) > 0 {
		snapIndex = metas[0].Index
	}
	if hasState {
		if err := checkLogCoversState(n.storePath, n.store, snapIndex, n.fsm.AppliedIndex()); err != nil {
			return nil, err
		}
		if err := dropLogBehindSnapshot(n.store, snapIndex, n.log); err != nil {
			return nil, err
		}
	}
	if err := n.catchUpFromSnapshot(metas); err != nil {
		return nil, err
	}

	material := deps.TLS
	if material == nil && cfg.TLSEnabled() {
		material, err = mtls.NewReloader(mtls.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile},
			mtls.Options{Logger: logger.With("component", "tls")})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if material != nil {
		n.httpClient.Transport = &http.Transport{Proxy: nil, DialTLSContext: material.DialTLS(&net.Dialer{Timeout: joinRequestTimeout})}
	}
	n.trans, n.tlsStream, err = newTransport(cfg, newHCLogger(raftLog, "transport"), material, raftLog)
	if err != nil {
		return nil, err
	}
	closers = append(closers, n.trans.Close)

	var raftFSM raft.FSM = n.fsm
	if faultInject {
		raftFSM = faultFSM(n.fsm) // test builds only: snapshot persist passes a fault point
	}
	stable := stallingStable{StableStore: n.store, spaceWait: space}
	// As a leader, an append a follower refuses only for a gap at its
	// snapshot's index is retried from its last entry (appendretry.go).
	trans := retryPastGap{heartbeatGate: n.trans, termAt: n.termAt, stalled: &n.raftStalled,
		retried: func(id raft.ServerID, prev, from uint64, ok bool) {
			n.log.Info("append refused for a missing previous entry; retried from the follower's last entry",
				"follower", id, "prev_index", prev, "follower_last_index", from, "accepted", ok)
		}}
	raftConf := n.raftConfig(newHCLogger(raftLog, ""))
	// A new member bootstraps into its stores before Raft starts: the
	// transport already listens, and a member of the initial cluster that
	// starts later than the others is sent the leader's appends at once.
	// Bootstrapping a running Raft (Raft.BootstrapCluster) after one of
	// them has set a term fails with "bootstrap only works on new
	// clusters", and the member exits.
	if !hasState && len(cfg.Join) == 0 {
		if err := n.bootstrap(raftConf, stable, trans); err != nil {
			return nil, err
		}
	}
	n.raft, err = raft.NewRaft(raftConf, raftFSM, n.logs, stable, n.checkedSnaps(), trans)
	if err != nil {
		return nil, fmt.Errorf("node: start raft: %w", err)
	}
	n.trans.setMember(n.raft) // heartbeats of its term may now take the fast path (heartbeat.go)
	closers = append(closers, func() error { return n.raft.Shutdown().Error() }, n.stopDiskWaits)

	if !hasState && len(cfg.Join) > 0 {
		n.log.Info("empty data directory and join addresses set: not bootstrapping, waiting to be added", "join", cfg.Join)
	}

	if n.metrics, err = newNodeMetrics(n, deps.Registerer); err != nil {
		return nil, fmt.Errorf("node: register metrics: %w", err)
	}
	installRaftMetrics(deps.Registerer, n.log)

	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(n.observer)

	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.proposals = make(chan *proposal, 4*n.cfg.ApplyBatch)
	if n.cfg.ApplyInflight > 0 && n.cfg.ApplyBatch > 1 {
		// With no grouping (--apply-batch 1) a bound would only make the
		// commands wait for each other.
		n.inflight = make(chan struct{}, n.cfg.ApplyInflight)
	}
	n.wg.Add(2)
	go n.runMemberCheck()
	go n.runProposer()

	n.log.Info("node started", "id", cfg.NodeID, "raft_addr", cfg.RaftAddr,
		"raft_advertise", n.trans.LocalAddr(), "http_advertise", cfg.HTTPAdvertiseAddr(),
		"existing_state", hasState, "fsm_applied_index", n.fsm.AppliedIndex())
	return n, nil
}

// newTransport builds the Raft transport. It is the one place that decides
// how members talk to each other: plain TCP without TLS material, else the
// mutual-TLS stream layer (tlsstream.go) under raft's NetworkTransport.
//
// Pipelined replication is disabled (MaxRPCsInFlight 1): in hashicorp/raft
// v1.7.3 a follower answering Success=false can leave the pipeline's send
// parked on inprogressCh while its decoder is parked on doneCh with no
// reader; replication to that follower stops and Raft.Shutdown hangs
// forever (seen in this package's tests; grafana/pyroscope#5518 hit it in
// production). Raft's own docs say pipelining brings little benefit.
func newTransport(cfg config.Config, logger hclog.Logger, material *mtls.Reloader, log *slog.Logger) (*heartbeatGate, *tlsStreamLayer, error) {
	var none *heartbeatGate
	advertise, err := net.ResolveTCPAddr("tcp", cfg.RaftAdvertiseAddr())
	if err != nil {
		return none, nil, fmt.Errorf("node: resolve raft advertise address %q: %w", cfg.RaftAdvertiseAddr(), err)
	}
	tc := &raft.NetworkTransportConfig{
		Logger:          logger,
		MaxPool:         transportMaxPool,
		MaxRPCsInFlight: 1,
		Timeout:         transportTimeout,
	}
	if material == nil {
		trans, err := raft.NewTCPTransportWithConfig(cfg.RaftAddr, advertise, tc)
		if err != nil {
			return none, nil, fmt.Errorf("node: raft transport on %s: %w", cfg.RaftAddr, err)
		}
		return newHeartbeatGate(trans), nil, nil
	}
	stream, err := listenRaftTLS(cfg.RaftAddr, advertise, material, log)
	if err != nil {
		return none, nil, fmt.Errorf("node: raft TLS transport on %s: %w", cfg.RaftAddr, err)
	}
	tc.Stream = stream
	return newHeartbeatGate(raft.NewNetworkTransportWithConfig(tc)), stream, nil
}

// raftConfig maps the node's configuration onto raft.Config. Zero durations
// and counts keep Raft's defaults.
func (n *Node) raftConfig(logger hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(n.cfg.NodeID)
	c.Logger = logger
	set := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	set(&c.HeartbeatTimeout, n.cfg.HeartbeatTimeout)
	set(&c.ElectionTimeout, n.cfg.ElectionTimeout)
	set(&c.LeaderLeaseTimeout, n.cfg.LeaderLeaseTimeout)
	set(&c.CommitTimeout, n.cfg.CommitTimeout)
	set(&c.SnapshotInterval, n.cfg.SnapshotInterval)
	if n.cfg.SnapshotThreshold > 0 {
		c.SnapshotThreshold = n.cfg.SnapshotThreshold
	}
	if n.cfg.TrailingLogs > 0 {
		c.TrailingLogs = n.cfg.TrailingLogs
	}
	// The FSM is persistent: it is never rebuilt from a snapshot at start
	// (catchUpFromSnapshot restores one only when the FSM is behind it).
	c.NoSnapshotRestoreOnStart = true
	// Only the label-style telemetry, not the duplicate legacy names.
	c.NoLegacyTelemetry = true
	return c
}

// catchUpFromSnapshot runs before Raft starts. Raft (with
// NoSnapshotRestoreOnStart) takes the newest snapshot's index as already
// applied and replays only the entries after it; if the FSM is behind that
// snapshot (its file was lost, or is older), it must be restored from the
// snapshot first or the entries in between would never reach it.
//
// The FSM's applied index counts only entries Raft hands to it; barrier and
// no-op entries never reach it. So a snapshot index above the FSM's index is
// harmless when every entry in between is still in the log and none is a
// command; only otherwise is the snapshot restored.
func (n *Node) catchUpFromSnapshot(metas []*raft.SnapshotMeta) error {
	applied := n.fsm.AppliedIndex()
	if len(metas) == 0 {
		n.log.Info("no snapshot; state machine used as is", "fsm_applied_index", applied)
		return nil
	}
	newest := metas[0]
	if newest.Index <= applied {
		n.log.Info("state machine is at or past the newest snapshot; not restoring",
			"fsm_applied_index", applied, "snapshot_id", newest.ID, "snapshot_index", newest.Index)
		return nil
	}
	cmd, err := commandIn(n.logs, applied, newest.Index)
	if err == nil && cmd == 0 {
		n.log.Info("state machine is behind the newest snapshot only by non-command entries; not restoring",
			"fsm_applied_index", applied, "snapshot_id", newest.ID, "snapshot_index", newest.Index)
		return nil
	}
	n.log.Warn("state machine is behind the newest snapshot; restoring it from the snapshot",
		"fsm_applied_index", applied, "snapshot_id", newest.ID, "snapshot_index", newest.Index,
		"snapshot_term", newest.Term, "snapshot_bytes", newest.Size)
	start := time.Now()
	_, rc, err := n.checkedSnaps().Open(newest.ID)
	if err != nil {
		return fmt.Errorf("node: open snapshot %s: %w", newest.ID, err)
	}
	defer rc.Close()
	if err := n.fsm.RestoreFrom(rc); err != nil {
		return fmt.Errorf("node: restore state machine from snapshot %s: %w", newest.ID, err)
	}
	n.log.Info("state machine restored from snapshot", "snapshot_id", newest.ID,
		"fsm_applied_index", n.fsm.AppliedIndex(), "took", time.Since(start))
	return nil
}

// removePartialSnapshots removes, from the snapshot store's directory
// dir, the snapshots a crash left half made or half removed:
//
//   - directories ending in ".tmp": snapshots being written when the
//     process died (a crash during persist, or a full disk). Raft's
//     snapshot store skips them but never removes them. Nothing writes a
//     snapshot before Raft starts, so every one found here is abandoned.
//   - a snapshot directory missing its meta.json or its state.bin while a
//     newer snapshot is whole: Raft removes the snapshots past the ones it
//     retains (os.RemoveAll, one file after the other) right after a new
//     one is complete, so a crash in the middle leaves one of the two
//     files. Raft would never use that snapshot again.
//
// Any other damage is left for checkSnapshots to report.
func removePartialSnapshots(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node: list snapshots: %w", err)
	}
	type snap struct {
		name        string
		term, index uint64
		whole       bool
	}
	var snaps []snap
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if strings.HasSuffix(e.Name(), ".tmp") {
			log.Warn("removing a partial snapshot left by a crash or a full disk while it was written", "dir", path)
			if err := os.RemoveAll(path); err != nil {
				return fmt.Errorf("node: remove partial snapshot: %w", err)
			}
			continue
		}
		var term, index, ts uint64
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &ts); err != nil {
			continue // not a snapshot of Raft's store: checkSnapshots names it
		}
		_, merr := os.Stat(filepath.Join(path, "meta.json"))
		_, serr := os.Stat(filepath.Join(path, "state.bin"))
		snaps = append(snaps, snap{name: e.Name(), term: term, index: index, whole: merr == nil && serr == nil})
	}
	for _, s := range snaps {
		if s.whole {
			continue
		}
		newer := slices.ContainsFunc(snaps, func(o snap) bool {
			return o.whole && (o.term > s.term || o.term == s.term && o.index > s.index)
		})
		if !newer {
			continue
		}
		path := filepath.Join(dir, s.name)
		log.Warn("removing an old snapshot whose removal a crash cut short (a newer snapshot is whole)", "dir", path)
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("node: remove old snapshot: %w", err)
		}
	}
	return nil
}

// commandIn returns the highest index in (lo, hi] holding a command entry, 0
// if there is none. A missing entry is reported as an error wrapping
// raft.ErrLogNotFound.
func commandIn(logs raft.LogStore, lo, hi uint64) (uint64, error) {
	for i := hi; i > lo; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return 0, fmt.Errorf("log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}

// bootstrap writes the first configuration into the stores, before Raft
// starts: the initial cluster (all voters), or this node alone.
func (n *Node) bootstrap(conf *raft.Config, stable raft.StableStore, trans raft.Transport) error {
	var servers []raft.Server
	for _, p := range n.cfg.InitialCluster {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	if len(servers) == 0 {
		servers = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.RaftAdvertiseAddr())}}
	}
	n.log.Info("bootstrapping a new cluster", "servers", len(servers))
	if err := raft.BootstrapCluster(conf, n.logs, stable, n.checkedSnaps(), trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("node: bootstrap: %w", err)
	}
	return nil
}

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// LeaderHTTPAddr returns the HTTP address of the current leader, from the
// replicated member records. It returns an error wrapping ErrNoLeader when
// no leader is known or the leader has no member record yet.
func (n *Node) LeaderHTTPAddr() (string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", ErrNoLeader
	}
	if string(id) == n.cfg.NodeID {
		return n.cfg.HTTPAdvertiseAddr(), nil
	}
	members, err := n.fsm.Members()
	if err != nil {
		return "", fmt.Errorf("node: read members: %w", err)
	}
	for _, m := range members {
		if m.ID == string(id) && m.HTTPAddr != "" {
			return m.HTTPAddr, nil
		}
	}
	return "", fmt.Errorf("%w: leader %s has no member record yet", ErrNoLeader, id)
}

// Ready returns nil when a leader is known and the state machine has applied
// every command up to the commit index known to this node; otherwise an
// error (wrapping ErrShutdown, ErrNoLeader or ErrNotReady) saying why.
func (n *Node) Ready() error {
	if n.closing.Load() || n.raft.State() == raft.Shutdown {
		return ErrShutdown
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		return ErrNoLeader
	}
	if n.raft.State() == raft.Leader && n.readyTerm.Load() != n.raft.CurrentTerm() {
		// A new leader serves reads only once its barrier has applied every
		// entry of earlier terms.
		return fmt.Errorf("%w: the leader's barrier for term %d has not completed", ErrNotReady, n.raft.CurrentTerm())
	}
	commit := n.raft.CommitIndex()
	target, err := n.fsmTarget(commit)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	if applied := n.fsm.AppliedIndex(); applied < target {
		return fmt.Errorf("%w: state machine applied index %d is behind commit index %d", ErrNotReady, applied, commit)
	}
	return nil
}

// Snapshot takes a Raft snapshot now and compacts the log. Having nothing
// new to snapshot is not an error.
func (n *Node) Snapshot() error {
	if n.closing.Load() {
		return ErrShutdown
	}
	err := n.raft.Snapshot().Error()
	switch {
	case err == nil:
		n.log.Info("snapshot taken", "index", n.lastSnapshotIndex())
		return nil
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return nil
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case isNoSpace(err):
		return n.disk.Full(err)
	}
	return fmt.Errorf("node: snapshot: %w", err)
}

// Status returns a point-in-time view of the node. Fields that cannot be
// read (Raft shut down) are left zero.
//
// It never waits for Raft's main goroutine or for the state machine, so it
// answers while the member is in trouble: installing or restoring a
// snapshot, stalled on a slow or full disk. Everything it reads is kept
// current outside them (DESIGN.md, "Status without waiting"): Raft's
// state, term, indexes, leader and last contact are atomics or briefly
// held locks of hashicorp/raft; the configuration is Raft's own copy of
// the latest one (configuration); the member records are the state
// machine's in memory (fsm.Members); the snapshot index is read from the
// snapshot store's directory and the free space at most once a second.
// Do not add a call that goes through Raft's main goroutine (a future,
// Barrier, VerifyLeader) or reads the state machine's file.
func (n *Node) Status() Status {
	leaderAddr, leaderID := n.raft.LeaderWithID()
	st := Status{
		ID:                n.cfg.NodeID,
		State:             strings.ToLower(n.raft.State().String()),
		LeaderID:          string(leaderID),
		LeaderRaftAddr:    string(leaderAddr),
		Term:              n.raft.CurrentTerm(),
		CommitIndex:       n.raft.CommitIndex(),
		AppliedIndex:      n.fsm.AppliedIndex(),
		LastLogIndex:      n.raft.LastIndex(),
		LastSnapshotIndex: n.lastSnapshotIndex(),
		Disk:              n.disk.Status(),
	}
	st.Disk.ApplyStalled = n.fsm.Stalled()
	st.Disk.RaftStalled = n.raftStalled.Load()
	st.IntegrityProblem, _ = n.integrity.status()
	if lc := n.raft.LastContact(); !lc.IsZero() && st.State != "leader" {
		st.LastContact = &lc
	}
	n.leaderMu.Lock()
	st.LeaderChanges = append([]LeaderChange{}, n.leaderChanges...)
	n.leaderMu.Unlock()
	records := map[string]fsm.Member{}
	if members, err := n.fsm.Members(); err == nil {
		for _, m := range members {
			records[m.ID] = m
		}
	} else {
		n.log.Warn("status: reading member records failed", "err", err)
	}
	if servers, err := n.configuration(); err == nil {
		for _, s := range servers {
			ms := MemberStatus{
				ID:       string(s.ID),
				RaftAddr: string(s.Address),
				Suffrage: strings.ToLower(s.Suffrage.String()),
				Leader:   s.ID == leaderID,
			}
			if r, ok := records[ms.ID]; ok {
				ms.HTTPAddr = r.HTTPAddr
				delete(records, ms.ID)
			}
			st.Members = append(st.Members, ms)
		}
	}
	for _, r := range records {
		st.Members = append(st.Members, MemberStatus{ID: r.ID, RaftAddr: r.RaftAddr, HTTPAddr: r.HTTPAddr, Suffrage: "none", Leader: raft.ServerID(r.ID) == leaderID})
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	for _, m := range st.Members {
		if m.Leader {
			st.LeaderHTTPAddr = m.HTTPAddr
		}
	}
	if st.LeaderHTTPAddr == "" && st.LeaderID == n.cfg.NodeID {
		st.LeaderHTTPAddr = n.cfg.HTTPAdvertiseAddr()
	}
	return st
}

// configuration returns the latest Raft configuration known to this node
// (possibly not yet committed). It does not wait for Raft's main
// goroutine: since hashicorp/raft v1.1.2 (PR #379) GetConfiguration answers
// from a copy of the latest configuration that the main goroutine stores
// (an atomic.Value in v1.7.3) whenever the configuration changes: an
// entry appended or received, a snapshot installed or restored. Before,
// it was a request to the main goroutine, and hung as long as that was
// busy. A second copy kept here from observations could only lag Raft's.
func (n *Node) configuration() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// Shutdown stops the node: a leader with other voters first hands
// leadership over (bounded by ctx), then leader tasks are cancelled, Raft is
// shut down and the transport and log store are closed. The caller closes
// the FSM afterwards. Without a deadline on ctx, cfg.ShutdownTimeout bounds
// it. Calling Shutdown again returns the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.closing.Store(true)
	if _, ok := ctx.Deadline(); !ok && n.cfg.ShutdownTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ShutdownTimeout)
		defer cancel()
	}
	n.log.Info("shutting down")

	if n.raft.State() == raft.Leader && n.otherVoters() > 0 {
		start := time.Now()
		if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
			n.log.Warn("leadership transfer before shutdown failed", "err", err)
		} else {
			n.log.Info("leadership transferred before shutdown", "took", time.Since(start))
		}
	}

	// Stop leader tasks and background loops.
	n.cancel()
	stopped := make(chan struct{})
	go func() { n.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		n.log.Warn("background loops or leader tasks did not stop in time; shutting Raft down anyway")
	}

	n.waitRestores(ctx)

	n.raft.DeregisterObserver(n.observer)
	// Raft's shutdown waits for its FSM goroutine, which may be waiting
	// for disk space to apply a batch (fsm.ApplyBatch): end that wait.
	n.fsm.StopWaiting()
	_ = n.stopDiskWaits()
	// No heartbeat may be handled beside Raft's goroutines from here on:
	// the stores close after Raft (heartbeatGate.stopFastPath).
	n.trans.stopFastPath()
	var errs []error
	if err := n.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
	}
	if err := n.trans.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close transport: %w", err))
	}
	if err := n.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close log store: %w", err))
	}
	n.metrics.unregister()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node: shutdown: %w", err)
	}
	n.log.Info("shut down")
	return nil
}

// checkedSnaps is the snapshot store with corruption found on Open
// recorded (integrity.go).
func (n *Node) checkedSnaps() checkedSnapshots {
	return checkedSnapshots{FileSnapshotStore: n.snaps, dir: filepath.Join(n.cfg.SnapshotDir(), "snapshots"),
		record: func(path, problem string) { n.integrity.record(n.log, path, problem) }}
}

// stopDiskWaits ends Raft's wait for space to record its term or vote.
func (n *Node) stopDiskWaits() error {
	n.diskStopOnce.Do(func() { close(n.diskStop) })
	return nil
}

// otherVoters counts the voters in the configuration other than this node.
func (n *Node) otherVoters() int {
	servers, err := n.configuration()
	if err != nil {
		return 0
	}
	c := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			c++
		}
	}
	return c
}
