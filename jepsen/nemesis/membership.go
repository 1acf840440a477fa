package nemesis

import (
	"context"
	"fmt"
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
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		return err
	}
	f.voters = st.Voters()
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
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		return err
	}
	f.voters = st.Voters()
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
