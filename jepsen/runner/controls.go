package runner

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/nemesis"
)

// A Control is a positive control of the suite: a scenario run with one
// unsafe switch of the faultinject build on, which must make a named
// checker fail for the reason it exists. TestPositiveControls and
// `jepsen control NAME` run the same definitions (Controls), so what the
// documentation prints is what CI runs.
type Control struct {
	// Name is the control's name on the command line ("gc-skip-mark").
	Name string
	// Breaks says what the switch breaks.
	Breaks   string
	Scenario Scenario
	// Checker must fail, its report naming one of Reasons; or, when
	// Checker is empty, one of the checkers in Any must fail naming one
	// of its reasons.
	Checker string
	Reasons []string
	Any     map[string][]string
}

// Controls returns the positive controls.
func Controls() []Control {
	return []Control{
		{
			Name:   "stale-reads",
			Breaks: "reads served by the member asked, without leader verification",
			Scenario: Scenario{Name: "control-stale-reads", Duration: 20 * time.Second,
				Faults: faults("partition-isolate-follower"),
				Env:    []string{"METASTORE_UNSAFE_STALE_READS=1"}},
			Checker: "linearizable", Reasons: []string{"stale read"},
		},
		{
			Name:   "drop-acks",
			Breaks: "acks answered ok and not applied",
			Scenario: Scenario{Name: "control-drop-acks", Duration: 20 * time.Second,
				Env: []string{"METASTORE_UNSAFE_DROP_ACKS=1"}},
			Checker: "acks", Reasons: []string{"holds no ack"},
		},
		{
			Name:   "keep-unsynced-state",
			Breaks: "the state machine file trusted after a power loss",
			// The power loss comes after 12s of writes, so that every
			// member has hundreds of unsynced pages to tear (211-335 in
			// six runs): at 1s some had only 17-26, such a member came
			// back whole in two of five runs, and one CI run, most likely
			// with all three whole, did not fire.
			Scenario: Scenario{Name: "control-keep-unsynced-state", Duration: 20 * time.Second, FirstFault: 12 * time.Second,
				HealthTimeout: 20 * time.Second,
				Faults:        faults("power-loss-all-torn"),
				Env:           []string{"METASTORE_UNSAFE_KEEP_UNSYNCED_STATE=1"}},
			// The torn file does not open, or opens and fails later, or
			// opens and holds another state than the other members'.
			Any: map[string][]string{"nemesis": {"is corrupt"}, "logs": {"panic"},
				"convergence": {" hash ", "fsck:"}},
		},
		{
			Name:   "gc-skip-mark",
			Breaks: "GC deletes before the deleting mark",
			// Every ack of a state task references again a blob the store
			// records as a GC candidate, at a random age past the grace
			// period, and keeps it in its manifest past the delete. The
			// collector lists every candidate at once (1000, the most: a
			// batch of 100 left a backlog of older candidates ahead of the
			// reused ones) every 500ms, then keeps listing, for up to 5s,
			// until one of the listed blobs is referenced again
			// (gc/unsafe_on.go).
			Scenario: Scenario{Name: "control-gc-skip-mark", Duration: 20 * time.Second,
				ReuseProb: 1, ReuseHold: 8 * time.Second, ReuseWindow: time.Second,
				GCInterval: 500 * time.Millisecond, GCBatch: 1000,
				Env: []string{"METASTORE_UNSAFE_GC_SKIP_MARK=5s"}},
			// A delete of a protected blob, or a GET of a referenced blob
			// answered 404, whichever the run shows first.
			Checker: "gc-safety", Reasons: []string{"while protected", "referenced blob"},
		},
	}
}

// ControlNamed returns the control named name.
func ControlNamed(name string) (Control, error) {
	var names []string
	for _, c := range Controls() {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return Control{}, fmt.Errorf("runner: no control %q (controls: %s)", name, strings.Join(names, ", "))
}

func faults(names ...string) []func() nemesis.Fault {
	out := make([]func() nemesis.Fault, len(names))
	for i, n := range names {
		out[i] = catalogFault(n)
	}
	return out
}

// Fired reports whether res shows the control firing: its checker failed
// naming one of its reasons. If not, it says why. A checker that failed
// for another reason is reported as not fired, with that report.
func (c Control) Fired(res *ScenarioResult) (bool, string) {
	if res.Err != nil {
		return false, fmt.Sprintf("the scenario did not run: %v", res.Err)
	}
	report := func(v checker.Verdict) string {
		return strings.Join(append([]string{v.Summary}, v.Problems...), "\n")
	}
	if c.Checker == "" {
		for _, v := range res.Verdicts {
			reasons, ok := c.Any[v.Name]
			if ok && !v.OK && slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(report(v), r) }) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("none of the checkers %v failed for its reason with the unsafe switch on", c.Any)
	}
	for _, v := range res.Verdicts {
		if v.Name != c.Checker {
			continue
		}
		if v.OK {
			return false, fmt.Sprintf("%s passed with the unsafe switch on: the checker cannot fail", c.Checker)
		}
		if !slices.ContainsFunc(c.Reasons, func(r string) bool { return strings.Contains(report(v), r) }) {
			return false, fmt.Sprintf("%s failed without naming any of %q: %s", c.Checker, c.Reasons, v.Summary)
		}
		return true, ""
	}
	return false, fmt.Sprintf("no verdict of %s", c.Checker)
}
