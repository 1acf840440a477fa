package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
)

// Skewer is implemented by faults that set members' clocks off: the
// largest skew (absolute) they set. The checkers widen what they derive
// from the leader's clock (lease ends, completion order) by it.
type Skewer interface {
	ClockSkew() time.Duration
}

// clockFault sets the members' clocks apart.
type clockFault struct {
	max    time.Duration
	skewed []*cluster.Member
	detail string
}

// ClockSkew returns the fault that sets the clock of every serving member
// (faultinject builds: internal/clock) off the machine's by a random
// amount in [-max, max], the leader's by at least 2/3 of max, so that the
// clock stamped into commands (upload leases, GC grace, ack deadlines)
// jumps with the leadership; Heal sets every clock right again.
func ClockSkew(max time.Duration) Fault { return &clockFault{max: max} }

func (f *clockFault) Name() string             { return "clock-skew" }
func (f *clockFault) Describe() string         { return f.detail }
func (f *clockFault) ClockSkew() time.Duration { return f.max }

func (f *clockFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	var parts []string
	for _, m := range c.Serving() {
		d := time.Duration(rand.Int64N(int64(2*f.max+1))) - f.max
		if m == leader && d.Abs() < 2*f.max/3 {
			d = 2 * f.max / 3
			if rand.IntN(2) == 0 {
				d = -d
			}
		}
		d = d.Round(time.Millisecond)
		if err := m.SetClockSkew(d); err != nil {
			return err
		}
		f.skewed = append(f.skewed, m)
		parts = append(parts, fmt.Sprintf("%s %+v", m.ID, d))
	}
	sort.Strings(parts)
	f.detail = "clocks off by " + strings.Join(parts, ", ") + " (leader " + leader.ID + ")"
	return nil
}

func (f *clockFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	var errs []error
	for _, m := range f.skewed {
		if err := m.SetClockSkew(0); err != nil {
			errs = append(errs, err)
		}
	}
	f.skewed = nil
	return errors.Join(errs...)
}
