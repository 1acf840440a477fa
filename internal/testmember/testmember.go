// Package testmember starts real metastore members inside a test process:
// the bbolt state machine on disk, Raft on loopback, the HTTP API on a real
// listener, a local blob store and the garbage collector. Tests of the API
// and of the Go client share it; whole processes are started by the
// cmd/metastore and jepsen tests instead.
package testmember

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/internal/datadir"
	"github.com/metastore/metastore/internal/freeport"
	"github.com/metastore/metastore/leader"
	"github.com/metastore/metastore/node"
)

// Member is one in-process member.
type Member struct {
	ID    string
	Cfg   config.Config
	FSM   *fsm.FSM
	Node  *node.Node
	Store blobstore.Store
	GC    *gc.Collector
	// URL is the base URL of the member's HTTP API.
	URL string
	// Handler is the API's root handler (what the HTTP server serves), for
	// tests that call it without a connection.
	Handler func() http.Handler
	srv     *http.Server
}

// FreeAddr returns a listener on a free loopback port and its address.
func FreeAddr(t testing.TB) (net.Listener, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l, l.Addr().String()
}

// FreePort returns a loopback address for a server that binds it later
// (Raft's transport binds its own): free now, outside the kernel's
// ephemeral range and never given twice (internal/freeport).
func FreePort(t testing.TB) string {
	t.Helper()
	return freeport.Addr(t)
}

// Config is a member configuration with fast Raft timings and its data in
// a temporary directory.
func Config(t testing.TB, id string) config.Config {
	cfg := config.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = filepath.Join(t.TempDir(), id)
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.ApplyTimeout = 5 * time.Second
	cfg.LogLevel = "warn"
	return cfg
}

// Start starts a member whose HTTP listener is l (cfg.HTTPAddr must be its
// address) and stops it when the test ends. blobDir is its blob store ("":
// a directory of its own).
func Start(t testing.TB, cfg config.Config, l net.Listener, blobDir string) *Member {
	t.Helper()
	return start(t, cfg, l, blobDir, nil, nil, true)
}

// StartLogged is Start with every component (state machine, node, Raft,
// API, collector, auth bootstrap) logging to logger; nil discards.
func StartLogged(t testing.TB, cfg config.Config, l net.Listener, blobDir string, logger *slog.Logger) *Member {
	t.Helper()
	return start(t, cfg, l, blobDir, nil, logger, true)
}

