package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/node"
)

// The harness is api/helpers_test.go's: real in-process members, each a
// Raft node on loopback with its bbolt state machine on disk, the HTTP API
// on a real listener, a garbage collector and a local blob store.

type member struct {
	id    string
	cfg   config.Config
	fsm   *fsm.FSM
	node  *node.Node
	store blobstore.Store
	gc    *gc.Collector
	srv   *http.Server
	url   string
}

func freeAddr(t *testing.T) (net.Listener, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l, l.Addr().String()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, addr := freeAddr(t)
	l.Close()
	return addr
}

func testConfig(t *testing.T, id string) config.Config {
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

// startMember starts a member whose HTTP listener is l; cfg.HTTPAddr must
// be l's address. blobDir is its blob store ("": a directory of its own).
func startMember(t *testing.T, cfg config.Config, l net.Listener, blobDir string) *member {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := fsm.Open(cfg.FSMPath(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: cfg.NodeID, cfg: cfg, fsm: f, url: "http://" + cfg.HTTPAddr}
	ref := newNodeRef()
	if blobDir == "" {
		blobDir = filepath.Join(cfg.DataDir, "blobs")
	}
	store, err := blobstore.NewLocal(blobDir)
	if err != nil {
		t.Fatal(err)
	}
	m.store = store
	collector, err := gc.New(gc.Config{Interval: time.Hour, Grace: time.Nanosecond, OrphanGrace: time.Nanosecond}, gc.Deps{
		FSM: f, Store: store, Apply: ref.apply,
		VerifyLeader: func(ctx context.Context) error {
			select {
			case <-ref.ready:
				_, err := ref.n.LinearizableRead(ctx)
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.gc = collector
	n, err := node.New(cfg, node.Deps{
		FSM: f,
		LeaderTasks: map[string]func(context.Context){
			"epoch-timeouts": api.EpochTimeoutTask(f, ref.apply, nil),
			"gc":             collector.Run,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref.set(n)
	m.node = n
	srv := api.New(api.Deps{Config: cfg, Node: n, FSM: f, Store: store, GC: collector, Registry: prometheus.NewRegistry()})
	m.srv = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(l)
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.srv.Close()
	m.node.Shutdown(ctx)
	m.fsm.Close()
	m.gc.Close()
	m.srv = nil
}

func (m *member) running() bool { return m.srv != nil }

// startSingle starts a single-node store.
func startSingle(t *testing.T) *member {
	t.Helper()
	l, addr := freeAddr(t)
	cfg := testConfig(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = freePort(t)
	m := startMember(t, cfg, l, "")
	waitFor(t, 10*time.Second, "leader", func() bool { return m.node.IsLeader() })
	waitFor(t, 10*time.Second, "ready", func() bool { return m.node.Ready() == nil })
	return m
}

// startCluster starts three members sharing one blob directory (as three
// processes on one machine would with --blob-store file:///dir), and waits
// until a leader is known to all and every member record is written.
func startCluster(t *testing.T) []*member {
	t.Helper()
	blobs := filepath.Join(t.TempDir(), "blobs")
	var peers []config.Peer
	var ls []net.Listener
	var cfgs []config.Config
	for i := 1; i <= 3; i++ {
		l, addr := freeAddr(t)
		cfg := testConfig(t, fmt.Sprintf("n%d", i))
		cfg.HTTPAddr = addr
		cfg.RaftAddr = freePort(t)
		peers = append(peers, config.Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr})
		ls = append(ls, l)
		cfgs = append(cfgs, cfg)
	}
	var ms []*member
	for i, cfg := range cfgs {
		cfg.InitialCluster = peers
		ms = append(ms, startMember(t, cfg, ls[i], blobs))
	}
	waitFor(t, 20*time.Second, "a leader with every member record", func() bool {
		l := leaderOf(ms)
		if l == nil {
			return false
		}
		for _, m := range ms {
			if m.node.Ready() != nil {
				return false
			}
			st := m.node.Status()
			n := 0
			for _, ms := range st.Members {
				if ms.HTTPAddr != "" {
					n++
				}
			}
			if n != 3 {
				return false
			}
		}
		return true
	})
	return ms
}

func leaderOf(ms []*member) *member {
	for _, m := range ms {
		if m.running() && m.node.IsLeader() {
			return m
		}
	}
	return nil
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
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

// nodeRef hands the node to leader tasks, which may start while node.New
// is still returning.
type nodeRef struct {
	ready chan struct{}
	n     *node.Node
}

func newNodeRef() *nodeRef { return &nodeRef{ready: make(chan struct{})} }

func (r *nodeRef) set(n *node.Node) {
	r.n = n
	close(r.ready)
}

func (r *nodeRef) apply(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	select {
	case <-r.ready:
		return r.n.Apply(ctx, cmd)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// newClient returns a client of the endpoints with fast backoff.
func newClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		Endpoints:      endpoints,
		RequestTimeout: 10 * time.Second,
		BackoffBase:    2 * time.Millisecond,
		BackoffMax:     100 * time.Millisecond,
		MaxAttempts:    40,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawJSON performs a request outside the client (test set-up and checks).
func rawJSON(t *testing.T, method, url string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCaps(t *testing.T, names ...string) fsm.Caps {
	t.Helper()
	c, err := fsm.ParseCaps(names)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
