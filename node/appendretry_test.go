package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// gapFollower is a hashicorp/raft follower in the state a rebuilt member
// reaches when an append crosses its snapshot install: a snapshot at index
// 10 (term 1), then entry 11 in its log, and no entry 10.
type gapFollower struct {
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	fsm    *recordingFSM
	leader *raft.NetworkTransport // the transport the test sends from
}

// recordingFSM sends the index of every entry it applies on applied.
type recordingFSM struct {
	applied chan uint64
}

func (f *recordingFSM) Apply(l *raft.Log) any {
	f.applied <- l.Index
	return nil
}

func (f *recordingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }

func (f *recordingFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	_, err := io.Copy(io.Discard, rc)
	return err
}

func newGapFollower(t *testing.T) *gapFollower {
	t.Helper()
	logger := hclog.NewNullLogger()
	leader, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Close() })
	trans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}

	// The follower is a non-voter: it never campaigns, so its term stays
	// the test's.
	configuration := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "leader", Address: leader.LocalAddr()},
		{Suffrage: raft.Nonvoter, ID: "follower", Address: trans.LocalAddr()},
	}}
	snaps := raft.NewInmemSnapshotStore()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 10, 1, configuration, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("the state up to entry 10")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	store := raft.NewInmemStore()
	if err := store.StoreLog(&raft.Log{Index: 11, Term: 1, Type: raft.LogCommand, Data: []byte("11")}); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}

	conf := raft.DefaultConfig()
	conf.LocalID = "follower"
	conf.Logger = logger
	fsm := &recordingFSM{applied: make(chan uint64, 16)}
	r, err := raft.NewRaft(conf, fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Shutdown().Error()
		trans.Close()
	})
	if got := r.LastIndex(); got != 11 {
		t.Fatalf("follower's last index %d, want 11", got)
	}
	return &gapFollower{raft: r, trans: trans, fsm: fsm, leader: leader}
}

// appendAfterSnapshot is what the leader sends when its next index for the
// follower is 11: the previous entry is the snapshot's last (10, term 1).
func (g *gapFollower) appendAfterSnapshot(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(g.leader.LocalAddr())},
		Term:              term,
		PrevLogEntry:      10,
		PrevLogTerm:       1,
		Entries:           []*raft.Log{{Index: 11, Term: term, Type: raft.LogCommand, Data: []byte("11")}, {Index: 12, Term: term, Type: raft.LogCommand, Data: []byte("12")}},
		LeaderCommitIndex: 12,
	}
}

