package nemesis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/cluster"
)

// InstalledSnapshotLog is what hashicorp/raft logs on a follower that
// installed a snapshot sent by the leader.
const InstalledSnapshotLog = "Installed remote snapshot"

type snapshotInstallFault struct {
	victim     *cluster.Member
	logOffset  int64
	lastIndex  uint64 // the victim's last log index when cut off
	leaderSnap uint64 // the leader's snapshot index when healed
	writes     int
	detail     string
}

// SnapshotInstall returns the fault that cuts a follower off (iptables),
// writes until the leader has taken a snapshot past the follower's last
// log index plus the trailing logs (so the entries the follower needs are
// gone from the leader's log), and at Heal reconnects it and waits until
// the follower has installed the leader's snapshot (its log says
// "Installed remote snapshot").
func SnapshotInstall() Fault { return &snapshotInstallFault{} }

func (f *snapshotInstallFault) Name() string     { return "snapshot-install" }
func (f *snapshotInstallFault) Describe() string { return f.detail }

func (f *snapshotInstallFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	fs := c.Followers(leader)
	if len(fs) == 0 {
		return fmt.Errorf("no follower")
	}
	f.victim = fs[0]
	if err := c.Partition(ctx, cluster.Isolate(f.victim.ID, cluster.IDs(c.Serving()))); err != nil {
		return err
	}
	f.logOffset = f.victim.LogSize()
	st, err := c.Status(ctx, f.victim)
	if err != nil {
		return err
	}
	f.lastIndex = st.LastLogIndex
	trailing := c.Options().TrailingLogs
	f.detail = fmt.Sprintf("cut off %s at log index %d", f.victim.ID, f.lastIndex)

	majority := slices.DeleteFunc(c.Serving(), func(m *cluster.Member) bool { return m == f.victim })
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f.writes, err = WriteLoad(wctx, c, majority, 8, func(ctx context.Context) (bool, error) {
		_, lst, err := c.LeaderAmong(ctx, majority)
		if err != nil {
			return false, nil // an election under load: keep writing
		}
		f.leaderSnap = lst.LastSnapshotIndex
		return lst.LastSnapshotIndex > f.lastIndex+trailing, nil
	})
	f.detail += fmt.Sprintf("; %d writes until the leader's snapshot reached index %d", f.writes, f.leaderSnap)
	if err != nil {
		return fmt.Errorf("leader did not snapshot past index %d+%d: %w", f.lastIndex, trailing, err)
	}
	return nil
}

func (f *snapshotInstallFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if err := c.Heal(ctx); err != nil {
		return err
	}
	if f.victim == nil || f.leaderSnap == 0 {
		return nil
	}
	for {
		if strings.Contains(f.victim.LogSince(f.logOffset), InstalledSnapshotLog) {
			st, err := c.Status(ctx, f.victim)
			if err == nil && st.LastSnapshotIndex >= f.leaderSnap {
				f.detail += fmt.Sprintf("; %s installed the snapshot (its snapshot index %d)", f.victim.ID, st.LastSnapshotIndex)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not install a snapshot after the heal (no %q in its log): %w", f.victim.ID, InstalledSnapshotLog, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type persistCrashFault struct {
	target Target
	victim *cluster.Member
	detail string
}

// SnapshotPersistCrash returns the fault that arms a crash at the fault
// point faultpoint.SnapshotPersist (inside raft's snapshot persist, before
// the sink is closed) on one member, writes until that member takes a
// snapshot and dies there (exit status 137), and at Heal restarts it from
// its data directory, where the half-written snapshot must be ignored.
func SnapshotPersistCrash() Fault { return &persistCrashFault{target: Follower} }

// SnapshotPersistCrashOf is SnapshotPersistCrash of the given target.
func SnapshotPersistCrashOf(t Target) Fault { return &persistCrashFault{target: t} }

func (f *persistCrashFault) Name() string     { return "snapshot-persist-crash-" + string(f.target) }
func (f *persistCrashFault) Describe() string { return f.detail }

func (f *persistCrashFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	m, isLeader, err := pick(ctx, c, f.target)
	if err != nil {
		return err
	}
	f.victim = m
	if _, err := m.Faults().Set(ctx, faultpoint.SnapshotPersist, faultpoint.Arm{Action: faultpoint.Crash, Count: 1}); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("armed crash at %s on %s (%s)", faultpoint.SnapshotPersist, m.ID, role(isLeader))
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	writes, err := WriteLoad(wctx, c, nil, 8, func(context.Context) (bool, error) { return !m.Running(), nil })
	if err != nil {
		return fmt.Errorf("%s did not crash in snapshot persist after %d writes: %w", m.ID, writes, err)
	}
	return checkCrash(m, faultpoint.SnapshotPersist, &f.detail, writes)
}

// checkCrash verifies m exited at the fault point name.
func checkCrash(m *cluster.Member, name string, detail *string, writes int) error {
	st := m.LastExit()
	if st == nil || st.ExitCode() != faultpoint.CrashExitCode {
		return fmt.Errorf("%s exited with %v, want status %d from the fault point", m.ID, st, faultpoint.CrashExitCode)
	}
	if !strings.Contains(m.LogTail(64<<10), "faultpoint: crash at "+name) {
		return fmt.Errorf("%s exited %d but its log does not show the crash at %s", m.ID, faultpoint.CrashExitCode, name)
	}
	*detail += fmt.Sprintf("; %s crashed there after %d writes", m.ID, writes)
	return nil
}

func (f *persistCrashFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil {
		return nil
	}
	if f.victim.Running() {
		// Never crashed: disarm.
		_, err := f.victim.Faults().Set(ctx, faultpoint.SnapshotPersist, faultpoint.Arm{Action: faultpoint.Off})
		return err
	}
	f.detail += ", restarted"
	return f.victim.Start(ctx)
}
