package runner

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/lossyfs"
	"github.com/metastore/metastore/jepsen/nemesis"
)

// The consistency suite's tiers run as tests only when asked:
// METASTORE_JEPSEN lists what to run ("short", "controls", or both,
// comma-separated). They need root and ip netns (cluster.Supported), take
// minutes, and are too heavy to run alongside the rest of `go test ./...`
// on a 2-core machine; .ci/run runs them as a step of their own:
//
//	METASTORE_JEPSEN=short,controls go test -count=1 -timeout 40m -run 'TestShortTier|TestPositiveControls' ./jepsen/runner/
const envJepsen = "METASTORE_JEPSEN"

func wants(t *testing.T, what string) {
	t.Helper()
	if !strings.Contains(","+os.Getenv(envJepsen)+",", ","+what+",") {
		t.Skipf("set %s=%s to run (needs root and ip netns; takes minutes)", envJepsen, what)
	}
	if err := cluster.Supported(); err != nil {
		t.Fatalf("%s=%s but the suite cannot run here: %v", envJepsen, what, err)
	}
}

// logWriter sends the report to t.Log line by line and keeps it.
type logWriter struct {
	t   *testing.T
	buf bytes.Buffer
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(line)
	}
	return len(p), nil
}

func newTestRunner(t *testing.T, out *logWriter) *Runner {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := New(ctx, Options{Out: out, OutDir: os.Getenv("METASTORE_JEPSEN_OUT")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestShortTier runs the short tier: every scenario must pass.
func TestShortTier(t *testing.T) {
	wants(t, "short")
	out := &logWriter{t: t}
	r := newTestRunner(t, out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, res := range r.RunTier(ctx, ShortTier()) {
		if !res.Passed() {
			t.Errorf("scenario %s failed (artifacts in %s)", res.Name, res.Dir)
		}
	}
}

// TestPositiveControls proves the checkers can fail: each unsafe switch of
// the faultinject build (Controls) must make the suite report a violation
// of the invariant it breaks, with a reason naming it, in every run.
func TestPositiveControls(t *testing.T) {
	wants(t, "controls")
	out := &logWriter{t: t}
	r := newTestRunner(t, out)
	for _, c := range Controls() {
		t.Run(c.Name, func(t *testing.T) {
			for _, mk := range c.Scenario.Faults {
				if dn, ok := mk().(nemesis.DiskNeeder); ok && dn.NeedsLossyDisk() {
					if err := lossyfs.Supported(); err != nil {
						t.Skipf("the control's faults need lossy disks: %v", err)
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			res := r.Run(ctx, c.Scenario)
			r.Report(res)
			if fired, why := c.Fired(res); !fired {
				t.Fatal(why)
			}
		})
	}
}
