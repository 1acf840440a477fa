package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/freeport"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// ---- helpers -------------------------------------------------------------

// logBuf collects a test's logs; they are printed only if the test fails.
// Writes after the test ended are harmless.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	b := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last log lines:\n%s", b.tail(300))
		}
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// freeAddr returns a loopback address whose port is free now, outside the
// kernel's ephemeral range, so that nothing but an explicit bind takes it
// before the node does, or between a node's stop and its restart on the
// same address (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// withFreePorts picks k free loopback addresses and calls start with them;
// if start fails because an address was taken in between, it tries again
// with new ones.
func withFreePorts(t *testing.T, k int, start func(addrs []string) error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addrs := make([]string, k)
		for i := range addrs {
			addrs[i] = freeAddr(t)
		}
		err := start(addrs)
		if err == nil {
			return
		}
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
			t.Logf("port taken, retrying: %v", err)
			continue
		}
		t.Fatalf("start: %v", err)
	}
}

type testNode struct {
	t       *testing.T
	cfg     config.Config
	node    *node.Node
	fsm     *fsm.FSM
	api     *httptest.Server
	ptr     *atomic.Pointer[node.Node]
	log     *slog.Logger
	tasks   atomic.Int32 // leader tasks running now
	started atomic.Int32 // leader task starts
	stopped bool
	reg     prometheus.Registerer
}

// newTestNode prepares (but does not start) a node with a fake HTTP API
// that serves POST /v1/members like the real API: forward to the leader,
// which calls AddVoter.
func newTestNode(t *testing.T, log *slog.Logger, id, dir string) *testNode {
	t.Helper()
	tn := &testNode{t: t, ptr: &atomic.Pointer[node.Node]{}, log: log}
	tn.api = httptest.NewServer(membersHandler(tn.ptr))
	t.Cleanup(tn.api.Close)
	c := config.DefaultConfig()
	c.NodeID = id
	c.DataDir = dir
	c.HTTPAddr = tn.api.Listener.Addr().String()
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.ApplyTimeout = 5 * time.Second
	c.ShutdownTimeout = 5 * time.Second
	tn.cfg = c
	return tn
}

// start opens the FSM and the node (with cfg as it is now).
func (tn *testNode) start() error {
	tn.t.Helper()
	if err := tn.cfg.Validate(); err != nil {
		tn.t.Fatalf("config: %v", err)
	}
	f, err := fsm.Open(tn.cfg.FSMPath(), tn.log.With("node", tn.cfg.NodeID, "component", "fsm"))
	if err != nil {
		tn.t.Fatalf("open fsm: %v", err)
	}
	n, err := node.New(tn.cfg, node.Deps{
		Logger:     tn.log.With("node", tn.cfg.NodeID),
		FSM:        f,
		Registerer: tn.reg,
	})
	if err != nil {
		f.Close()
		return err
	}
	n.Lead(map[string]func(context.Context){
		"probe": func(ctx context.Context) {
			tn.started.Add(1)
			tn.tasks.Add(1)
			defer tn.tasks.Add(-1)
			<-ctx.Done()
		},
	})
	tn.fsm, tn.node, tn.stopped = f, n, false
	tn.ptr.Store(n)
	tn.t.Cleanup(tn.stop)
	return nil
}

// restarted returns a stopped copy of tn with the same configuration and
// HTTP server, ready to start again on the same data directory.
func (tn *testNode) restarted() *testNode {
	return &testNode{t: tn.t, cfg: tn.cfg, api: tn.api, ptr: tn.ptr, log: tn.log, stopped: true}
}

