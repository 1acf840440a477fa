package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

func TestMapRaftError(t *testing.T) {
	for _, tc := range []struct {
		in   error
		want []error
	}{
		{raft.ErrNotLeader, []error{ErrNotLeader}},
		{raft.ErrEnqueueTimeout, []error{ErrTryAgain}},
		{raft.ErrLeadershipTransferInProgress, []error{ErrTryAgain}},
		{raft.ErrAbortedByRestore, []error{ErrTryAgain}},
		{raft.ErrLeadershipLost, []error{ErrUnknownOutcome}},
		{raft.ErrRaftShutdown, []error{ErrUnknownOutcome, ErrShutdown}},
		{context.DeadlineExceeded, []error{ErrUnknownOutcome, context.DeadlineExceeded}},
		{context.Canceled, []error{ErrUnknownOutcome, context.Canceled}},
		{errors.New("disk on fire"), []error{ErrUnknownOutcome}},
	} {
		t.Run(tc.in.Error(), func(t *testing.T) {
			got := mapRaftError(tc.in)
			for _, w := range tc.want {
				if !errors.Is(got, w) {
					t.Errorf("mapRaftError(%v) = %v, not %v", tc.in, got, w)
				}
			}
			if errors.Is(got, ErrNotLeader) != errors.Is(tc.in, raft.ErrNotLeader) {
				t.Errorf("mapRaftError(%v) = %v: ErrNotLeader only for raft.ErrNotLeader", tc.in, got)
			}
		})
	}
}

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var l hclog.Logger = newHCLogger(base, "raft")
	l = l.Named("net").With("peer", "n2")
	if l.Name() != "raft.net" || l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Fatalf("name %q debug %v info %v level %v", l.Name(), l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	l.Debug("hidden")
	l.Warn("failed to contact", "id", "n3", "error", fmt.Errorf("boom"), "servers", hclog.Fmt("%d+%d", 1, 2), "took", 1500*time.Millisecond)
	l.StandardLogger(nil).Print("from std logger")
	out := buf.String()
	for _, want := range []string{"level=WARN", `msg="failed to contact"`, "peer=n2", "logger=raft.net", "id=n3", "error=boom", "servers=1+2", "took=1.5s", "from std logger"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("debug line logged at info level:\n%s", out)
	}
	if got := l.ResetNamed("x").Name(); got != "x" {
		t.Errorf("ResetNamed: %q", got)
	}
}

// After a backup restore through Raft the FSM's own applied index restarts
// low while older commands stay in the log; reads and readiness must not
// wait for those commands.
func TestReadsAfterUserRestoreDoNotWaitForOldEntries(t *testing.T) {
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
	n.Lead(nil)
	t.Cleanup(func() {
		if err := n.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		f.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n.readyTerm.Load() == 0 || n.fsm.AppliedIndex() == 0 { // barrier done and own record written
		if ctx.Err() != nil {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond) // polling, not synchronisation
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: id, RaftAddr: id + ":1", HTTPAddr: id + ":2"}); err != nil {
			t.Fatalf("propose: %v", err)
		}
	}
	before := f.AppliedIndex()

	meta, prepared := preparedBackup(ctx, t, n)
	if err := n.raft.Restore(meta, prepared, 5*time.Second); err != nil {
		t.Fatalf("raft restore: %v", err)
	}
	if f.AppliedIndex() >= before {
		t.Skipf("the FSM kept its applied index (%d >= %d) across the restore; nothing to check", f.AppliedIndex(), before)
	}
	if err := n.Ready(); err != nil {
		t.Fatalf("ready after restore: %v", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if _, err := n.LinearizableRead(rctx); err != nil {
		t.Fatalf("linearizable read after restore: %v", err)
	}
}

// preparedBackup takes a backup of n's state and prepares it for Raft's
// Restore, as the restore endpoint does: the snapshot's metadata and
// content.
func preparedBackup(ctx context.Context, t *testing.T, n *Node) (*raft.SnapshotMeta, *bytes.Buffer) {
	t.Helper()
	var backup bytes.Buffer
	if _, err := n.WriteBackup(ctx, &backup, nil); err != nil {
		t.Fatalf("backup: %v", err)
	}
	br := bufio.NewReader(&backup)
	info, err := ReadBackupInfo(br)
	if err != nil {
		t.Fatal(err)
	}
	var prepared bytes.Buffer
	if _, err := fsm.PrepareRestore(br, &prepared, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: int64(prepared.Len())}, &prepared
}
