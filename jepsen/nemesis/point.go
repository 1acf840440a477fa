package nemesis

import (
	"context"
	"fmt"

	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/cluster"
)

type pointFault struct {
	point  string
	target Target
	arm    faultpoint.Arm
	victim *cluster.Member
	detail string
}

// ArmPoint returns a fault that arms the fault point (faultpoint.GCAfterMark,
// faultpoint.SnapshotPersist) on the target member with arm, for as long as
// the fault holds: Inject arms it and returns at once (the workload's
// traffic reaches the point, or not); Heal disarms it, which releases
// goroutines paused there, and restarts the member if it crashed there.
//
// For example ArmPoint(faultpoint.GCAfterMark, Leader, faultpoint.Arm{Action:
// faultpoint.Pause}) holds the leader's collector between a deleting mark
// and the delete while the rest of the system goes on, which combined with
// a partition (run both faults, or a Fault of your own that calls both)
// makes a deposed leader delete late.
func ArmPoint(point string, t Target, arm faultpoint.Arm) Fault {
	return &pointFault{point: point, target: t, arm: arm}
}

func (f *pointFault) Name() string {
	return fmt.Sprintf("point-%s-%s-%s", f.arm.Action, f.point, f.target)
}
func (f *pointFault) Describe() string { return f.detail }

func (f *pointFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	m, isLeader, err := pick(ctx, c, f.target)
	if err != nil {
		return err
	}
	f.victim = m
	if _, err := m.Faults().Set(ctx, f.point, f.arm); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("armed %s at %s on %s (%s)", f.arm.Action, f.point, m.ID, role(isLeader))
	return nil
}

func (f *pointFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil {
		return nil
	}
	if f.victim.Paused() {
		if err := f.victim.Resume(); err != nil {
			return err
		}
	}
	if !f.victim.Running() {
		f.detail += fmt.Sprintf("; %s exited (%v), restarted", f.victim.ID, f.victim.LastExit())
		return f.victim.Start(ctx)
	}
	st, err := f.victim.Faults().Get(ctx, f.point)
	if err != nil {
		return err
	}
	if _, err := f.victim.Faults().Set(ctx, f.point, faultpoint.Arm{Action: faultpoint.Off}); err != nil {
		return err
	}
	f.detail += fmt.Sprintf("; fired %d times (%d goroutines were paused there), disarmed", st.Fired, st.Paused)
	return nil
}
