package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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