func (tn *testNode) stop() {
	if tn.stopped {
		return
	}
	tn.stopped = true
	tn.ptr.Store(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tn.node.Shutdown(ctx); err != nil {
		tn.t.Errorf("shutdown %s: %v", tn.cfg.NodeID, err)
	}
	if err := tn.fsm.Close(); err != nil {
		tn.t.Errorf("close fsm %s: %v", tn.cfg.NodeID, err)
	}
}

func membersHandler(ptr *atomic.Pointer[node.Node]) http.Handler {
	client := &http.Client{Timeout: 5 * time.Second}
	writeErr := func(w http.ResponseWriter, status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/members" {
			writeErr(w, http.StatusNotFound, "not_found", r.URL.Path)
			return
		}
		n := ptr.Load()
		if n == nil {
			writeErr(w, http.StatusServiceUnavailable, "unavailable", "node not running")
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !n.IsLeader() {
			addr, err := n.LeaderHTTPAddr()
			if err != nil {
				writeErr(w, http.StatusServiceUnavailable, "no_leader", err.Error())
				return
			}
			resp, err := client.Post("http://"+addr+"/v1/members", "application/json", bytes.NewReader(body))
			if err != nil {
				writeErr(w, http.StatusBadGateway, "forward", err.Error())
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
			return
		}
		var req struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeErr(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		err := n.AddVoter(r.Context(), req.ID, req.RaftAddr, req.HTTPAddr)
		var rule *wire.RuleError
		switch {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, node.ErrMemberConflict):
			writeErr(w, http.StatusConflict, "conflict", err.Error())
		case errors.As(err, &rule):
			writeErr(w, http.StatusBadRequest, string(rule.Code), err.Error())
		default:
			writeErr(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		}
	})
}

func upsert(t *testing.T, n *node.Node, id string) *fsm.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, index, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: id, RaftAddr: id + ".example:7071", HTTPAddr: id + ".example:7070"})
	if err != nil {
		t.Fatalf("propose upsert %s: %v", id, err)
	}
	res := &fsm.Result{Index: index, Value: v}
	return res
}

func memberIDs(t *testing.T, f *fsm.FSM) []string {
	t.Helper()
	ms, err := f.Members()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}

func hasMember(t *testing.T, f *fsm.FSM, id string) bool {
	for _, m := range memberIDs(t, f) {
		if m == id {
			return true
		}
	}
	return false
}

func startSingle(t *testing.T, log *slog.Logger, id, dir string) *testNode {
	t.Helper()
	var tn *testNode
	withFreePorts(t, 1, func(addrs []string) error {
		tn = newTestNode(t, log, id, dir)
		tn.cfg.RaftAddr = addrs[0]
		return tn.start()
	})
	waitFor(t, 10*time.Second, id+" to lead", tn.node.IsLeader)
	return tn
}

func leaders(nodes []*testNode) []*testNode {
	var out []*testNode
	for _, tn := range nodes {
		if !tn.stopped && tn.node.IsLeader() {
			out = append(out, tn)
		}
	}
	return out
}

func waitLeader(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var l *testNode
	waitFor(t, 10*time.Second, "exactly one leader", func() bool {
		ls := leaders(nodes)
		if len(ls) != 1 {
			return false
		}
		l = ls[0]
		return true
	})
	return l
}

// linRead retries a linearizable read while the new leader's barrier is
// pending (ErrTryAgain).
func linRead(t *testing.T, n *node.Node) uint64 {
	t.Helper()
	var idx uint64
	waitFor(t, 5*time.Second, "linearizable read", func() bool {
		var err error
		idx, err = n.LinearizableRead(ctxT(t))
		if err != nil && !errors.Is(err, node.ErrTryAgain) {
			t.Fatalf("linearizable read: %v", err)
		}
		return err == nil
	})
	return idx
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ---- tests ---------------------------------------------------------------

func TestSingleNodeBootstrapApplyAndRead(t *testing.T) {
	log := testLogger(t)
	tn := startSingle(t, log, "n1", t.TempDir())
	n := tn.node

	waitFor(t, 5*time.Second, "ready", func() bool { return n.Ready() == nil })
	waitFor(t, 5*time.Second, "own member record", func() bool { return hasMember(t, tn.fsm, "n1") })

	res := upsert(t, n, "other")
	if res.Index == 0 {
		t.Fatalf("result index 0")
	}
	if m, ok := res.Value.(*fsm.Member); !ok || m.ID != "other" {
		t.Fatalf("result value %#v", res.Value)
	}
	if !hasMember(t, tn.fsm, "other") {
		t.Fatalf("member not applied: %v", memberIDs(t, tn.fsm))
	}

	// A rule violation is a result, not a Raft error.
	_, badIndex, err := n.Propose(ctxT(t), fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "bad id!", RaftAddr: "x:1", HTTPAddr: "x:2"})
	var rule *wire.RuleError
	if !errors.As(err, &rule) || !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("want invalid rule error, got %v", err)
	}
	if badIndex == 0 {
		t.Fatal("a rule violation answered without the index it was applied at")
	}

	if idx := linRead(t, n); idx < badIndex {
		t.Fatalf("read index %d < last write %d", idx, badIndex)
	}

	if addr, err := n.LeaderHTTPAddr(); err != nil || addr != tn.cfg.HTTPAdvertiseAddr() {
		t.Fatalf("LeaderHTTPAddr = %q, %v", addr, err)
	}
	st := n.Status()
	if st.State != "leader" || st.LeaderID != "n1" || st.Term == 0 || st.CommitIndex < badIndex || st.AppliedIndex < badIndex || st.LeaderHTTPAddr != tn.cfg.HTTPAdvertiseAddr() {
		t.Fatalf("status %+v", st)
	}
	if len(st.Members) != 2 || st.Members[0].ID != "n1" || st.Members[0].Suffrage != "voter" || !st.Members[0].Leader ||
		st.Members[1].ID != "other" || st.Members[1].Suffrage != "none" {
		t.Fatalf("status members %+v", st.Members)
	}
	if b, err := json.Marshal(st); err != nil || !strings.Contains(string(b), `"last_snapshot_index"`) {
		t.Fatalf("status json %s %v", b, err)
	}

	waitFor(t, 5*time.Second, "leader task running", func() bool { return tn.tasks.Load() == 1 })
	tn.stop()
	if tn.tasks.Load() != 0 {
		t.Fatalf("leader task still running after shutdown")
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if _, _, err := n.Propose(context.Background(), fsm.CmdMemberRemove, fsm.MemberRemove{ID: "x"}); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("apply after shutdown: %v", err)
	}
	if err := n.Ready(); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("ready after shutdown: %v", err)
	}
}

