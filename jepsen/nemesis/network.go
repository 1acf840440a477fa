package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/tcpproxy"
)

// PartitionKind is a shape of network partition.
type PartitionKind string

// Partition shapes. Roles are taken when the fault is injected.
const (
	// IsolateLeader cuts the leader off from every other member.
	IsolateLeader PartitionKind = "isolate-leader"
	// IsolateFollower cuts one follower off.
	IsolateFollower PartitionKind = "isolate-follower"
	// MajorityMinority splits the members at random into a majority and
	// a minority that cannot talk to each other.
	MajorityMinority PartitionKind = "majority-minority"
	// BridgePartition picks a bridge member that still talks to everyone
	// and splits the others into two sides that cannot talk to each
	// other.
	BridgePartition PartitionKind = "bridge"
	// OneWayLeaderToFollower drops what the leader sends to one follower
	// (on connections the leader opens); the follower still reaches the
	// leader.
	OneWayLeaderToFollower PartitionKind = "one-way-leader-to-follower"
	// OneWayFollowerToLeader drops what one follower sends to the leader.
	OneWayFollowerToLeader PartitionKind = "one-way-follower-to-leader"
)

type partitionFault struct {
	kind   PartitionKind
	grudge cluster.Grudge
}

// Partition returns the fault that installs a partition of the given
// shape with iptables in the members' namespaces (see cluster.Partition);
// Heal removes it.
func Partition(k PartitionKind) Fault { return &partitionFault{kind: k} }

func (f *partitionFault) Name() string { return "partition-" + string(f.kind) }
func (f *partitionFault) Describe() string {
	if f.grudge == nil {
		return ""
	}
	return "dropped " + f.grudge.String()
}

func (f *partitionFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	serving := c.Serving()
	ids := cluster.IDs(serving)
	followers := cluster.IDs(c.Followers(leader))
	if len(followers) == 0 {
		return fmt.Errorf("no follower")
	}
	follower := followers[rand.IntN(len(followers))]
	switch f.kind {
	case IsolateLeader:
		f.grudge = cluster.Isolate(leader.ID, ids)
	case IsolateFollower:
		f.grudge = cluster.Isolate(follower, ids)
	case MajorityMinority:
		shuffled := append([]string(nil), ids...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		k := len(shuffled) / 2 // minority size
		if k == 0 {
			return fmt.Errorf("%d members cannot be split", len(ids))
		}
		f.grudge = cluster.Components(shuffled[:k], shuffled[k:])
	case BridgePartition:
		if len(ids) < 3 {
			return fmt.Errorf("a bridge needs 3 members, %d serve", len(ids))
		}
		shuffled := append([]string(nil), ids...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		rest := shuffled[1:]
		half := len(rest) / 2
		f.grudge = cluster.Bridge(shuffled[0], rest[:half], rest[half:])
	case OneWayLeaderToFollower:
		f.grudge = cluster.OneWay(leader.ID, follower)
	case OneWayFollowerToLeader:
		f.grudge = cluster.OneWay(follower, leader.ID)
	default:
		return fmt.Errorf("unknown partition kind %q", f.kind)
	}
	return c.Partition(ctx, f.grudge)
}

func (f *partitionFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	return c.Heal(ctx)
}

type linkFault struct {
	name   string
	link   tcpproxy.Link
	leader string // set: only the Raft links into the leader
	detail string
}

// LinkDelay returns the fault that delays every Raft link by delay plus a
// random part of jitter, in each direction (cluster.SetLinks).
func LinkDelay(delay, jitter time.Duration) Fault {
	return &linkFault{name: "link-delay", link: tcpproxy.Link{Delay: delay, Jitter: jitter}}
}

// LinkLoss returns the fault that resets Raft connections at random:
// resetProb per forwarded chunk, refuseProb per new connection.
func LinkLoss(resetProb, refuseProb float64) Fault {
	return &linkFault{name: "link-loss", link: tcpproxy.Link{ResetProb: resetProb, RefuseProb: refuseProb}}
}

// LinkBlackholeLeader returns the fault that stops forwarding on every
// Raft connection the leader opens to a follower (its appends and
// heartbeats stall with the connections open, as in a network that drops
// packets and lets TCP retransmit), while the followers' connections to
// the leader still work: the followers elect a new leader, whose messages
// reach the old one. Heal releases what was held, stale RPCs included.
func LinkBlackholeLeader() Fault {
	return &linkFault{name: "link-blackhole-leader", link: tcpproxy.Link{Blackhole: true}, leader: "?"}
}

func (f *linkFault) Name() string     { return f.name }
func (f *linkFault) Describe() string { return f.detail }

func (f *linkFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	if f.leader != "" {
		leader, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		f.leader = leader.ID
		for _, m := range c.Followers(leader) {
			if err := c.SetLink(leader.ID, m.ID, f.link); err != nil {
				return err
			}
		}
		f.detail = fmt.Sprintf("Raft links from %s (leader) to its followers: %+v", leader.ID, f.link)
		return nil
	}
	c.SetLinks(f.link)
	f.detail = fmt.Sprintf("all Raft links: %+v", f.link)
	return nil
}

func (f *linkFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	c.ClearLinks()
	return nil
}
