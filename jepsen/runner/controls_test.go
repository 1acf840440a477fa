package runner

import (
	"testing"

	"github.com/metastore/metastore/jepsen/checker"
)

// TestControlFired: a control fires only when one of its checkers failed
// for one of the reasons it names; keep-unsynced-state counts a member
// refused at start, a panic, and a torn file that opened into another
// state (divergent hashes, fsck problems), but not an unhealthy cluster
// or a checker that failed for something else.
func TestControlFired(t *testing.T) {
	c, err := ControlNamed("keep-unsynced-state")
	if err != nil {
		t.Fatal(err)
	}
	fail := func(name, problem string) checker.Verdict {
		return checker.Verdict{Name: name, Summary: "1 violation(s); first: " + problem, Problems: []string{problem}}
	}
	for _, tc := range []struct {
		name     string
		verdicts []checker.Verdict
		fired    bool
	}{
		{"refused at start", []checker.Verdict{fail("nemesis", "heal: n1 exited during start: fsm.db is corrupt: page 24")}, true},
		{"panic", []checker.Verdict{fail("logs", "n2: panic: page 31 already freed")}, true},
		{"divergent hashes", []checker.Verdict{fail("convergence", "n2 at index 900 hash 1a2b3c4d5e6f, n1 at index 900 hash 0f0e0d0c0b0a")}, true},
		{"fsck problems", []checker.Verdict{fail("convergence", "n3: fsck: blob a/b refcount 2, recount 1")}, true},
		{"only unhealthy", []checker.Verdict{fail("convergence", "cluster not healthy after healing: no member is serving")}, false},
		{"a passing checker naming the reason", []checker.Verdict{{Name: "convergence", OK: true, Summary: "3 members at index 9, hash 1a2b3c4d5e6f; fsck clean"}}, false},
		{"another checker", []checker.Verdict{fail("acks", "lost ack: fsm.db is corrupt")}, false},
		{"nothing failed", nil, false},
	} {
		fired, why := c.Fired(&ScenarioResult{Verdicts: tc.verdicts})
		if fired != tc.fired {
			t.Errorf("%s: fired %v (%s), want %v", tc.name, fired, why, tc.fired)
		}
	}
}