func TestRestartKeepsAppliedIndexWithoutRestore(t *testing.T) {
	log := testLogger(t)
	dir := t.TempDir()
	tn := startSingle(t, log, "n1", dir)
	for _, id := range []string{"a", "b", "c"} {
		upsert(t, tn.node, id)
	}
	waitFor(t, 5*time.Second, "own member record", func() bool { return hasMember(t, tn.fsm, "n1") })
	want := tn.fsm.AppliedIndex()
	wantMembers := memberIDs(t, tn.fsm)

	for round := 1; round <= 2; round++ {
		// Round 2 restarts after a snapshot whose index is above the FSM's
		// (the new term's no-op and barrier are its last entries).
		if round == 2 {
			if err := tn.node.Snapshot(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if st := tn.node.Status(); st.LastSnapshotIndex <= tn.fsm.AppliedIndex() {
				t.Fatalf("want snapshot index above the FSM's: %+v", st)
			}
		}
		tn.stop()
		before, err := os.Stat(tn.cfg.FSMPath())
		if err != nil {
			t.Fatal(err)
		}
		tn2 := tn.restarted()
		if err := tn2.start(); err != nil {
			t.Fatalf("restart %d: %v", round, err)
		}
		if got := tn2.fsm.AppliedIndex(); got != want {
			t.Fatalf("restart %d: applied index %d right after New, want %d", round, got, want)
		}
		after, err := os.Stat(tn2.cfg.FSMPath())
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(before, after) {
			t.Fatalf("restart %d: the FSM file was replaced (restored from a snapshot)", round)
		}
		waitFor(t, 10*time.Second, "leader after restart", tn2.node.IsLeader)
		waitFor(t, 5*time.Second, "ready after restart", func() bool { return tn2.node.Ready() == nil })
		// The new term's no-op and barrier are the last entries: they never
		// reach the FSM, and the read must not wait for them.
		idx := linRead(t, tn2.node)
		if st := tn2.node.Status(); idx != want || st.CommitIndex <= idx {
			t.Fatalf("restart %d: read index %d, want %d (below commit index %d)", round, idx, want, st.CommitIndex)
		}
		if err := tn2.fsm.WaitApplied(ctxT(t), idx); err != nil {
			t.Fatalf("restart %d: WaitApplied(read index): %v", round, err)
		}
		if got := tn2.fsm.AppliedIndex(); got != want {
			t.Fatalf("restart %d: applied index %d after replay, want %d (no new commands)", round, got, want)
		}
		if got := memberIDs(t, tn2.fsm); fmt.Sprint(got) != fmt.Sprint(wantMembers) {
			t.Fatalf("restart %d: members %v, want %v", round, got, wantMembers)
		}
		tn = tn2
	}
	res := upsert(t, tn.node, "d")
	if res.Index <= want {
		t.Fatalf("new write index %d <= previous applied %d", res.Index, want)
	}
}

func TestSnapshotRestoresLostFSM(t *testing.T) {
	log := testLogger(t)
	dir := t.TempDir()
	tn := startSingle(t, log, "n1", dir)
	upsert(t, tn.node, "a")
	upsert(t, tn.node, "b")
	if err := tn.node.Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	upsert(t, tn.node, "c") // only in the log after the snapshot
	want := tn.fsm.AppliedIndex()
	tn.stop()

	if err := os.Remove(tn.cfg.FSMPath()); err != nil {
		t.Fatal(err)
	}
	tn2 := tn.restarted()
	if err := tn2.start(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	// Restored from the snapshot before Raft started.
	if !hasMember(t, tn2.fsm, "a") || !hasMember(t, tn2.fsm, "b") || tn2.fsm.AppliedIndex() == 0 {
		t.Fatalf("after New: members %v applied %d", memberIDs(t, tn2.fsm), tn2.fsm.AppliedIndex())
	}
	// The entry after the snapshot is replayed from the log.
	waitFor(t, 10*time.Second, "entry after the snapshot replayed", func() bool {
		return hasMember(t, tn2.fsm, "c") && tn2.fsm.AppliedIndex() >= want
	})
}

func TestRefusesFSMAheadOfEmptyRaftState(t *testing.T) {
	log := testLogger(t)
	dir := t.TempDir()
	tn := startSingle(t, log, "n1", dir)
	upsert(t, tn.node, "a")
	tn.stop()
	if err := os.RemoveAll(filepath.Join(dir, "raft")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	err := tn.restarted().start()
	if err == nil || !strings.Contains(err.Error(), "Raft state") {
		t.Fatalf("want refusal, got %v", err)
	}
}

// retryable reports errors after which a test retries on the then-current
// leader: leadership can move at any time (tests run under -race on small
// machines, where a leader can miss its lease).
func retryable(err error) bool {
	return errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrTryAgain) ||
		errors.Is(err, node.ErrUnknownOutcome) || errors.Is(err, node.ErrNoLeader)
}

// onLeader runs fn on the current leader, and again on the then-current
// leader while fn fails with a retryable error. It returns the leader fn
// succeeded on.
func onLeader(t *testing.T, nodes []*testNode, what string, fn func(l *testNode) error) *testNode {
	t.Helper()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		l := waitLeader(t, nodes)
		err := fn(l)
		if err == nil {
			return l
		}
		if !retryable(err) {
			t.Fatalf("%s on %s: %v", what, l.cfg.NodeID, err)
		}
		last = err
		time.Sleep(20 * time.Millisecond) // backoff before asking again
	}
	t.Fatalf("%s: still failing: %v", what, last)
	return nil
}

func TestThreeNodeCluster(t *testing.T) {
	nodes := startCluster(t, 3, func(*config.Config) {})
	leader := waitLeader(t, nodes)
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}

	// Every member records the change of leader it saw; a follower reports
	// when it last heard from the leader, the leader does not.
	waitFor(t, 10*time.Second, "leader changes and last contact in the status", func() bool {
		ls := leaders(nodes)
		if len(ls) != 1 {
			return false
		}
		for _, tn := range nodes {
			st := tn.node.Status()
			n := len(st.LeaderChanges)
			if n == 0 || st.LeaderChanges[n-1].LeaderID != ls[0].cfg.NodeID || st.LeaderChanges[n-1].Term == 0 ||
				st.LeaderChanges[n-1].At.IsZero() || (tn == ls[0]) != (st.LastContact == nil) {
				return false
			}
		}
		return true
	})

	// Writes and linearizable reads go to the leader only.
	x := fsm.MemberUpsert{ID: "x", RaftAddr: "x:1", HTTPAddr: "x:2"}
	if _, _, err := follower.node.Propose(ctxT(t), fsm.CmdMemberUpsert, x); !errors.Is(err, node.ErrNotLeader) {
		t.Fatalf("apply on follower: %v", err)
	}
	if _, err := follower.node.LinearizableRead(ctxT(t)); !errors.Is(err, node.ErrNotLeader) {
		t.Fatalf("read on follower: %v", err)
	}
	var lastIndex uint64
	onLeader(t, nodes, "write", func(l *testNode) (err error) {
		_, lastIndex, err = l.node.Propose(ctxT(t), fsm.CmdMemberUpsert, x)
		return err
	})
	// A read on any leader, even a newer one, reflects the write.
	onLeader(t, nodes, "linearizable read", func(l *testNode) error {
		idx, err := l.node.LinearizableRead(ctxT(t))
		if err == nil && idx < lastIndex {
			t.Fatalf("read index %d < write index %d", idx, lastIndex)
		}
		return err
	})

	// Followers of a static cluster get their member records through the
	// leader (POST /v1/members); then every node knows every HTTP address.
	waitFor(t, 15*time.Second, "member records of all nodes on all nodes", func() bool {
		for _, tn := range nodes {
			for _, other := range nodes {
				if !hasMember(t, tn.fsm, other.cfg.NodeID) {
					return false
				}
			}
		}
		return true
	})
	for _, tn := range nodes {
		waitFor(t, 5*time.Second, tn.cfg.NodeID+" ready", func() bool { return tn.node.Ready() == nil })
	}
	waitFor(t, 10*time.Second, "every node names the leader's HTTP address, status agrees", func() bool {
		ls := leaders(nodes)
		if len(ls) != 1 {
			return false
		}
		l := ls[0]
		for _, tn := range nodes {
			if addr, err := tn.node.LeaderHTTPAddr(); err != nil || addr != l.cfg.HTTPAdvertiseAddr() {
				return false
			}
		}
		st := l.node.Status()
		voters, leads := 0, 0
		for _, m := range st.Members {
			if m.Suffrage == "voter" && m.HTTPAddr != "" {
				voters++
			}
			if m.Leader {
				leads++
			}
		}
		return voters == 3 && leads == 1 && st.LeaderID == l.cfg.NodeID && st.LeaderHTTPAddr == l.cfg.HTTPAdvertiseAddr()
	})

	// Leader tasks run on the leader only.
	tasksOnLeaderOnly := func() bool {
		ls := leaders(nodes)
		if len(ls) != 1 {
			return false
		}
		for _, tn := range nodes {
			want := int32(0)
			if tn == ls[0] {
				want = 1
			}
			if tn.tasks.Load() != want {
				return false
			}
		}
		return true
	}
	waitFor(t, 5*time.Second, "leader task on the leader only", tasksOnLeaderOnly)

	// Membership: a conflicting address is refused, re-adding a voter is a
	// no-op, an unknown id is 404, and only the leader changes membership.
	onLeader(t, nodes, "conflicting AddVoter", func(l *testNode) error {
		other := nodes[0]
		if other == l {
			other = nodes[1]
		}
		err := l.node.AddVoter(ctxT(t), other.cfg.NodeID, "127.0.0.1:1", other.cfg.HTTPAdvertiseAddr())
		if errors.Is(err, node.ErrMemberConflict) {
			return nil
		}
		if err == nil {
			t.Fatalf("conflicting AddVoter succeeded")
		}
		return err
	})
	onLeader(t, nodes, "idempotent AddVoter", func(l *testNode) error {
		other := nodes[0]
		if other == l {
			other = nodes[1]
		}
		return l.node.AddVoter(ctxT(t), other.cfg.NodeID, other.cfg.RaftAdvertiseAddr(), other.cfg.HTTPAdvertiseAddr())
	})
	onLeader(t, nodes, "remove unknown", func(l *testNode) error {
		err := l.node.RemoveServer(ctxT(t), "nope")
		if errors.Is(err, node.ErrUnknownMember) {
			return nil
		}
		if err == nil {
			t.Fatalf("removing an unknown id succeeded")
		}
		return err
	})
	for _, tn := range nodes {
		if !tn.node.IsLeader() {
			if err := tn.node.RemoveServer(ctxT(t), "n1"); !errors.Is(err, node.ErrNotLeader) {
				t.Fatalf("remove on follower: %v", err)
			}
			break
		}
	}

	// Leadership transfer: the old leader steps down and the leader task
	// follows leadership.
	old := onLeader(t, nodes, "transfer", func(l *testNode) error {
		return l.node.TransferLeadership(ctxT(t))
	})
	waitFor(t, 10*time.Second, "a new leader", func() bool {
		ls := leaders(nodes)
		return len(ls) == 1 && ls[0] != old
	})
	waitFor(t, 5*time.Second, "leader task moved with leadership", tasksOnLeaderOnly)
	// So did the state machine's leader commit interval (fsm.SetLeading).
	waitFor(t, 5*time.Second, "only the leader's state machine leads", func() bool {
		ls := leaders(nodes)
		if len(ls) != 1 {
			return false
		}
		for _, tn := range nodes {
			if tn.fsm.Leading() != (tn == ls[0]) {
				return false
			}
		}
		return true
	})

	// Remove a follower.
	var victim *testNode
	onLeader(t, nodes, "remove follower", func(l *testNode) error {
		if victim == nil {
			for _, tn := range nodes {
				if tn != l {
					victim = tn
					break
				}
			}
		}
		err := l.node.RemoveServer(ctxT(t), victim.cfg.NodeID)
		if errors.Is(err, node.ErrUnknownMember) {
			return nil // an earlier attempt with an unknown outcome did it
		}
		return err
	})
	var rest []*testNode
	for _, tn := range nodes {
		if tn != victim {
			rest = append(rest, tn)
		}
	}
	waitFor(t, 10*time.Second, "the removed server gone from status and member records", func() bool {
		ls := leaders(rest)
		if len(ls) != 1 {
			return false
		}
		st := ls[0].node.Status()
		for _, m := range st.Members {
			if m.ID == victim.cfg.NodeID {
				return false
			}
		}
		return len(st.Members) == 3 && !hasMember(t, ls[0].fsm, victim.cfg.NodeID) // two voters and the "x" record
	})
	// The two remaining voters still commit.
	onLeader(t, rest, "write after remove", func(l *testNode) error {
		_, _, err := l.node.Propose(ctxT(t), fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "after-remove", RaftAddr: "y:1", HTTPAddr: "y:2"})
		return err
	})
}

