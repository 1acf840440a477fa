package wire

import (
	"strings"
	"testing"
)

func sameIDVerdict(t *testing.T, v string) {
	t.Helper()
	if got, want := ValidID(v), IDPattern.MatchString(v); got != want {
		t.Fatalf("ValidID(%q) = %v, IDPattern says %v", v, got, want)
	}
}

// ValidID is IDPattern written out; the two must agree on every string.
func TestValidIDAgreesWithPattern(t *testing.T) {
	for _, v := range []string{
		"a", "Z", "0", "wl-0", "src.1_a-b", "", ".a", "-a", "_a", "a/b", "a b",
		"a\x00", "ａ", "é", "a\n", strings.Repeat("a", 128), strings.Repeat("a", 129),
		"a" + strings.Repeat(".", 127), "a" + strings.Repeat("-", 128),
	} {
		sameIDVerdict(t, v)
	}
}

func FuzzValidID(f *testing.F) {
	for _, v := range []string{"a", "wl-0", ".a", "a/b", strings.Repeat("z", 128)} {
		f.Add(v)
	}
	f.Fuzz(sameIDVerdict)
}
