package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/node"
)

// member is one in-process member: a real Raft node on loopback, its bbolt
// state machine on disk and the HTTP API on a real listener.
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

// startMember starts a member whose HTTP listener is l; cfg.HTTPAddr must be
// l's address.
func startMember(t *testing.T, cfg config.Config, l net.Listener) *member {
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
	store, err := blobstore.NewLocal(filepath.Join(cfg.DataDir, "blobs"))
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

// startSingle starts a single-node store.
func startSingle(t *testing.T) *member {
	t.Helper()
	l, addr := freeAddr(t)
	cfg := testConfig(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = freePort(t)
	m := startMember(t, cfg, l)
	waitFor(t, 10*time.Second, "leader", func() bool { return m.node.IsLeader() })
	waitFor(t, 10*time.Second, "ready", func() bool { return m.node.Ready() == nil })
	// The leader writes its member record after its barrier; tests that
	// compare state hashes start once it is there.
	waitFor(t, 10*time.Second, "member record", func() bool {
		members, err := m.fsm.Members()
		return err == nil && len(members) == 1 && members[0].HTTPAddr == cfg.HTTPAddr
	})
	return m
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

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) index() uint64 {
	v, _ := strconv.ParseUint(r.header.Get(api.HeaderIndex), 10, 64)
	return v
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiError is the JSON error answer.
type apiError struct {
	Error struct {
		Code      string `json:"code"`
		Field     string `json:"field"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

func do(t *testing.T, method, url string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// ok performs a request that must answer 200 and decodes the answer.
func ok(t *testing.T, method, url string, body any, out any) response {
	t.Helper()
	r := do(t, method, url, body)
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", method, url, r.status, r.body)
	}
	if out != nil {
		r.decode(t, out)
	}
	return r
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
