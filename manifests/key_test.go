package manifests

import (
	"regexp"
	"strings"
	"testing"
)

// validateKeyByExpression is ValidateKey as it was written before the
// byte loop: the regular expression of the key charset, then the dot
// segments. The loop must give the same answer for every key.
func validateKeyByExpression(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return errf(CodeInvalid, key, "a blob key must be 1 to %d bytes", MaxKeyLen)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`).MatchString(key) {
		return errf(CodeInvalid, key, "a blob key is a relative path of segments of [A-Za-z0-9._-]")
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			return errf(CodeInvalid, key, "a blob key cannot contain a %q segment", seg)
		}
	}
	return nil
}

func sameKeyVerdict(t *testing.T, key string) {
	t.Helper()
	got, want := ValidateKey(key), validateKeyByExpression(key)
	if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
		t.Fatalf("ValidateKey(%q) = %v, the expression says %v", key, got, want)
	}
}

func TestValidateKeyAgreesWithExpression(t *testing.T) {
	for _, key := range []string{
		"a", "j/t/log-1", "wl-0/agg-0/0000018c2f3a4b5c6d7e8f9a0b1c2d3e",
		"", "/", "a/", "/a", "a//b", ".", "..", "./a", "a/.", "a/../b",
		"...", "a/.../b", ".a", "a.", "a/./b/$", "$/./b", "a\\b", "a\x00b",
		"ａ", "a b", "a\nb", "A-Z_0.9", strings.Repeat("a", MaxKeyLen),
		strings.Repeat("a", MaxKeyLen+1), "x/" + strings.Repeat("b/", 200) + "..",
	} {
		sameKeyVerdict(t, key)
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range fuzzKeys {
		f.Add(k)
	}
	f.Add("a/./b/..")
	f.Fuzz(sameKeyVerdict)
}
