package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/lossyfs"
)

// Target selects the member a fault hits, by its role when the fault is
// injected.
type Target string

// Targets.
const (
	Leader   Target = "leader"
	Follower Target = "follower"
	Random   Target = "random"
)

// pick returns the member t names, among the serving members, and whether
// it is the leader.
func pick(ctx context.Context, c *cluster.Cluster, t Target) (*cluster.Member, bool, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, false, err
	}
	switch t {
	case Leader:
		return leader, true, nil
	case Follower:
		fs := c.Followers(leader)
		if len(fs) == 0 {
			return nil, false, errors.New("no follower")
		}
		return fs[rand.IntN(len(fs))], false, nil
	case Random:
		s := c.Serving()
		m := s[rand.IntN(len(s))]
		return m, m == leader, nil
	}
	return nil, false, fmt.Errorf("unknown target %q", t)
}

func role(isLeader bool) string {
	if isLeader {
		return "leader"
	}
	return "follower"
}

// killFault is kill -9 of a member, restarted by Heal.
type killFault struct {
	target Target
	victim *cluster.Member
	detail string
}

// Kill returns the fault that SIGKILLs the target member; Heal restarts it
// from its data directory.
func Kill(t Target) Fault { return &killFault{target: t} }

func (f *killFault) Name() string     { return "kill-" + string(f.target) }
func (f *killFault) Describe() string { return f.detail }

func (f *killFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	m, isLeader, err := pick(ctx, c, f.target)
	if err != nil {
		return err
	}
	f.victim = m
	f.detail = fmt.Sprintf("killed %s (%s)", m.ID, role(isLeader))
	return m.Kill()
}

func (f *killFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil || f.victim.Running() {
		return nil
	}
	f.detail += ", restarted"
	return f.victim.Start(ctx)
}

// pauseFault is SIGSTOP of a member.
type pauseFault struct {
	target Target
	victim *cluster.Member
	detail string
}

// PauseLeader returns the fault that SIGSTOPs the leader and keeps it
// stopped until the other members have elected a new leader (and at least
// twice the election timeout); Heal SIGCONTs it, and it must rejoin as a
// follower of the new term.
func PauseLeader() Fault { return &pauseFault{target: Leader} }

// PauseFollower returns the fault that SIGSTOPs a follower (for at least
// twice the election timeout, so the leader's appends to it time out);
// Heal SIGCONTs it and it must catch up.
func PauseFollower() Fault { return &pauseFault{target: Follower} }

func (f *pauseFault) Name() string     { return "pause-" + string(f.target) }
func (f *pauseFault) Describe() string { return f.detail }

func (f *pauseFault) MinHold(c *cluster.Cluster) time.Duration {
	return 2 * c.Options().ElectionTimeout
}

func (f *pauseFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	m, isLeader, err := pick(ctx, c, f.target)
	if err != nil {
		return err
	}
	f.victim = m
	if err := m.Pause(); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("paused %s (%s)", m.ID, role(isLeader))
	if !isLeader {
		return nil
	}
	// The rest elect a new leader: longer than the election timeout, for
	// sure.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	next, err := c.Leader(wctx)
	if err != nil {
		return fmt.Errorf("no new leader while %s was paused: %w", m.ID, err)
	}
	f.detail += fmt.Sprintf("; %s elected after %s", next.ID, time.Since(start).Round(time.Millisecond))
	return nil
}

func (f *pauseFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil || !f.victim.Paused() {
		return nil
	}
	return f.victim.Resume()
}

// killManyFault is kill -9 of several members at once.
type killManyFault struct {
	name    string
	count   func(serving int) int
	victims []*cluster.Member
	detail  string
}

// KillMajority returns the fault that SIGKILLs a majority of the serving
// members at once, the leader among them: the cluster has no quorum until
// Heal restarts them from their data directories.
func KillMajority() Fault {
	return &killManyFault{name: "kill-majority", count: func(n int) int { return n/2 + 1 }}
}

// KillAll returns the fault that SIGKILLs every serving member at once,
// as a power loss of the whole cluster does; Heal restarts them all.
func KillAll() Fault {
	return &killManyFault{name: "kill-all", count: func(n int) int { return n }}
}

func (f *killManyFault) Name() string     { return f.name }
func (f *killManyFault) Describe() string { return f.detail }

func (f *killManyFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	serving := c.Serving()
	rest := c.Followers(leader)
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	f.victims = append([]*cluster.Member{leader}, rest[:f.count(len(serving))-1]...)
	var ids []string
	var errs []error
	for _, m := range f.victims {
		ids = append(ids, m.ID)
		if err := m.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	f.detail = fmt.Sprintf("killed %v of %d (leader %s among them)", ids, len(serving), leader.ID)
	return errors.Join(errs...)
}

func (f *killManyFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	return restartAll(ctx, f.victims, &f.detail)
}

// restartAll starts every member of victims that is down and notes it in
// detail.
func restartAll(ctx context.Context, victims []*cluster.Member, detail *string) error {
	var errs []error
	for _, m := range victims {
		if !m.Running() {
			if err := m.Start(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(victims) > 0 {
		*detail += ", restarted"
	}
	return errors.Join(errs...)
}

// powerLossFault is a crash of members' machines: the writes they had not
// fsynced are lost (cluster.Member.PowerLoss).
type powerLossFault struct {
	name    string
	all     bool
	mode    lossyfs.Mode
	victims []*cluster.Member
	detail  string
}

// PowerLoss returns the fault that crashes the leader's machine: SIGKILL,
// every write to its data directory not yet fsynced dropped, a new boot id;
// Heal restarts it. The cluster must run with Options.LossyDisk.
func PowerLoss() Fault { return &powerLossFault{name: "power-loss-leader", mode: lossyfs.Lose} }

// PowerLossAll returns the fault that crashes every member's machine at
// once, each losing every write it had not fsynced; Heal restarts them.
func PowerLossAll() Fault {
	return &powerLossFault{name: "power-loss-all", all: true, mode: lossyfs.Lose}
}

// PowerLossAllTorn returns the fault that crashes every member's machine
// at once, each keeping a random half of its unsynced pages (torn
// writes); Heal restarts them all.
func PowerLossAllTorn() Fault {
	return &powerLossFault{name: "power-loss-all-torn", all: true, mode: lossyfs.Tear}
}

func (f *powerLossFault) Name() string         { return f.name }
func (f *powerLossFault) Describe() string     { return f.detail }
func (f *powerLossFault) NeedsLossyDisk() bool { return true }

func (f *powerLossFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	f.victims = []*cluster.Member{leader}
	if f.all {
		f.victims = c.Serving()
	}
	var parts []string
	var errs []error
	for _, m := range f.victims {
		n, err := m.PowerLoss(f.mode)
		if err != nil {
			errs = append(errs, err)
		}
		parts = append(parts, fmt.Sprintf("%s (%s) lost %d unsynced pages", m.ID, role(m == leader), n))
	}
	f.detail = "power loss: " + strings.Join(parts, ", ")
	return errors.Join(errs...)
}

func (f *powerLossFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	return restartAll(ctx, f.victims, &f.detail)
}