func TestJoin(t *testing.T) {
	log := testLogger(t)
	first := startSingle(t, log, "n1", t.TempDir())
	waitFor(t, 5*time.Second, "n1 member record", func() bool { return hasMember(t, first.fsm, "n1") })

	var second *testNode
	withFreePorts(t, 1, func(addrs []string) error {
		second = newTestNode(t, log, "n2", t.TempDir())
		second.cfg.RaftAddr = addrs[0]
		second.cfg.Join = []string{"127.0.0.1:1", first.cfg.HTTPAdvertiseAddr()} // the first address refuses connections
		return second.start()
	})
	if err := second.node.Join(ctxT(t), second.cfg.Join); err != nil {
		t.Fatalf("join: %v", err)
	}
	waitFor(t, 10*time.Second, "n2 replicated state", func() bool {
		return hasMember(t, second.fsm, "n1") && hasMember(t, second.fsm, "n2")
	})
	st := first.node.Status()
	if len(st.Members) != 2 || st.Members[1].ID != "n2" || st.Members[1].Suffrage != "voter" || st.Members[1].HTTPAddr != second.cfg.HTTPAdvertiseAddr() {
		t.Fatalf("members %+v", st.Members)
	}
	// Already a voter: returns at once, without asking anyone.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := second.node.Join(ctx, []string{"127.0.0.1:1"}); err != nil {
		t.Fatalf("join when already a voter: %v", err)
	}
	// Both know where the leader serves HTTP; the follower refuses
	// linearizable reads.
	both := []*testNode{first, second}
	waitFor(t, 10*time.Second, "leader HTTP address known on both, follower refuses reads", func() bool {
		ls := leaders(both)
		if len(ls) != 1 {
			return false
		}
		for _, tn := range both {
			if addr, err := tn.node.LeaderHTTPAddr(); err != nil || addr != ls[0].cfg.HTTPAdvertiseAddr() {
				return false
			}
			if tn != ls[0] {
				if _, err := tn.node.LinearizableRead(ctxT(t)); !errors.Is(err, node.ErrNotLeader) {
					return false
				}
			}
		}
		return true
	})
}

