package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
)

// waitVoters waits until the leader's configuration has exactly the voters
// want (sorted).
func waitVoters(ctx context.Context, c *cluster.Cluster, want []string) error {
	slices.Sort(want)
	var last []string
	for {
		if l, err := c.Leader(ctx); err == nil {
			if st, err := c.Status(ctx, l); err == nil {
				last = st.Voters()
				if slices.Equal(last, want) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("voters %v, want %v: %w", last, want, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaderVoters returns the leader and the voters of its configuration.
func leaderVoters(ctx context.Context, c *cluster.Cluster) (*cluster.Member, []string, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		return nil, nil, err
	}
	return leader, st.Voters(), nil
}

func without(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(x string) bool { return x == id })
}

type rejoinFault struct {
	victim *cluster.Member
	voters []string
	detail string
}

// MemberRejoin returns the fault that removes a follower from the cluster
// (DELETE /v1/members/{id}), kills it and wipes its data directory; Heal
// starts it empty with --join and waits until it is a voter again (and, in
// the Runner's health check, has caught up).
func MemberRejoin() Fault { return &rejoinFault{} }

func (f *rejoinFault) Name() string     { return "member-rejoin" }
func (f *rejoinFault) Describe() string { return f.detail }

func (f *rejoinFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, voters, err := leaderVoters(ctx, c)
	if err != nil {
		return err
	}
	f.voters = voters
	fs := c.Followers(leader)
	if len(fs) == 0 {
		return fmt.Errorf("no follower")
	}
	f.victim = fs[len(fs)-1]
	if _, err := c.Send(ctx, "DELETE", "/v1/members/"+f.victim.ID, nil, nil); err != nil {
		return fmt.Errorf("remove %s: %w", f.victim.ID, err)
	}
	if err := waitVoters(ctx, c, without(f.voters, f.victim.ID)); err != nil {
		return err
	}
	if err := f.victim.Kill(); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("removed, killed and wiped %s", f.victim.ID)
	return f.victim.Wipe()
}

func (f *rejoinFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil {
		return nil
	}
	if f.victim.Running() {
		// Inject stopped half way: still a voter means nothing happened.
		if l, err := c.Leader(ctx); err == nil {
			if st, err := c.Status(ctx, l); err == nil && slices.Contains(st.Voters(), f.victim.ID) {
				return nil
			}
		}
		if err := f.victim.Kill(); err != nil {
			return err
		}
	}
	if err := f.victim.Wipe(); err != nil {
		return err
	}
	if err := f.victim.StartJoin(ctx); err != nil {
		return err
	}
	f.detail += "; rejoined empty with --join"
	return waitVoters(ctx, c, f.voters)
}

type spareFault struct {
	spare  *cluster.Member
	voters []string
	detail string
}

// SpareJoin returns the fault that starts the first spare member with
// --join and waits until it is a voter (the cluster grows by one, the
// spare is sent the state, by snapshot if the log was compacted); Heal
// removes it again, stops it and wipes it.
func SpareJoin() Fault { return &spareFault{} }

func (f *spareFault) Name() string     { return "spare-join" }
func (f *spareFault) Describe() string { return f.detail }

func (f *spareFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	for _, m := range c.Members() {
		if m.Spare && !m.Running() {
			f.spare = m
			break
		}
	}
	if f.spare == nil {
		return fmt.Errorf("no idle spare member (Options.Spares)")
	}
	_, voters, err := leaderVoters(ctx, c)
	if err != nil {
		return err
	}
	f.voters = voters
	if err := f.spare.Wipe(); err != nil {
		return err
	}
	if err := f.spare.StartJoin(ctx); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("%s joined", f.spare.ID)
	return waitVoters(ctx, c, append(slices.Clone(f.voters), f.spare.ID))
}

func (f *spareFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.spare == nil {
		return nil
	}
	if _, err := c.Send(ctx, "DELETE", "/v1/members/"+f.spare.ID, nil, nil); err != nil {
		return fmt.Errorf("remove %s: %w", f.spare.ID, err)
	}
	if err := waitVoters(ctx, c, without(f.voters, f.spare.ID)); err != nil {
		return err
	}
	if err := f.spare.Kill(); err != nil {
		return err
	}
	f.detail += "; removed and wiped again"
	return f.spare.Wipe()
}

type transferFault struct{ detail string }

// LeaderTransfer returns the fault that asks the leader to hand leadership
// to another voter (POST /v1/leader/transfer) and checks that it did. Heal
// does nothing.
func LeaderTransfer() Fault { return &transferFault{} }

func (f *transferFault) Name() string     { return "leader-transfer" }
func (f *transferFault) Describe() string { return f.detail }

func (f *transferFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	r, err := c.Do(ctx, leader, "POST", "/v1/leader/transfer", nil)
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return fmt.Errorf("transfer from %s: %w", leader.ID, err)
	}
	next, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if next == leader {
		return fmt.Errorf("%s is still the leader after the transfer", leader.ID)
	}
	f.detail = fmt.Sprintf("leadership %s -> %s", leader.ID, next.ID)
	return nil
}

func (f *transferFault) Heal(context.Context, *cluster.Cluster) error { return nil }

type membershipKillFault struct {
	remove bool // remove a follower (else: add the spare)
	target *cluster.Member
	leader *cluster.Member
	voters []string
	detail string
}

// MembershipKillLeader returns the fault that kills the leader while a
// membership change is under way: it adds the spare (started with --join)
// or removes a follower (DELETE /v1/members/{id}), at random, and kills
// the leader as soon as the leader's configuration shows the change (the
// entry appended, maybe not committed), or after two seconds. Heal
// restarts the old leader and brings the configuration back to the
// voters it had: the spare removed and wiped if it made it in, the
// follower wiped and re-joined if its removal was committed.
func MembershipKillLeader() Fault { return &membershipKillFault{} }

func (f *membershipKillFault) Name() string     { return "membership-kill-leader" }
func (f *membershipKillFault) Describe() string { return f.detail }

func (f *membershipKillFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	*f = membershipKillFault{}
	leader, voters, err := leaderVoters(ctx, c)
	if err != nil {
		return err
	}
	f.leader, f.voters = leader, voters
	for _, m := range c.Members() {
		if m.Spare && !m.Running() {
			f.target = m
			break
		}
	}
	fs := c.Followers(leader)
	if f.target == nil || rand.IntN(2) == 0 {
		if len(fs) == 0 {
			return fmt.Errorf("no follower to remove and no idle spare to add")
		}
		f.remove, f.target = true, fs[rand.IntN(len(fs))]
	}
	// The request may hang or be retried while its leader is dead: it
	// gets a few seconds of its own, and Inject does not wait longer.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	change := make(chan error, 1)
	if f.remove {
		go func() {
			_, err := c.Send(rctx, "DELETE", "/v1/members/"+f.target.ID, nil, nil)
			change <- err
		}()
	} else {
		if err := f.target.Wipe(); err != nil {
			return err
		}
		go func() { change <- f.target.StartJoin(rctx) }()
	}
	// The change is in the leader's configuration once the entry is
	// appended: kill then, before it is known to be committed.
	seen := false
	deadline := time.Now().Add(2 * time.Second)
	for !seen && time.Now().Before(deadline) {
		if st, err := c.Status(ctx, leader); err == nil {
			seen = slices.Contains(st.Voters(), f.target.ID) == !f.remove
		}
		if !seen {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if err := leader.Kill(); err != nil {
		return err
	}
	verb := "adding"
	if f.remove {
		verb = "removing"
	}
	f.detail = fmt.Sprintf("killed %s (leader) while %s %s (change seen in its configuration: %v)", leader.ID, verb, f.target.ID, seen)
	f.detail += fmt.Sprintf("; the change request answered: %v", errOrOK(<-change))
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (f *membershipKillFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.leader == nil {
		return nil
	}
	// A follower whose removal was committed but never reached it keeps
	// asking for votes in a configuration that no longer has it (Raft
	// tells a removed server nothing): stop it before looking for the
	// leader, as an operator stops a removed machine. It is started
	// again below if it is still a voter.
	if f.remove && f.target.Running() {
		if err := f.target.Kill(); err != nil {
			return err
		}
	}
	if !f.leader.Running() {
		if err := f.leader.Start(ctx); err != nil {
			return err
		}
	}
	_, voters, err := leaderVoters(ctx, c)
	if err != nil {
		return err
	}
	in := slices.Contains(voters, f.target.ID)
	switch {
	case f.remove && in:
		f.detail += "; the removal did not take"
		if err := f.target.Start(ctx); err != nil {
			return err
		}
	case f.remove:
		f.detail += "; the removal took: " + f.target.ID + " re-joined empty"
		if err := f.target.Wipe(); err != nil {
			return err
		}
		if err := f.target.StartJoin(ctx); err != nil {
			return err
		}
	case in:
		f.detail += "; the addition took: " + f.target.ID + " removed again"
		if _, err := c.Send(ctx, "DELETE", "/v1/members/"+f.target.ID, nil, nil); err != nil {
			return fmt.Errorf("remove %s: %w", f.target.ID, err)
		}
		if err := waitVoters(ctx, c, slices.Clone(f.voters)); err != nil {
			return err
		}
		fallthrough
	default:
		if !in {
			f.detail += "; the addition did not take"
		}
		if f.target.Running() {
			if err := f.target.Kill(); err != nil {
				return err
			}
		}
		if err := f.target.Wipe(); err != nil {
			return err
		}
	}
	return waitVoters(ctx, c, slices.Clone(f.voters))
}
