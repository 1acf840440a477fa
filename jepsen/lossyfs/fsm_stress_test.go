//go:build faultinject

package lossyfs_test

// A stress test of the state machine file's life cycle on a lossy disk
// (docs/consistency.md, Finding 4), without Raft: a child process (this
// test binary again) opens fsm.FSM on the mount, applies a deterministic
// stream of commands (entry i is a function of i alone, so a replay is
// exact), persists a snapshot every snapEvery entries, and checks the
// state hash and fsck every checkEvery entries against a baseline computed
// on a plain directory. The parent SIGKILLs it at a random index, stages a
// power loss (Crash, new boot id) the way jepsen/cluster.Member.PowerLoss
// does, and starts it again: the child sets the file aside, restores the
// newest snapshot (fsm.RestoreFrom) and goes on from its index.
//
// It needs root and /dev/fuse, a faultinject build (the boot id comes from
// fsm.EnvFaultBootIDFile) and asking:
//
//	METASTORE_LOSSYFS_STRESS=40 go test -tags faultinject -count=1 -run TestFSMPowerLossStress -v ./jepsen/lossyfs/
//
// METASTORE_LOSSYFS_STRESS is the number of cycles per variant;
// METASTORE_LOSSYFS_VARIANTS picks variants by name (comma separated,
// default all).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/jepsen/lossyfs"
	"github.com/metastore/metastore/wire"
)

const (
	envStressChild = "METASTORE_LOSSYFS_STRESS_CHILD" // the child's data directory
	snapEvery      = 150
	checkEvery     = 25
	keysPerGroup   = 30
)

var stressT0 = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

// stressCmd is entry i of the stream. Entries 1 and 2 create a job and
// its attempt; then each group of five creates 30 upload intents and
// moves older groups through expiry, deleting, gone and purge, so pages
// are allocated and freed all the time while the file stays small.
func stressCmd(i uint64) []byte {
	now := stressT0.Add(time.Duration(i) * time.Second)
	var typ fsm.CommandType
	var p any
	keys := func(g int64) []string {
		out := make([]string, keysPerGroup)
		for k := range out {
			out[k] = fmt.Sprintf("plain/p0/g%06d-k%02d-%s", g, k, strings.Repeat("x", 100))
		}
		return out
	}
	g := int64(i) / 5
	switch {
	case i == 1:
		typ, p = fsm.CmdJobPut, fsm.JobPut{Job: "plain", Config: wire.JobConfig{Retained: 2}}
	case i == 2:
		typ, p = fsm.CmdAttemptStart, fsm.AttemptStart{Job: "plain", AttemptID: "a1", Tasks: []wire.Task{{ID: "p0"}}}
	case i%5 == 0:
		typ, p = fsm.CmdIntentCreate, fsm.IntentCreate{Job: "plain", Generation: 1, Task: "p0", Keys: keys(g), LeaseUntil: now.Add(time.Second)}
	case i%5 == 1:
		typ, p = fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: keys(g - 4)}
	case i%5 == 2:
		typ, p = fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: keys(g - 8)}
	case i%5 == 3:
		typ, p = fsm.CmdBlobsGone, fsm.BlobKeys{Keys: keys(g - 8)}
	default:
		typ, p = fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: keys(g - 9)}
	}
	data, err := fsm.Encode(typ, now, p)
	if err != nil {
		panic(err)
	}
	return data
}

// TestFSMStressChild is the child process (it does nothing unless started
// by TestFSMPowerLossStress).
func TestFSMStressChild(t *testing.T) {
	dir := os.Getenv(envStressChild)
	if dir == "" {
		t.Skip("the child of TestFSMPowerLossStress")
	}
	if err := stressChild(dir); err != nil {
		msg := err.Error()
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		fmt.Printf("FAIL %s\n", msg)
		os.Exit(3)
	}
	os.Exit(0)
}

