package node

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// gatedReader delivers r's bytes only once release is closed; reading is
// closed at its first Read.
type gatedReader struct {
	r       io.Reader
	once    sync.Once
	reading chan struct{}
	release chan struct{}
	// fail, when set, is what every read answers once released: the
	// restore then fails while Raft copies the backup.
	fail error
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.once.Do(func() { close(g.reading) })
	<-g.release
	if g.fail != nil {
		return 0, g.fail
	}
	return g.r.Read(p)
}

// within runs f and returns its value, or fails the test if it has not
// returned by ctx's deadline.
func within[T any](t *testing.T, ctx context.Context, what string, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s did not return: %v", what, ctx.Err())
		panic("unreachable")
	}
}

// TestStatusAnswersWhileRaftMainGoroutineIsBlocked: Status and Ready
// answer promptly, with the configuration and the member records as they
// were, while Raft's main goroutine is blocked, and Status shows the
// restored records afterwards. A backup restore (Raft.Restore) copies its
// snapshot on the main goroutine; here its reader does not deliver until
// released. (hashicorp/raft before v1.1.2 answered GetConfiguration from
// that goroutine; Status must not depend on it.)
func TestStatusAnswersWhileRaftMainGoroutineIsBlocked(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		if _, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: id, RaftAddr: id + ".example:1", HTTPAddr: id + ".example:2"}); err != nil {
			t.Fatalf("propose: %v", err)
		}
	}
	meta, prepared := preparedBackup(ctx, t, n)
	gate := &gatedReader{r: prepared, reading: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	t.Cleanup(release) // before the node's shutdown, registered earlier
	restored := make(chan error, 1)
	go func() { restored <- n.raft.Restore(meta, gate, time.Minute) }()
	select {
	case <-gate.reading: // the main goroutine copies the snapshot (restoreUserSnapshot)
	case <-ctx.Done():
		t.Fatal("Raft never read the backup")
	}

	prompt, cancelPrompt := context.WithTimeout(ctx, 5*time.Second)
	defer cancelPrompt()
	st := within(t, prompt, "Status", n.Status)
	if st.State != "leader" || st.LeaderID != "n1" || st.LeaderHTTPAddr != "127.0.0.1:1" {
		t.Fatalf("status while the main goroutine is blocked: %+v", st)
	}
	want := []MemberStatus{
		{ID: "a", RaftAddr: "a.example:1", HTTPAddr: "a.example:2", Suffrage: "none"},
		{ID: "b", RaftAddr: "b.example:1", HTTPAddr: "b.example:2", Suffrage: "none"},
		{ID: "n1", RaftAddr: n.cfg.RaftAddr, HTTPAddr: "127.0.0.1:1", Suffrage: "voter", Leader: true},
	}
	if !equalMembers(st.Members, want) {
		t.Fatalf("members while the main goroutine is blocked: %+v, want %+v", st.Members, want)
	}
	if err := within(t, prompt, "Ready", n.Ready); err != nil {
		t.Fatalf("ready while the main goroutine is blocked: %v", err)
	}

	release()
	select {
	case err := <-restored:
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the restore did not finish once released")
	}
	// The backup carries no member records: the configuration is the
	// same, the records are gone.
	want = []MemberStatus{{ID: "n1", RaftAddr: n.cfg.RaftAddr, Suffrage: "voter", Leader: true}}
	if st := n.Status(); !equalMembers(st.Members, want) {
		t.Fatalf("members after the restore: %+v, want %+v", st.Members, want)
	}
}

func equalMembers(a, b []MemberStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
