package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A cluster owns its names (Prefix) and its subnet for its whole life, and
// Start removes the leftovers of earlier runs under its prefix: two
// clusters with the same prefix must never run at once, on this machine or
// in two test processes. Each prefix therefore has a lock file, held (an
// flock, released if the holder crashes) from Start to Close.
//
// Options without a Prefix take the first free slot: slot 0 is prefix
// "msj" on 10.77.0.0/24, slot k is "msjK" on 10.77.K.0/24, up to
// DefaultSlots (or JEPSEN_SLOTS) slots; when all are taken, Start waits.
// Explicit prefixes use their own lock; their subnets are the caller's to
// keep apart.

// DefaultSlots is how many clusters with default names may run at once on
// one machine (the machine has 2 cores: a third would mostly wait).
const DefaultSlots = 2

// LockDir holds the lock files.
var LockDir = os.TempDir()

type machineLock struct {
	f    *os.File
	path string
}

func lockPath(prefix string) string {
	return filepath.Join(LockDir, "metastore-jepsen-"+prefix+".lock")
}

// tryLock takes the lock of prefix without waiting; nil, nil if another
// process holds it.
func tryLock(prefix string) (*machineLock, error) {
	path := lockPath(prefix)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, nil
		}
		return nil, fmt.Errorf("cluster: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &machineLock{f: f, path: path}, nil
}

func slots() int {
	if n, err := strconv.Atoi(os.Getenv("JEPSEN_SLOTS")); err == nil && n > 0 {
		return min(n, 200)
	}
	return DefaultSlots
}

// acquireSlot locks opts.Prefix, or with no prefix the first free default
// slot, filling in Prefix and Subnet; it waits while they are taken.
func acquireSlot(ctx context.Context, opts *Options) (*machineLock, error) {
	type slot struct{ prefix, subnet string }
	var cands []slot
	if opts.Prefix != "" {
		cands = []slot{{opts.Prefix, opts.Subnet}}
	} else {
		for k := range slots() {
			s := slot{"msj", "10.77.0"}
			if k > 0 {
				s = slot{fmt.Sprintf("msj%d", k), fmt.Sprintf("10.77.%d", k)}
			}
			cands = append(cands, s)
		}
	}
	logged := false
	for {
		for _, s := range cands {
			l, err := tryLock(s.prefix)
			if err != nil {
				return nil, err
			}
			if l != nil {
				opts.Prefix = s.prefix
				if opts.Subnet == "" {
					opts.Subnet = s.subnet
				}
				return l, nil
			}
		}
		if !logged {
			var holders []string
			for _, s := range cands {
				pid, _ := os.ReadFile(lockPath(s.prefix))
				holders = append(holders, s.prefix+": pid "+strings.TrimSpace(string(pid)))
			}
			opts.Logf("cluster: waiting for a free cluster slot on this machine (held by %s)", strings.Join(holders, ", "))
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: waiting for a free cluster slot: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (l *machineLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