func stressChild(dir string) error {
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	f, err := fsm.Open(filepath.Join(dir, "fsm.db"), nil)
	if err != nil {
		return err
	}
	snapDir := filepath.Join(dir, "snapshots")
	if err := os.MkdirAll(snapDir, 0o755); err != nil {
		return err
	}
	restored := false
	if idx, path := newestSnapshot(snapDir); idx > f.AppliedIndex() {
		// As node.catchUpFromSnapshot does.
		r, err := os.Open(path)
		if err != nil {
			return err
		}
		if err := f.RestoreFrom(r); err != nil {
			return err
		}
		r.Close()
		if f.AppliedIndex() != idx {
			return fmt.Errorf("restored snapshot %d: applied index %d", idx, f.AppliedIndex())
		}
		restored = true
	}
	check := func() error {
		idx, sum, err := f.StateHash()
		if err != nil {
			return fmt.Errorf("state hash at %d: %w", idx, err)
		}
		rep, err := f.Fsck()
		if err != nil {
			return fmt.Errorf("fsck at %d: %w", idx, err)
		}
		if !rep.OK() {
			return fmt.Errorf("fsck at %d: %v %v", idx, rep.Mismatches, rep.Problems)
		}
		say("H %d %s", idx, sum)
		return nil
	}
	// Readers (the API's and the collector's reads, through bbolt's
	// mapping) and a stat of the file (metrics, health checks: with no
	// attribute caching every one asks the file system), as a member
	// has while it applies.
	if os.Getenv("METASTORE_LOSSYFS_STRESS_READERS") == "1" {
		for r := range 2 {
			go func() {
				for {
					<-f.Changes() // once per applied batch
					i := f.AppliedIndex()
					g := int64(i)/5 - int64(r)
					_, _, _ = f.Blob(fmt.Sprintf("plain/p0/g%06d-k%02d-%s", g, r, strings.Repeat("x", 100)))
					if r == 0 {
						if _, _, err := f.StateHash(); err != nil {
							say("FAIL reader: %v", err)
							os.Exit(3)
						}
					}
				}
			}()
		}
		go func() {
			for {
				<-f.Changes()
				_, _ = os.Stat(filepath.Join(dir, "fsm.db"))
			}
		}()
	}
	say("START %d %t", f.AppliedIndex(), restored)
	if err := check(); err != nil {
		return err
	}
	var persisting sync.WaitGroup
	busy := make(chan struct{}, 1)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	next := f.AppliedIndex() + 1
	for {
		// Batches of 1 to 4 entries, ending at each multiple of
		// checkEvery, where the state is checked.
		n := min(uint64(1+rng.IntN(4)), checkEvery-(next-1)%checkEvery)
		var logs []*raft.Log
		for j := range n {
			logs = append(logs, &raft.Log{Index: next + j, Term: 1, Type: raft.LogCommand, Data: stressCmd(next + j)})
		}
		for k, resp := range f.ApplyBatch(logs) {
			res, ok := resp.(*fsm.Result)
			if !ok {
				return fmt.Errorf("entry %d: response %T %v", logs[k].Index, resp, resp)
			}
			if res.Err != nil {
				return fmt.Errorf("entry %d: %v", logs[k].Index, res.Err)
			}
		}
		for j := range n {
			i := next + j
			if i%checkEvery == 0 && i == f.AppliedIndex() {
				if err := check(); err != nil {
					return err
				}
			}
			if i%snapEvery == 0 {
				select {
				case busy <- struct{}{}:
				default:
					continue // one persist at a time, as Raft does
				}
				sn, err := f.Snapshot()
				if err != nil {
					return err
				}
				idx := f.AppliedIndex()
				persisting.Add(1)
				go func() {
					defer persisting.Done()
					defer func() { <-busy }()
					defer sn.Release()
					if err := persist(snapDir, idx, sn); err != nil {
						say("FAIL persist %d: %v", idx, err)
						os.Exit(3)
					}
					say("SNAP %d", idx)
				}()
			}
		}
		next += n
		say("A %d", next-1)
	}
}

// newestSnapshot returns the newest complete snapshot in dir.
func newestSnapshot(dir string) (uint64, string) {
	ents, _ := os.ReadDir(dir)
	var best uint64
	var path string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".snap")
		if !ok {
			continue
		}
		if idx, err := strconv.ParseUint(name, 10, 64); err == nil && idx > best {
			best, path = idx, filepath.Join(dir, e.Name())
		}
	}
	return best, path
}

// fileSink is a raft.SnapshotSink writing a file that is synced and
// renamed into place, as Raft's file snapshot store does.
type fileSink struct {
	*os.File
	dir   string
	index uint64
}

