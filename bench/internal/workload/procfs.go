package workload

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/bench/internal/procs"
	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// clockTicks is the unit of the CPU times of /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuSeconds returns the user and system CPU time process pid has used
// (utime+stime of /proc/PID/stat).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesized and may hold spaces:
	// fields are counted after its closing parenthesis, from field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseUint(f[utime], 10, 64)
	st, err2 := strconv.ParseUint(f[stime], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[utime], f[stime])
	}
	return float64(u+st) / clockTicks, nil
}

// membersCPU returns the total CPU seconds of the members, and false when
// one could not be read.
func membersCPU(ms []sut.Member) (float64, bool) {
	var sum float64
	for _, m := range ms {
		s, err := cpuSeconds(m.PID)
		if err != nil || m.PID <= 0 {
			return 0, false
		}
		sum += s
	}
	return sum, len(ms) > 0
}

// procField returns the value of a "key: value" line of a /proc file.
func procField(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == key {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no %s", path, key)
}

// writeBytes returns write_bytes of /proc/PID/io: the bytes the process
// caused to be sent to storage.
func writeBytes(pid int) (int64, error) {
	v, err := procField(fmt.Sprintf("/proc/%d/io", pid), "write_bytes")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// membersRSS returns the members' total resident memory, or zero when one
// could not be read.
func membersRSS(ms []sut.Member) int64 {
	var sum int64
	for _, m := range ms {
		r, err := procs.RSS(m.PID)
		if err != nil || m.PID <= 0 {
			return 0
		}
		sum += r
	}
	return sum
}

// dirSize returns the total size of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var sum int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			// A file removed while walking (a compacted segment) is not
			// an error of the measure.
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				sum += fi.Size()
			}
		}
		return nil
	})
	return sum, err
}

// byteMeter counts the bytes the members write, with /proc/PID/io when
// every member's is readable, else by the growth of their data
// directories.
type byteMeter struct {
	members []sut.Member
	method  string
}

func newByteMeter(ms []sut.Member) *byteMeter {
	m := &byteMeter{members: ms, method: report.BytesProcIO}
	for _, mb := range ms {
		if _, err := writeBytes(mb.PID); err != nil || mb.PID <= 0 {
			m.method = report.BytesDataDir
			break
		}
	}
	return m
}

// settleQuiet is how long the members' written bytes must stay unchanged
// for settled to return; settleMax bounds the wait.
const (
	settleQuiet = 500 * time.Millisecond
	settleMax   = 60 * time.Second
)

// settled waits until the members' total has not changed for settleQuiet
// (they have finished writing what earlier requests caused), at most
// settleMax, and returns it.
func (m *byteMeter) settled(ctx context.Context) (int64, error) {
	deadline := time.Now().Add(settleMax)
	last, err := m.total()
	if err != nil {
		return 0, err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(settleQuiet):
		}
		n, err := m.total()
		if err != nil {
			return 0, err
		}
		if n == last {
			return n, nil
		}
		last = n
	}
	return last, nil
}

// total returns the members' bytes written so far (BytesProcIO) or the
// size of their data directories (BytesDataDir).
func (m *byteMeter) total() (int64, error) {
	var sum int64
	for _, mb := range m.members {
		var n int64
		var err error
		if m.method == report.BytesProcIO {
			n, err = writeBytes(mb.PID)
		} else {
			n, err = dirSize(mb.DataDir)
		}
		if err != nil {
			return 0, fmt.Errorf("bytes written by member %s: %w", mb.ID, err)
		}
		sum += n
	}
	return sum, nil
}
