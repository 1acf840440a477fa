package workload

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/metastore/metastore/bench/internal/sut"
)

// TestDeviceMeterCountsWrites: a file written without fsync in a member's
// data directory shows in the device figure, because written syncs first.
func TestDeviceMeterCountsWrites(t *testing.T) {
	dir := t.TempDir()
	d := newDeviceMeter([]sut.Member{{ID: "m1", DataDir: dir}, {ID: "m2", DataDir: dir}})
	if d == nil {
		t.Skipf("%s is not on a block device (tmpfs or overlay): the device figure is not measured there", dir)
	}
	if len(d.stats) != 1 {
		t.Fatalf("two members on one device: %d stat files, want 1", len(d.stats))
	}
	before, err := d.written()
	if err != nil {
		t.Fatal(err)
	}
	const size = 8 << 20
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9) // not all zeros, so no file system can skip it
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), buf, 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := d.written()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < size {
		t.Fatalf("device wrote %d bytes over an unsynced write of %d", after-before, size)
	}
}

func TestDeviceMeterNotABlockDevice(t *testing.T) {
	if d := newDeviceMeter([]sut.Member{{ID: "m1", DataDir: "/proc"}}); d != nil {
		t.Fatalf("/proc: meter %v, want none", d.stats)
	}
	if d := newDeviceMeter([]sut.Member{{ID: "m1"}}); d != nil {
		t.Fatalf("no data directory: meter %v, want none", d.stats)
	}
}
