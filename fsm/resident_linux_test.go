package fsm_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestScansLeaveNoPagesResident: opening a state machine file and
// restoring a snapshot each scan every blob record (the jobs' usage, the
// blobs awaiting observation, the filter of blob keys), reading the whole
// bucket through bbolt's mapping of the file; afterwards the member's
// resident set holds few of those pages (dropResident). Measured on the
// mapping of the file itself (/proc/self/smaps), of about 100 MiB.
func TestScansLeaveNoPagesResident(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a state machine file of about 100 MiB")
	}
	h := newHarness(t)
	fillEverything(h)
	r := rand.New(rand.NewPCG(3, 4))
	plantBlobRecords(t, h.f, 200_000, func() string {
		return fmt.Sprintf("job-%d/task/%016x%016x", r.IntN(10), r.Uint64(), r.Uint64())
	})
	size, err := os.Stat(h.path)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when, path string) {
		t.Helper()
		rss := mappedRss(t, path)
		t.Logf("%s: %d KiB of the %d KiB file resident in its mapping", when, rss>>10, size.Size()>>10)
		if rss > size.Size()/10 {
			t.Fatalf("%s: %d KiB of the %d KiB state machine file stay resident in its mapping after the scan", when, rss>>10, size.Size()>>10)
		}
	}
	h.reopen()
	check("after open", h.path)

	snapshot := snapshotOf(t, h.f)
	dst := newHarness(t)
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(snapshot))); err != nil {
		t.Fatal(err)
	}
	check("after a restore", dst.path)
}

// mappedRss is the resident size of this process's mappings of the file
// at path, from /proc/self/smaps.
func mappedRss(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rss int64
	var mapping, found bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			mapping = fields[len(fields)-1] == path
			found = found || mapping
			continue
		}
		if mapping && len(fields) == 3 && fields[0] == "Rss:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no mapping of %s in /proc/self/smaps", path)
	}
	return rss
}