// start starts a member; without leaderTasks its leader runs no background
// task (epoch timeouts, GC runs, auth bootstrap).
func start(t testing.TB, cfg config.Config, l net.Listener, blobDir string, store blobstore.Store, logger *slog.Logger, leaderTasks bool) *Member {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := datadir.Check(cfg.DataDir, "test"); err != nil {
		t.Fatal(err)
	}
	f, err := fsm.Open(cfg.FSMPath(), logger)
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{ID: cfg.NodeID, Cfg: cfg, FSM: f, URL: "http://" + cfg.HTTPAddr}
	if blobDir == "" {
		blobDir = filepath.Join(cfg.DataDir, "blobs")
	}
	if m.Store = store; m.Store == nil {
		if m.Store, err = blobstore.NewLocal(blobDir); err != nil {
			t.Fatal(err)
		}
	}
	m.Node, err = node.New(cfg, node.Deps{FSM: f, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	m.GC, err = gc.New(gc.Config{Interval: time.Hour, Grace: time.Nanosecond, OrphanGrace: time.Nanosecond}, gc.Deps{
		FSM: f, Store: m.Store, Propose: m.Node.Propose, Now: m.Node.Now,
		VerifyLeader: func(ctx context.Context) error {
			_, err := m.Node.LinearizableRead(ctx)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[string]func(context.Context){
		"epoch-timeouts": leader.EpochTimeouts(m.Node, f, logger),
		"gc":             m.GC.Run,
		"slot-key":       leader.SlotKey(m.Node, f, logger),
	}
	if cfg.Auth {
		// As cmd/metastore serve does: the bootstrap token from its file.
		var boot string
		if cfg.AuthBootstrapTokenFile != "" {
			raw, err := os.ReadFile(cfg.AuthBootstrapTokenFile)
			if err != nil {
				t.Fatal(err)
			}
			boot = strings.TrimSpace(string(raw))
		}
		tasks["auth-bootstrap"] = leader.AuthBootstrap(m.Node, f, logger, boot)
	}
	if !leaderTasks {
		tasks = nil
	}
	m.Node.Lead(tasks)
	srv := api.New(api.Deps{Config: cfg, Node: m.Node, FSM: f, Store: m.Store, GC: m.GC, Registry: prometheus.NewRegistry(), Logger: logger})
	m.Handler = srv.Handler
	m.srv = api.NewHTTPServer(cfg, srv.Handler(), nil)
	go m.srv.Serve(l)
	t.Cleanup(m.Stop)
	return m
}

// Stop stops the member; stopping it again does nothing.
func (m *Member) Stop() {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.srv.Close()
	m.Node.Shutdown(ctx)
	m.FSM.Close()
	m.GC.Close()
	m.srv = nil
}

// Running reports whether the member has not been stopped.
func (m *Member) Running() bool { return m.srv != nil }

// StartSingle starts a single-node store and returns once it is the leader,
// ready, and its member record and upload-slot key are written (tests
// comparing state hashes must not race with those writes).
func StartSingle(t testing.TB) *Member {
	t.Helper()
	return StartSingleWith(t, nil)
}

// StartSingleWith is StartSingle with the configuration passed through
// tweak (when not nil) first.
func StartSingleWith(t testing.TB, tweak func(*config.Config)) *Member {
	t.Helper()
	return startSingle(t, tweak, true)
}

// StartSingleQuiet is StartSingle without the leader's background tasks
// (epoch ack timeouts, the garbage collector's runs): a test that compares
// the state before and after a request sees the request's changes only.
func StartSingleQuiet(t testing.TB) *Member {
	t.Helper()
	return startSingle(t, nil, false)
}

// StartSingleStore is StartSingleWith on the given object store (an S3
// store against a test server, say) instead of a local directory.
func StartSingleStore(t testing.TB, store blobstore.Store, tweak func(*config.Config)) *Member {
	t.Helper()
	return startSingleStore(t, tweak, store, true)
}

func startSingle(t testing.TB, tweak func(*config.Config), leaderTasks bool) *Member {
	t.Helper()
	return startSingleStore(t, tweak, nil, leaderTasks)
}

func startSingleStore(t testing.TB, tweak func(*config.Config), store blobstore.Store, leaderTasks bool) *Member {
	t.Helper()
	l, addr := FreeAddr(t)
	cfg := Config(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = FreePort(t)
	if tweak != nil {
		tweak(&cfg)
	}
	m := start(t, cfg, l, "", store, nil, leaderTasks)
	WaitFor(t, 10*time.Second, "leader", func() bool { return m.Node.IsLeader() })
	WaitFor(t, 10*time.Second, "ready", func() bool { return m.Node.Ready() == nil })
	WaitFor(t, 10*time.Second, "member record", func() bool {
		members, err := m.FSM.Members()
		return err == nil && len(members) == 1 && members[0].HTTPAddr == cfg.HTTPAddr
	})
	if leaderTasks {
		WaitFor(t, 10*time.Second, "upload-slot key", func() bool { return m.hasSlotKey() })
	}
	return m
}

// hasSlotKey reports whether the member applied the key signing upload
// slots (the leader sets it, leader.SlotKey), after which the API hands
// out signed slots.
func (m *Member) hasSlotKey() bool {
	key, err := m.FSM.SlotKey()
	return err == nil && key != nil
}

// StartCluster starts n members sharing one blob directory (as processes on
// one machine would with --blob-store file:///dir) and waits until a
// leader is known to all, every member is ready and every member record is
// written.
func StartCluster(t testing.TB, n int) []*Member {
	t.Helper()
	return StartClusterWith(t, n, nil)
}

// StartClusterWith is StartCluster with every member's configuration
// passed through tweak (when not nil) first.
func StartClusterWith(t testing.TB, n int, tweak func(*config.Config)) []*Member {
	t.Helper()
	return StartClusterLogged(t, n, tweak, nil)
}

// StartClusterLogged is StartClusterWith with every member logging to
// logger (StartLogged); nil discards.
func StartClusterLogged(t testing.TB, n int, tweak func(*config.Config), logger *slog.Logger) []*Member {
	t.Helper()
	blobs := filepath.Join(t.TempDir(), "blobs")
	var peers []config.Peer
	var ls []net.Listener
	var cfgs []config.Config
	for i := 1; i <= n; i++ {
		l, addr := FreeAddr(t)
		cfg := Config(t, fmt.Sprintf("n%d", i))
		cfg.HTTPAddr = addr
		cfg.RaftAddr = FreePort(t)
		if tweak != nil {
			tweak(&cfg)
		}
		peers = append(peers, config.Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr})
		ls = append(ls, l)
		cfgs = append(cfgs, cfg)
	}
	var ms []*Member
	for i, cfg := range cfgs {
		cfg.InitialCluster = peers
		ml := logger
		if ml != nil {
			ml = ml.With("member", cfg.NodeID)
		}
		ms = append(ms, StartLogged(t, cfg, ls[i], blobs, ml))
	}
	WaitFor(t, 20*time.Second, "a leader with every member record", func() bool {
		if LeaderOf(ms) == nil {
			return false
		}
		for _, m := range ms {
			if m.Node.Ready() != nil || !m.hasSlotKey() {
				return false
			}
			records := 0
			for _, ms := range m.Node.Status().Members {
				if ms.HTTPAddr != "" {
					records++
				}
			}
			if records != n {
				return false
			}
		}
		return true
	})
	return ms
}

// LeaderOf returns the running member that is leader, or nil.
func LeaderOf(ms []*Member) *Member {
	for _, m := range ms {
		if m.Running() && m.Node.IsLeader() {
			return m
		}
	}
	return nil
}

// WaitFor polls cond until it holds or the timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