func (s *fileSink) ID() string    { return strconv.FormatUint(s.index, 10) }
func (s *fileSink) Cancel() error { s.File.Close(); return os.Remove(s.File.Name()) }
func (s *fileSink) Close() error {
	if err := s.File.Sync(); err != nil {
		return err
	}
	if err := s.File.Close(); err != nil {
		return err
	}
	if err := os.Rename(s.File.Name(), filepath.Join(s.dir, s.ID()+".snap")); err != nil {
		return err
	}
	return syncDir(s.dir)
}

func persist(dir string, idx uint64, sn raft.FSMSnapshot) error {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.tmp", idx)))
	if err != nil {
		return err
	}
	if err := sn.Persist(&fileSink{File: f, dir: dir, index: idx}); err != nil {
		return err
	}
	// Keep the newest two.
	ents, _ := os.ReadDir(dir)
	var idxs []uint64
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".snap"); ok {
			if n, err := strconv.ParseUint(name, 10, 64); err == nil {
				idxs = append(idxs, n)
			}
		}
	}
	slices.Sort(idxs)
	for len(idxs) > 2 {
		os.Remove(filepath.Join(dir, fmt.Sprintf("%d.snap", idxs[0])))
		idxs = idxs[1:]
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// baseline applies the stream up to max on a plain directory and returns
// the state hash at every multiple of checkEvery.
func baseline(t *testing.T, max uint64) map[uint64]string {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hashes := map[uint64]string{}
	for i := uint64(1); i <= max; i++ {
		res := f.Apply(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: stressCmd(i)}).(*fsm.Result)
		if res.Err != nil {
			t.Fatalf("baseline entry %d: %v", i, res.Err)
		}
		if i%checkEvery == 0 {
			_, sum, err := f.StateHash()
			if err != nil {
				t.Fatal(err)
			}
			hashes[i] = sum
		}
	}
	return hashes
}

// variant is one way to stage the crash between two lives of the child.
type variant struct {
	name string
	// lossy puts the data directory on a lossy mount (else a plain
	// directory, where a "power loss" is only a SIGKILL and a new boot id:
	// the file is set aside and rebuilt, nothing is lost).
	lossy bool
	mode  lossyfs.Mode
	// remount unmounts and mounts the file system after Crash;
	// dropCaches writes 3 to /proc/sys/vm/drop_caches after Crash.
	remount, dropCaches bool
	// killOnly is a SIGKILL with the boot id unchanged (no power loss).
	killOnly bool
}

var stressVariants = []variant{
	{name: "plain-dir", lossy: false},
	{name: "lossy-killonly", lossy: true, killOnly: true},
	{name: "lossy-tear", lossy: true, mode: lossyfs.Tear},
	{name: "lossy-lose", lossy: true, mode: lossyfs.Lose},
	{name: "lossy-tear-dropcaches", lossy: true, mode: lossyfs.Tear, dropCaches: true},
	{name: "lossy-tear-remount", lossy: true, mode: lossyfs.Tear, remount: true},
	{name: "lossy-lose-remount", lossy: true, mode: lossyfs.Lose, remount: true},
}

func TestFSMPowerLossStress(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv("METASTORE_LOSSYFS_STRESS"))
	if cycles <= 0 {
		t.Skip("set METASTORE_LOSSYFS_STRESS=cycles to run (minutes)")
	}
	if err := lossyfs.Supported(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	const maxIndex = 20000
	want := baseline(t, maxIndex)
	pick := os.Getenv("METASTORE_LOSSYFS_VARIANTS")
	var report []string
	for _, v := range stressVariants {
		if pick != "" && !slices.Contains(strings.Split(pick, ","), v.name) {
			continue
		}
		bad, runs, restores := runVariant(t, v, cycles, want, maxIndex)
		line := fmt.Sprintf("%-24s %d of %d cycles corrupt (%d began with a restore)", v.name, bad, runs, restores)
		t.Log(line)
		report = append(report, line)
	}
	sort.Strings(report)
	t.Logf("summary:\n%s", strings.Join(report, "\n"))
	if os.Getenv("METASTORE_LOSSYFS_STRESS_EXPECT_CLEAN") == "1" {
		for _, l := range report {
			if !strings.Contains(l, " 0 of ") {
				t.Errorf("corruption: %s", l)
			}
		}
	}
}

