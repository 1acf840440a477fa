package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// TestBootstrapWithAnAppendWaiting starts a new member of a two-member
// initial cluster whose other member already leads, in term 2, and sends
// the new member its first append as soon as its Raft address accepts
// connections: the append waits at the transport while the member opens
// its stores and starts Raft. The member must start. When the bootstrap
// came after Raft's start (Raft.BootstrapCluster), Raft often handled the
// append first, which set its term, and the bootstrap failed with
// "bootstrap only works on new clusters": a member of a static cluster
// that started later than the others exited (TestCorruptMemberDetected-
// AndRebuilt under load, 2 of 24 runs). The start is repeated because
// which of the two came first was a matter of scheduling.
func TestBootstrapWithAnAppendWaiting(t *testing.T) {
	logger := hclog.NewNullLogger()
	leader, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	for i := range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String() // free a moment ago
		l.Close()
		cfg := config.DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.RaftAddr, cfg.HTTPAddr = "n1", t.TempDir(), addr, "127.0.0.1:1"
		cfg.InitialCluster = []config.Peer{{ID: "n1", RaftAddr: addr}, {ID: "n2", RaftAddr: string(leader.LocalAddr())}}

		// The leader's first append: its entry 1 is the bootstrap's.
		req := &raft.AppendEntriesRequest{
			RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(leader.LocalAddr())},
			Term:              2,
			PrevLogEntry:      1,
			PrevLogTerm:       1,
			LeaderCommitIndex: 1,
		}
		stop := make(chan struct{})
		answered := make(chan raft.AppendEntriesResponse, 1)
		go func() {
			for {
				var resp raft.AppendEntriesResponse
				if err := leader.AppendEntries("n1", raft.ServerAddress(addr), req, &resp); err == nil {
					answered <- resp
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond): // the address is not listening yet
				}
			}
		}()

		f, err := fsm.Open(cfg.FSMPath(), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(cfg, Deps{FSM: f})
		if err != nil {
			close(stop)
			f.Close()
			t.Fatalf("start %d: %v", i, err)
		}
		select {
		case resp := <-answered:
			if !resp.Success {
				t.Errorf("start %d: the member refused the leader's append: %+v", i, resp)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("start %d: the leader's append got no answer", i)
		}
		close(stop)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		cancel()
		f.Close()
		if t.Failed() {
			return
		}
	}
}