// TestJoinRetriesRefusalUntilDone: a refusal is retried with backoff (the
// cluster side may be repaired meanwhile) until ctx is done; the error then
// carries the last answer.
func TestJoinRetriesRefusalUntilDone(t *testing.T) {
	log := testLogger(t)
	var calls atomic.Int32
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"code":"invalid_argument","field":"id","message":"id is reserved"}}`)
	}))
	defer refuse.Close()

	var tn *testNode
	withFreePorts(t, 1, func(addrs []string) error {
		tn = newTestNode(t, log, "n9", t.TempDir())
		tn.cfg.RaftAddr = addrs[0]
		tn.cfg.Join = []string{refuse.Listener.Addr().String()}
		return tn.start()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tn.node.Join(ctx, tn.cfg.Join) }()
	waitFor(t, 10*time.Second, "the refusal asked again", func() bool { return calls.Load() >= 2 })
	cancel()
	err := <-done
	var je *node.JoinError
	if !errors.As(err, &je) || !errors.Is(err, context.Canceled) || je.Status != 400 || je.Field != "id" || je.Message != "id is reserved" || je.Temporary() {
		t.Fatalf("want the cancellation and the last JoinError, got %#v", err)
	}
	// Never bootstrapped: no leader, not ready.
	if err := tn.node.Ready(); !errors.Is(err, node.ErrNoLeader) {
		t.Fatalf("ready: %v", err)
	}
}

// metricsReg is shared by every run of TestMetrics: hashicorp/raft's
// go-metrics sink is installed once per process, on the first registry
// given to a node.
var metricsReg = prometheus.NewRegistry()

func TestMetrics(t *testing.T) {
	log := testLogger(t)
	reg := metricsReg
	var tn *testNode
	withFreePorts(t, 1, func(addrs []string) error {
		tn = newTestNode(t, log, "n1", t.TempDir())
		tn.cfg.RaftAddr = addrs[0]
		tn.reg = reg
		return tn.start()
	})
	waitFor(t, 10*time.Second, "leader", tn.node.IsLeader)
	res := upsert(t, tn.node, "a")

	if v := counterValue(t, reg, "metastore_node_is_leader"); v != 1 {
		t.Fatalf("is_leader = %v", v)
	}
	waitFor(t, 5*time.Second, "leader change counted", func() bool {
		return counterValue(t, reg, "metastore_node_leader_changes_total") >= 1
	})
	names := gatheredNames(t, reg)
	for _, want := range []string{
		"metastore_node_apply_duration_seconds", "metastore_node_raft_term", "metastore_node_raft_commit_index",
		"metastore_node_fsm_applied_index", "metastore_node_raft_last_snapshot_index",
		"metastore_node_fsm_committed_index", "metastore_node_fsm_commits_total", "metastore_node_fsm_committed_entries_total",
		"metastore_node_fsm_file_ops_total", "metastore_node_fsm_blob_filter_spared_total", "metastore_node_fsm_blob_filter_builds_total",
		"metastore_node_fsm_blob_filter_keys", "metastore_node_raft_log_cache_entries", "metastore_node_raft_log_cache_bytes",
		"metastore_node_fsm_commit_duration_seconds",
	} {
		if !names[want] {
			t.Errorf("metric %s missing", want)
		}
	}
	// The write above is committed within the commit interval: the
	// histogram of commit times has it, under reason "due".
	waitFor(t, 5*time.Second, "a commit timed", func() bool {
		return histogramCount(t, reg, "metastore_node_fsm_commit_duration_seconds", "reason", "due") >= 1
	})
	// hashicorp/raft's own metrics arrive through the go-metrics bridge.
	raftMetrics := 0
	for name := range names {
		if strings.HasPrefix(name, "metastore_raft_") {
			raftMetrics++
		}
	}
	if raftMetrics == 0 {
		t.Errorf("no metastore_raft_* metrics; got %v", names)
	}
	if v := counterValue(t, reg, "metastore_node_fsm_applied_index"); v < float64(res.Index) {
		t.Errorf("applied index gauge %v < %d", v, res.Index)
	}
	// Shutdown unregisters the node's collectors, so a restarted node can
	// register on the same registry.
	tn2 := tn.restarted()
	tn2.reg = reg
	tn.stop()
	if err := tn2.start(); err != nil {
		t.Fatalf("restart on the same registry: %v", err)
	}
}

// histogramCount is the sample count of the series of histogram name
// whose label is value.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, label, value string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func gatheredNames(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// counterValue returns the value of the single unlabelled counter or gauge
// called name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