// runVariant runs cycles lives of the child under v and returns how many
// ended corrupt (a hash that differs from the baseline, fsck problems, a
// panic). A corrupt life starts the data directory afresh.
func runVariant(t *testing.T, v variant, cycles int, want map[uint64]string, maxIndex uint64) (bad, runs, restores int) {
	root := t.TempDir()
	backing, dir := filepath.Join(root, "disk"), filepath.Join(root, "mnt")
	for _, d := range []string{backing, dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bootFile := filepath.Join(root, "boot_id")
	boots := 0
	newBoot := func() {
		boots++
		if err := os.WriteFile(bootFile, []byte(fmt.Sprintf("stress-%s-%d\n", v.name, boots)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	newBoot()
	var l *lossyfs.FS
	if v.lossy {
		var err error
		if l, err = lossyfs.Mount(backing, dir); err != nil {
			t.Fatal(err)
		}
		defer func() { l.Unmount() }()
	} else {
		dir = backing
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(v.name))))
	for c := 0; c < cycles; c++ {
		runs++
		// Let the child run between 1 and 3 snapshot intervals past where
		// it starts, then kill it.
		ahead := uint64(snapEvery/2 + rng.IntN(3*snapEvery))
		res := runChild(t, dir, bootFile, ahead, want, maxIndex)
		if res.restored {
			restores++
		}
		if res.corrupt != "" {
			bad++
			t.Logf("%s cycle %d: %s", v.name, c, res.corrupt)
			// Start afresh.
			if l != nil {
				if _, err := l.Crash(lossyfs.Lose); err != nil {
					t.Fatal(err)
				}
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
			newBoot()
			continue
		}
		if res.last >= maxIndex-4*snapEvery {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		if v.killOnly {
			continue
		}
		if l != nil {
			if _, err := l.Crash(v.mode); err != nil {
				t.Fatalf("crash: %v", err)
			}
			if v.remount {
				if err := l.Unmount(); err != nil {
					t.Fatalf("unmount: %v", err)
				}
				var err error
				if l, err = lossyfs.Mount(backing, dir); err != nil {
					t.Fatal(err)
				}
			}
			if v.dropCaches {
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
					t.Fatalf("drop caches: %v", err)
				}
			}
		}
		newBoot()
	}
	return bad, runs, restores
}

type childResult struct {
	last     uint64 // the last index the child reported applied
	restored bool   // the life began with a restore from a snapshot
	corrupt  string // why the life is corrupt, or ""
}

// runChild starts the child on dir, reads its reports, and SIGKILLs it
// once it has applied ahead entries past where it started.
func runChild(t *testing.T, dir, bootFile string, ahead uint64, want map[uint64]string, maxIndex uint64) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFSMStressChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envStressChild+"="+dir, fsm.EnvFaultBootIDFile+"="+bootFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var res childResult
	var start uint64
	killed := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "START":
			start, _ = strconv.ParseUint(fields[1], 10, 64)
			res.last = start
			res.restored = fields[2] == "true"
		case "H":
			idx, _ := strconv.ParseUint(fields[1], 10, 64)
			if w, ok := want[idx]; ok && w != fields[2] && res.corrupt == "" {
				res.corrupt = fmt.Sprintf("state hash at %d differs from the baseline (life started at %d)", idx, start)
			}
		case "A":
			res.last, _ = strconv.ParseUint(fields[1], 10, 64)
		case "FAIL":
			if res.corrupt == "" {
				res.corrupt = sc.Text()
			}
		}
		if !killed && (res.corrupt != "" || res.last >= start+ahead || res.last >= maxIndex-snapEvery) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	if !killed {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		killed = res.corrupt != ""
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !killed && res.corrupt == "" {
		res.corrupt = fmt.Sprintf("child exited before it was killed (%v): %s", err, lastLines(stderr.String(), 12))
	} else if res.corrupt != "" {
		res.corrupt += ": " + lastLines(stderr.String(), 12)
	} else if err != nil && !(errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL) {
		res.corrupt = fmt.Sprintf("child: %v: %s", err, lastLines(stderr.String(), 12))
	}
	return res
}

// lastLines returns the panic line of s, if any, and its last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	var first string
	for _, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			first = l + "\n"
			break
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return first + strings.Join(lines, "\n")
}
