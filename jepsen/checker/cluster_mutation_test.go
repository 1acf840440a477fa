package checker

import (
	"regexp"
	"strings"
	"testing"
)

// Tests written in a mutation audit of cluster.go and checker.go.

func TestConvergence(t *testing.T) {
	m := func(id, hash string, index uint64) MemberFinal { return MemberFinal{ID: id, Hash: hash, Index: index} }
	for _, c := range []struct {
		name string
		f    *Final
		want string // empty: ok
	}{
		{"converged", &Final{Members: []MemberFinal{m("n1", "h", 7), m("n2", "h", 7), m("n3", "h", 7)}}, ""},
		{"no final state", nil, "no final state"},
		{"unhealthy", &Final{HealthErr: "no leader", Members: []MemberFinal{m("n1", "h", 7)}}, "not healthy"},
		{"hash not read", &Final{Members: []MemberFinal{m("n1", "h", 7), {ID: "n2", HashErr: "refused"}}}, "n2: state hash: refused"},
		{"other hash", &Final{Members: []MemberFinal{m("n1", "h", 7), m("n2", "x", 7)}}, "n2 at index 7 hash x"},
		{"other index", &Final{Members: []MemberFinal{m("n1", "h", 7), m("n2", "h", 8)}}, "n2 at index 8 hash h"},
		{"fsck error", &Final{Members: []MemberFinal{m("n1", "h", 7), {ID: "n2", Hash: "h", Index: 7, FsckErr: "timeout"}}}, "n2: fsck: timeout"},
		{"fsck problem", &Final{Members: []MemberFinal{m("n1", "h", 7), {ID: "n2", Hash: "h", Index: 7, FsckProblems: []string{"refs of k1: 2, recount 1"}}}}, "n2: fsck: refs of k1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Convergence(&Input{Final: c.f})
			if v.OK != (c.want == "") {
				t.Fatalf("ok = %v: %s %v", v.OK, v.Summary, v.Problems)
			}
			if c.want != "" && !strings.Contains(strings.Join(v.Problems, "\n"), c.want) {
				t.Fatalf("no %q in %v", c.want, v.Problems)
			}
		})
	}
}

func TestLogsAndPassed(t *testing.T) {
	f := &Final{Members: []MemberFinal{{ID: "n1"}, {ID: "n2", LogFindings: []string{"panic: boom"}}}}
	v := Logs(&Input{Final: f})
	if v.OK || !strings.Contains(strings.Join(v.Problems, "\n"), "n2 log: panic: boom") {
		t.Fatalf("a member's panic accepted: %s %v", v.Summary, v.Problems)
	}
	if !Logs(&Input{Final: &Final{Members: []MemberFinal{{ID: "n1"}}}}).OK {
		t.Fatal("clean logs refused")
	}
	if Passed([]Verdict{{Name: "a", OK: true}, v}) {
		t.Fatal("Passed with a failed verdict")
	}
	if !Passed([]Verdict{{Name: "a", OK: true}, {Name: "b", OK: true}}) {
		t.Fatal("not Passed with every verdict ok")
	}
}

// TestScanLogCases: what ScanLog reports, line by line.
func TestScanLogCases(t *testing.T) {
	eio := regexp.MustCompile(`input/output error$`)
	for _, c := range []struct {
		line   string
		report bool
	}{
		{"fatal error: concurrent map writes", true},
		{"http: panic in handler GET /v1/jobs: boom", true},
		{"panic: faultpoint: crash at gc.after-mark", false},
		{"fatal error: write raft.db: input/output error", true}, // only panics are expected
		{"panic: write raft.db: input/output error", false},
	} {
		got := ScanLog(c.line, eio)
		if (len(got) > 0) != c.report {
			t.Errorf("%q: findings %q", c.line, got)
		}
	}
}

// TestVerdictProblemsBounded: a verdict lists at most MaxProblems
// violations and counts them all.
func TestVerdictProblemsBounded(t *testing.T) {
	var p problems
	for i := 0; i < MaxProblems+5; i++ {
		p.addf("v%d", i)
	}
	if len(p.list) != MaxProblems || p.total != MaxProblems+5 {
		t.Fatalf("listed %d of %d", len(p.list), p.total)
	}
}
