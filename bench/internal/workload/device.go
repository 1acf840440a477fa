package workload

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/metastore/metastore/bench/internal/sut"
)

// The device figure: what reached the block devices that hold the members'
// data directories.
//
// write_bytes of /proc/PID/io is charged when a page-cache folio turns
// dirty, for the whole folio. Since Linux 6.16 ext4 caches files in large
// folios (up to 2 MiB) where they were written or read in large runs, so a
// 4 KiB write into such a folio after it was cleaned (fsync, writeback) is
// charged up to 2 MiB, while the device receives only the 4 KiB block the
// file system tracks as dirty. A bbolt file, whose commits rewrite single
// pages inside regions once written in long runs, is charged far above
// what its process wrote (docs/benchmarks.md, "Bytes written"). The device
// figure counts what the device wrote instead: the sectors written of each
// device, read after sync(2) at both ends of the window so that what the
// processes left dirty (a state file written without fsync) is counted
// once, when it reaches the device. It includes the file system's journal
// and any other writer on the machine during the window, so it is an upper
// bound of the system's own writes.

// deviceMeter reads the sectors written of the devices holding dirs.
type deviceMeter struct {
	stats []string // /sys/dev/block/MAJ:MIN/stat, one per distinct device
}

// newDeviceMeter returns a meter of the devices holding the members' data
// directories, or nil when one is not a block device (tmpfs, overlay).
func newDeviceMeter(ms []sut.Member) *deviceMeter {
	seen := map[string]bool{}
	d := &deviceMeter{}
	for _, m := range ms {
		var st unix.Stat_t
		if m.DataDir == "" || unix.Stat(m.DataDir, &st) != nil {
			return nil
		}
		p := fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev))
		if _, err := sectorsWritten(p); err != nil {
			return nil
		}
		if !seen[p] {
			seen[p] = true
			d.stats = append(d.stats, p)
		}
	}
	if len(d.stats) == 0 {
		return nil
	}
	return d
}

// written syncs every file system, then returns the bytes the devices have
// written since they were attached.
func (d *deviceMeter) written() (int64, error) {
	unix.Sync()
	var sum int64
	for _, p := range d.stats {
		n, err := sectorsWritten(p)
		if err != nil {
			return 0, err
		}
		sum += n * 512
	}
	return sum, nil
}

// sectorsWritten reads field 7 of a block device's stat file: sectors
// written, in units of 512 bytes whatever the device's sector size
// (Documentation/block/stat.rst).
func sectorsWritten(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	return strconv.ParseInt(f[6], 10, 64)
}
