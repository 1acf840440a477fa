package cluster

import (
	"context"
	"os"
	"testing"
	"time"
)

// SkipUnlessSupported skips the test, saying why, when the suite cannot
// run here (not root, no ip netns, no iptables), and in -short mode.
func SkipUnlessSupported(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster of processes in network namespaces; skipped in -short mode")
	}
	if os.Getenv("METASTORE_JEPSEN") == "" {
		t.Skip("starts clusters in network namespaces (root, ip, iptables; minutes of runtime): set METASTORE_JEPSEN=1 to run it")
	}
	if err := Supported(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// StartT starts a cluster for a test: it skips the test when the suite
// cannot run here, logs progress with t.Logf, closes the cluster when the
// test ends and removes the work directory if the test passed. If it
// failed (or JEPSEN_KEEP is set), the work directory (node logs, data, S3
// request log) is kept and its path logged, with the tail of every node
// log. JEPSEN_RACE=1 builds the members with the race detector.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	SkipUnlessSupported(t)
	if os.Getenv("JEPSEN_RACE") == "1" {
		opts.Race = true
	}
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) {
			t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Members() {
				if m.Starts() > 0 {
					t.Logf("--- %s log tail (%s):\n%s", m.ID, m.LogPath, m.LogTail(3000))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
		if t.Failed() || os.Getenv("JEPSEN_KEEP") != "" {
			t.Logf("work directory kept: %s", c.WorkDir())
		} else if opts.WorkDir == "" {
			_ = os.RemoveAll(c.WorkDir())
		}
	})
	return c
}
