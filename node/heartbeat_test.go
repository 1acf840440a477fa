package node

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/freeport"
)

// TestHeartbeatsReachTheMainGoroutine sends a heartbeat of a newer term to a
// member's transport, built by newTransport, after Raft has asked for the
// heartbeat fast path. The heartbeat must come out of Consumer(), the
// channel Raft's main goroutine reads, and never reach the fast-path
// handler: a heartbeat handled beside the leader loop lets a deposed leader
// append entries under the new leader's term (heartbeat.go).
func TestHeartbeatsReachTheMainGoroutine(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.RaftAddr = freeport.Addr(t)
	logger := hclog.NewNullLogger()
	recv, _, err := newTransport(cfg, logger, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	fastPath := make(chan raft.RPC, 1)
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		fastPath <- rpc
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})

	send, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	// The shape NetworkTransport recognises as a heartbeat: a term and a
	// leader, no previous entry, no entries, no commit index.
	hb := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("n2"), Addr: []byte(send.LocalAddr())},
		Term:      7,
	}
	sent := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sent <- send.AppendEntries("n1", recv.LocalAddr(), hb, &resp)
	}()

	select {
	case rpc := <-recv.Consumer():
		req, ok := rpc.Command.(*raft.AppendEntriesRequest)
		if !ok || req.Term != 7 || len(req.Entries) != 0 {
			t.Fatalf("consumer got %#v, want the heartbeat", rpc.Command)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
	case <-fastPath:
		t.Fatal("the heartbeat was handled by the fast-path handler, beside Raft's main goroutine")
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat reached neither the consumer nor the handler")
	}
	if err := <-sent; err != nil {
		t.Fatalf("heartbeat not answered: %v", err)
	}
}
