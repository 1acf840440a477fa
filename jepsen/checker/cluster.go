package checker

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Convergence checks that every member reported the same state hash at
// the same applied index, and that fsck found every reference count equal
// to its recount on every member.
func Convergence(in *Input) Verdict {
	start := time.Now()
	var p problems
	f := in.Final
	if f == nil {
		p.addf("no final state")
		return p.verdict("convergence", "", start)
	}
	if f.HealthErr != "" {
		p.addf("cluster not healthy after healing: %s", f.HealthErr)
	}
	var first *MemberFinal
	for i := range f.Members {
		m := &f.Members[i]
		if m.HashErr != "" {
			p.addf("%s: state hash: %s", m.ID, m.HashErr)
			continue
		}
		if first == nil {
			first = m
		} else if m.Hash != first.Hash || m.Index != first.Index {
			p.addf("%s at index %d hash %.12s, %s at index %d hash %.12s", m.ID, m.Index, m.Hash, first.ID, first.Index, first.Hash)
		}
		if m.FsckErr != "" {
			p.addf("%s: fsck: %s", m.ID, m.FsckErr)
		}
		for _, pr := range m.FsckProblems {
			p.addf("%s: fsck: %s", m.ID, pr)
		}
	}
	sum := fmt.Sprintf("%d members", len(f.Members))
	if first != nil {
		sum = fmt.Sprintf("%d members at index %d, hash %.12s; fsck clean", len(f.Members), first.Index, first.Hash)
	}
	return p.verdict("convergence", sum, start)
}

// suspicious matches log lines of a panic or a race report.
var suspicious = regexp.MustCompile(`^panic: |^fatal error: |WARNING: DATA RACE|panic in handler|^goroutine \d+ \[running\]:`)

// ScanLog returns the suspicious lines of a member's log. Crashes the suite
// injects are exits at fault points ("faultpoint: crash at ..."), not
// panics, so nothing needs excusing; a line naming an injected fault point
// is skipped all the same. A panic whose line matches one of expected (a
// member stopping on an I/O error the suite injected: nemesis.PanicExpecter)
// is skipped too, with the header of its goroutine's trace.
func ScanLog(log string, expected ...*regexp.Regexp) []string {
	var out []string
	excused := false // the last panic was expected: skip its trace's header
	for _, line := range strings.Split(log, "\n") {
		if excused {
			if line == "" {
				continue
			}
			excused = false
			if strings.HasPrefix(line, "goroutine ") && strings.HasSuffix(line, " [running]:") {
				continue
			}
		}
		if !suspicious.MatchString(line) || strings.Contains(line, "faultpoint:") {
			continue
		}
		if strings.HasPrefix(line, "panic: ") && matchAny(expected, line) {
			excused = true
			continue
		}
		out = append(out, short(line))
	}
	return out
}

func matchAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// Logs checks the members' logs for panics and race reports.
func Logs(in *Input) Verdict {
	start := time.Now()
	var p problems
	if in.Final != nil {
		for _, m := range in.Final.Members {
			for _, l := range m.LogFindings {
				p.addf("%s log: %s", m.ID, l)
			}
		}
	}
	return p.verdict("logs", "no panic or race report in any member's log", start)
}