// TestAppendRetriedPastSnapshotGap: a follower that installed a snapshot at
// index 10 and then got entry 11 refuses an append whose previous entry is
// 10, though it holds that state (hashicorp/raft #205); the leader would
// step back, resend its snapshot at 10 and be refused again, forever. The
// transport the node gives Raft retries from the follower's last entry,
// and the follower takes the entries after it.
func TestAppendRetriedPastSnapshotGap(t *testing.T) {
	g := newGapFollower(t)
	req := g.appendAfterSnapshot(1)

	// hashicorp/raft alone: refused, which is what makes the loop.
	var resp raft.AppendEntriesResponse
	if err := g.leader.AppendEntries("follower", g.trans.LocalAddr(), req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Success || !resp.NoRetryBackoff || resp.LastLog != 11 {
		t.Fatalf("hashicorp/raft's follower answered %+v; this test expects the refusal of issue #205 (success false, no back-off, last log 11)", resp)
	}

	terms := map[uint64]uint64{10: 1, 11: 1, 12: 1}
	var retries []string
	trans := retryPastGap{heartbeatGate: &heartbeatGate{NetworkTransport: g.leader},
		termAt: func(i uint64) (uint64, bool) { term, ok := terms[i]; return term, ok },
		retried: func(id raft.ServerID, prev, from uint64, ok bool) {
			if id != "follower" || prev != 10 || from != 11 || !ok {
				t.Errorf("retried(%s, %d, %d, %v), want (follower, 10, 11, true)", id, prev, from, ok)
			}
			retries = append(retries, string(id))
		}}
	resp = raft.AppendEntriesResponse{}
	if err := trans.AppendEntries("follower", g.trans.LocalAddr(), req, &resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Success {
		t.Fatalf("the append was refused after the retry: %+v", resp)
	}
	if len(retries) != 1 {
		t.Fatalf("%d retries, want 1", len(retries))
	}
	if got := g.raft.LastIndex(); got != 12 {
		t.Fatalf("follower's last index %d, want 12", got)
	}
	// The follower commits and applies entry 11 (already in its log) and
	// entry 12, in order.
	for _, want := range []uint64{11, 12} {
		select {
		case got := <-g.fsm.applied:
			if got != want {
				t.Fatalf("the follower applied entry %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the follower did not apply entry %d", want)
		}
	}
}

// TestAppendRetryKeepsConflictRefused: when the follower's last entry is
// of another term than the leader's entry at that index, the logs differ
// there, and the retry is refused like the original append: the leader is
// never told the follower holds entries it does not.
func TestAppendRetryKeepsConflictRefused(t *testing.T) {
	g := newGapFollower(t)
	// A leader of term 2 whose entry 11 is of term 2: the follower's entry
	// 11 (term 1) is not the leader's.
	terms := map[uint64]uint64{10: 1, 11: 2, 12: 2}
	retried := 0
	trans := retryPastGap{heartbeatGate: &heartbeatGate{NetworkTransport: g.leader},
		termAt: func(i uint64) (uint64, bool) { term, ok := terms[i]; return term, ok },
		retried: func(_ raft.ServerID, _, _ uint64, ok bool) {
			retried++
			if ok {
				t.Error("the retry was accepted")
			}
		}}
	var resp raft.AppendEntriesResponse
	if err := trans.AppendEntries("follower", g.trans.LocalAddr(), g.appendAfterSnapshot(2), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Success || retried != 1 {
		t.Fatalf("answer %+v after %d retries; want a refusal after 1", resp, retried)
	}
	if got := g.raft.LastIndex(); got != 11 {
		t.Fatalf("follower's last index %d, want 11", got)
	}

	// A follower whose last index the leader has no term for is not retried.
	terms = map[uint64]uint64{10: 1}
	resp = raft.AppendEntriesResponse{}
	if err := trans.AppendEntries("follower", g.trans.LocalAddr(), g.appendAfterSnapshot(2), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Success || retried != 1 {
		t.Fatalf("answer %+v after %d retries; want a refusal without a retry", resp, retried)
	}
}

// gatedFSM is a follower's state machine whose first restore waits on
// release after saying so on entered; it counts restores and sends the
// index of every entry it applies on applied.
type gatedFSM struct {
	restores atomic.Int32
	entered  chan struct{}
	release  chan struct{}
	applied  chan uint64
}

func (f *gatedFSM) Apply(l *raft.Log) any {
	select {
	case f.applied <- l.Index:
	default: // the test reads only the indexes it waits for
	}
	return nil
}

func (f *gatedFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }

func (f *gatedFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if f.restores.Add(1) == 1 {
		close(f.entered)
		<-f.release
	}
	_, err := io.Copy(io.Discard, rc)
	return err
}

// observedTransport hands Raft the RPCs of its transport through one
// goroutine, telling appends with entries on appends first.
type observedTransport struct {
	*raft.NetworkTransport
	rpcs    chan raft.RPC
	appends chan *raft.AppendEntriesRequest
}

func (o *observedTransport) Consumer() <-chan raft.RPC { return o.rpcs }

func observe(t *testing.T, trans *raft.NetworkTransport) *observedTransport {
	o := &observedTransport{NetworkTransport: trans, rpcs: make(chan raft.RPC), appends: make(chan *raft.AppendEntriesRequest, 64)}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case rpc := <-trans.Consumer():
				if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && len(req.Entries) > 0 {
					select {
					case o.appends <- req:
					default:
					}
				}
				select {
				case o.rpcs <- rpc:
				case <-done:
					return
				}
			case <-done:
				return
			}
		}
	}()
	return o
}

// startLeader starts a member alone, bootstrapped, and waits until it leads
// and has written its member record.
func startLeader(t *testing.T, tune func(*config.Config)) *Node {
	t.Helper()
	n := startAlone(t, tune)
	n.Lead(nil)
	deadline := time.Now().Add(10 * time.Second)
	for n.readyTerm.Load() == 0 || n.fsm.AppliedIndex() == 0 { // barrier done and own record written
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond) // polling, not synchronisation
	}
	return n
}

// startAlone starts a member alone, bootstrapped, with short Raft
// timeouts (then tune), on a free port, shut down at the test's end; it
// does not call Lead.
func startAlone(t *testing.T, tune func(*config.Config)) *Node {
	t.Helper()
	var n *Node
	var f *fsm.FSM
	for attempt := 0; n == nil; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		cfg := config.DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAddr = "n1", t.TempDir(), addr, "127.0.0.1:1"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		tune(&cfg)
		if f, err = fsm.Open(cfg.FSMPath(), nil); err != nil {
			t.Fatal(err)
		}
		n, err = New(cfg, Deps{FSM: f})
		if err != nil {
			f.Close()
			if errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
				continue
			}
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := n.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		f.Close()
	})
	return n
}

