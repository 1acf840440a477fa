//go:build faultinject

package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSkewFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "skew")
	if err := os.WriteFile(path, []byte("-90s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	load(path)
	if d := time.Until(Now()); d > -89*time.Second || d < -91*time.Second {
		t.Fatalf("Now is %s from the wall clock, want -90s", d)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	load(path)
	if skew() != -90*time.Second {
		t.Fatalf("an unreadable file changed the skew to %s", skew())
	}
	os.Remove(path)
	load(path)
	if skew() != 0 {
		t.Fatalf("no file: skew %s", skew())
	}
}