// TestMemberAddedBackCatchesUpAfterACrossedAppend replays, step by step,
// what made TestCorruptMemberDetectedAndRebuilt fail under load: a member
// with an empty log is added to a leader whose log is compacted behind a
// snapshot, so the leader sends it the snapshot; while the member installs
// it, an append of the same leader arrives (in the rebuild, the last one
// of the replication to the member's previous incarnation, stopped by its
// removal) with the entry after the snapshot. The member takes it once the
// snapshot is installed; the leader's own replication then resumes right
// after the snapshot, and without the retry (appendretry.go) the member
// refuses it, the leader sends the snapshot again and again, and the
// member never receives another entry.
func TestMemberAddedBackCatchesUpAfterACrossedAppend(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.TrailingLogs = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	upsert := func(id string) uint64 {
		t.Helper()
		_, index, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: id, RaftAddr: id + ":1", HTTPAddr: id + ":2"})
		if err != nil {
			t.Fatalf("propose: %v", err)
		}
		return index
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		upsert(id)
	}
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("no snapshot: %v", err)
	}
	snap := metas[0]
	if first, err := n.logs.FirstIndex(); err != nil || first <= 1 {
		t.Fatalf("the leader's log starts at %d (%v); the test needs it compacted", first, err)
	}

	// The member: hashicorp/raft with an empty log, whose first restore
	// waits for the test.
	logger := hclog.NewNullLogger()
	ftrans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	obs := observe(t, ftrans)
	member := &gatedFSM{entered: make(chan struct{}), release: make(chan struct{}), applied: make(chan uint64, 64)}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(member.release) }) }
	conf := raft.DefaultConfig()
	conf.LocalID = "f"
	conf.Logger = logger
	store := raft.NewInmemStore()
	fr, err := raft.NewRaft(conf, member, store, store, raft.NewInmemSnapshotStore(), obs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release()
		_ = fr.Shutdown().Error()
		ftrans.Close()
	})

	// A non-voter: the leader needs no quorum with it.
	if err := n.raft.AddNonvoter("f", ftrans.LocalAddr(), 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-member.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader sent the member no snapshot")
	}

	// The crossing append: the entry after the snapshot, from the leader.
	var next raft.Log
	if err := n.logs.GetLog(snap.Index+1, &next); err != nil {
		t.Fatal(err)
	}
	crossing := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(n.trans.LocalAddr())},
		Term:              n.raft.CurrentTerm(),
		PrevLogEntry:      snap.Index,
		PrevLogTerm:       snap.Term,
		Entries:           []*raft.Log{&next},
		LeaderCommitIndex: n.raft.CommitIndex(),
	}
	sender, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	crossed := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		err := sender.AppendEntries("f", ftrans.LocalAddr(), crossing, &resp)
		if err == nil && !resp.Success {
			err = fmt.Errorf("refused: %+v", resp)
		}
		crossed <- err
	}()
	// Raft takes it once the snapshot is installed, before the leader's
	// next append, which is sent only after the install's answer.
	for seen := false; !seen; {
		select {
		case req := <-obs.appends:
			seen = req.PrevLogEntry == snap.Index
		case <-time.After(20 * time.Second):
			t.Fatal("the crossing append did not reach the member")
		}
	}
	release()
	select {
	case err := <-crossed:
		if err != nil {
			t.Fatalf("the crossing append: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the crossing append got no answer")
	}

	// The member receives and applies the leader's next command, having
	// been sent the snapshot once.
	want := upsert("e")
	for got := uint64(0); got != want; {
		select {
		case got = <-member.applied:
		case <-time.After(20 * time.Second):
			t.Fatalf("the member never applied entry %d; snapshots restored: %d (last index %d, the leader's %d)",
				want, member.restores.Load(), fr.LastIndex(), n.raft.LastIndex())
		}
	}
	if got := member.restores.Load(); got != 1 {
		t.Fatalf("the member restored %d snapshots, want 1", got)
	}
}
