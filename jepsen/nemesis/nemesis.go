// Package nemesis injects faults into a cluster under test (package
// jepsen/cluster): process crashes and pauses, network partitions, slow and
// lossy Raft links, snapshot installs, membership changes, leadership
// transfers, object-store failures, disk faults (EIO, ENOSPC, fsync
// stalls), and crashes at fault points compiled into the metastore's
// faultinject build.
//
// Every fault implements Fault. A Runner runs one: it checks the cluster
// is healthy (cluster.WaitCaughtUp: one leader, every voter serving, ready
// and caught up with the leader's commit index), injects, holds the fault, heals, and
// checks the cluster is healthy again, reporting each step as an Event (for
// a workload's history) and the whole as a Result. A workload runs its
// clients concurrently with Runner.Run; the faults themselves write only
// what they need (a few jobs named nemesis-*, and a stream of job-config
// writes to push the log past a snapshot).
//
// A Fault value picks its targets at Inject and remembers them for Heal, so
// it serves one Run at a time; build a new one (or reuse it sequentially)
// for each run. Catalog returns one of every fault.
//
// The faults, and how each is made:
//
//	kill-leader, kill-follower,   SIGKILL of the member's process; heal
//	kill-random                   restarts it from its data directory
//	kill-majority, kill-all       SIGKILL of a majority (the leader among
//	                              them) or of every member at once; heal
//	                              restarts them
//	pause-leader                  SIGSTOP of the leader until the others
//	                              have elected a new one (at least
//	                              2x the election timeout); heal SIGCONTs
//	pause-follower                SIGSTOP of a follower (at least 2x the
//	                              election timeout); heal SIGCONTs
//	partition-isolate-leader,     iptables DROP rules in the members'
//	partition-isolate-follower,   namespaces (cluster.Partition); heal
//	partition-majority-minority,  removes them. bridge: one member sees
//	partition-bridge,             both sides, the sides not each other.
//	partition-one-way-*           one-way: everything one member sends to
//	                              the other is dropped, answers on the
//	                              other's connections included (iptables
//	                              and a hold in the Raft proxy)
//	link-delay, link-loss,        the userspace Raft proxies
//	link-blackhole-leader         (cluster.SetLinks): latency with jitter,
//	                              random connection resets and refusals,
//	                              or nothing forwarded to the leader
//	snapshot-install              a follower is cut off until the leader
//	                              snapshots past its trailing logs; after
//	                              the heal the follower must install the
//	                              snapshot (its log says so)
//	member-rejoin                 DELETE /v1/members/{id} of a follower,
//	                              kill, wipe; heal starts it empty with
//	                              --join and waits until it votes again
//	spare-join                    the spare joins (4 voters), heal
//	                              removes and wipes it again
//	leader-transfer               POST /v1/leader/transfer
//	membership-kill-leader        the spare added (--join) or a follower
//	                              removed, and the leader killed as soon
//	                              as its configuration shows the change;
//	                              heal restarts it and restores the voters
//	s3-errors, s3-timeouts,       rules of the S3 proxy (cluster.S3):
//	s3-lost-put, s3-lost-delete   5xx answers, held-then-dropped requests,
//	                              PUT or DELETE applied but the reply lost
//	s3-slow                       30% of requests delayed 0.5 s to 2 s
//	s3-late-put                   half the PUTs read in full, held until
//	                              the worker gives up, then forwarded:
//	                              the object lands after the failure
//	                              (Describe counts them)
//	s3-corrupt-get                30% of GET answers with 1 to 3 bytes
//	                              flipped (same length); restores verify
//	                              each range's CRC32C and read again
//	gc-crash-after-mark           the leader crashes at the fault point
//	                              between a GC deleting mark and the delete;
//	                              after the heal the new leader must have
//	                              finished the deletion (blob gone)
//	snapshot-persist-crash        a member crashes inside snapshot persist;
//	                              heal restarts it
//	power-loss-leader,            the machine of the leader (or of every
//	power-loss-all,               member) crashes: SIGKILL, every write
//	power-loss-all-torn           not fsynced dropped (torn: a random half
//	                              of the pages dropped) by jepsen/lossyfs,
//	                              a new boot id; heal restarts (needs
//	                              cluster.Options.LossyDisk: DiskNeeder)
//	disk-eio-leader               half the writes and fsyncs of the leader's
//	                              Raft log (raft/wal/) fail with EIO
//	                              (jepsen/lossyfs SetFault); the member
//	                              must step down or stop (its panic on
//	                              EIO is expected: PanicExpecter); heal
//	                              clears it, restarts the member if it
//	                              exited (LossyDisk)
//	disk-full-follower            a follower's disk is full: writes that
//	                              need space, fallocate and growing
//	                              truncations fail with ENOSPC, statfs
//	                              reports no space; heal clears it,
//	                              restarts the member if it exited
//	fsync-stall-leader            every fsync of the leader's files is held
//	                              3s (until the heal); heal releases them
//	clock-skew                    every member's clock set off by up to
//	                              90s (the leader's by 60s or more, an
//	                              upload lease); heal sets them right
//	point-ACTION-POINT-TARGET     (ArmPoint, not in Catalog) any fault point
//	                              armed with any action for the hold
//	A&B                           (Together, not in Catalog) faults in
//	                              force at once, healed in reverse order
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
)

// Fault is one kind of failure.
type Fault interface {
	// Name identifies the fault ("kill-leader").
	Name() string
	// Inject starts the fault. It returns once the fault is in force
	// (a process is dead, a rule installed, a crash observed).
	Inject(ctx context.Context, c *cluster.Cluster) error
	// Heal ends the fault and verifies what the fault promises to verify
	// (a snapshot installed, a deletion finished). It is called after
	// every Inject, even a failed one, and must tolerate a partial
	// injection.
	Heal(ctx context.Context, c *cluster.Cluster) error
}

// DiskNeeder is implemented by faults that need the members' data
// directories on lossy disks (cluster.Options.LossyDisk).
type DiskNeeder interface {
	NeedsLossyDisk() bool
}

// Describer is implemented by faults that can say what they did
// ("killed n2 (leader)"), after Inject.
type Describer interface {
	Describe() string
}

// PanicExpecter is implemented by faults that make a member panic on
// purpose: the store stops with a panic on an I/O error it cannot recover
// from. The logs checker skips panics whose line matches one of these.
type PanicExpecter interface {
	ExpectedPanics() []*regexp.Regexp
}

// MinHolder is implemented by faults that must stay in force for a
// minimum time.
type MinHolder interface {
	MinHold(c *cluster.Cluster) time.Duration
}

// Phase is a step of a Run.
type Phase string

// Phases, in order.
const (
	PhaseCheckBefore Phase = "check-before"
	PhaseInject      Phase = "inject"
	PhaseInjected    Phase = "injected"
	PhaseHeal        Phase = "heal"
	PhaseHealed      Phase = "healed"
	PhaseCheckAfter  Phase = "check-after"
)

// Event reports one step of a Run. Err is set if the step failed.
type Event struct {
	Time   time.Time
	Fault  string
	Phase  Phase
	Detail string
	Err    error
}

// Result is the outcome of one Run.
type Result struct {
	Fault  string
	Detail string
	// Injected and Healed are when Inject and Heal returned.
	Injected, Healed time.Time
	// HealthyAfter is how long after Heal the cluster was healthy again.
	HealthyAfter time.Duration
	// ClockSkew is the largest clock skew the fault set (Skewer).
	ClockSkew time.Duration
	// Err is the first failure: unhealthy before, inject, heal, or
	// unhealthy after.
	Err error
}

// Runner runs faults against a cluster.
type Runner struct {
	Cluster *cluster.Cluster
	// Hold is how long a fault stays in force between Inject and Heal
	// (at least the fault's MinHold); default 2s.
	Hold time.Duration
	// HealthTimeout bounds each health check; default 90s.
	HealthTimeout time.Duration
	// InjectTimeout bounds Inject and HealTimeout bounds Heal; default
	// 3m each.
	InjectTimeout time.Duration
	HealTimeout   time.Duration
	// During, if set, runs while the fault is in force: it starts after a
	// successful Inject, its context ends when the hold time is over, and
	// Heal waits for it to return. (A workload usually runs on its own,
	// across many Runs; During is for traffic one fault needs.)
	During func(ctx context.Context, f Fault)
	// OnEvent, if set, receives every step.
	OnEvent func(Event)
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)

	healthyAt time.Time // when the last check after passed
}

func (r *Runner) emit(f Fault, p Phase, detail string, err error) {
	if r.Logf != nil {
		if err != nil {
			r.Logf("nemesis: %s %s: %s: %v", f.Name(), p, detail, err)
		} else {
			r.Logf("nemesis: %s %s %s", f.Name(), p, detail)
		}
	}
	if r.OnEvent != nil {
		r.OnEvent(Event{Time: time.Now(), Fault: f.Name(), Phase: p, Detail: detail, Err: err})
	}
}

// Run checks health (unless the previous Run's check after passed less
// than a second ago), injects f, holds it, heals it and checks health
// again. Heal runs even if Inject failed or ctx ended (under its own
// timeout), so a Run never leaves a fault behind.
func (r *Runner) Run(ctx context.Context, f Fault) Result {
	c := r.Cluster
	res := Result{Fault: f.Name()}
	if sk, ok := f.(Skewer); ok {
		res.ClockSkew = sk.ClockSkew()
	}
	healthTimeout := durationOr(r.HealthTimeout, 90*time.Second)

	// The previous run's check after stands for this run's check before
	// when it passed a moment ago.
	if time.Since(r.healthyAt) > time.Second {
		r.emit(f, PhaseCheckBefore, "", nil)
		hctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := c.WaitCaughtUp(hctx)
		cancel()
		if err != nil {
			res.Err = fmt.Errorf("unhealthy before %s: %w", f.Name(), err)
			r.emit(f, PhaseCheckBefore, "", res.Err)
			return res
		}
	}

	r.emit(f, PhaseInject, "", nil)
	ictx, cancel := context.WithTimeout(ctx, durationOr(r.InjectTimeout, 3*time.Minute))
	injectErr := f.Inject(ictx, c)
	cancel()
	res.Injected = time.Now()
	if d, ok := f.(Describer); ok {
		res.Detail = d.Describe()
	}
	if injectErr != nil {
		res.Err = fmt.Errorf("inject %s: %w", f.Name(), injectErr)
		r.emit(f, PhaseInjected, res.Detail, res.Err)
	} else {
		r.emit(f, PhaseInjected, res.Detail, nil)
		hold := durationOr(r.Hold, 2*time.Second)
		if mh, ok := f.(MinHolder); ok {
			hold = max(hold, mh.MinHold(c))
		}
		dctx, dcancel := context.WithDeadline(ctx, res.Injected.Add(hold))
		if r.During != nil {
			r.During(dctx, f)
		}
		<-dctx.Done()
		dcancel()
	}

	r.emit(f, PhaseHeal, res.Detail, nil)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), durationOr(r.HealTimeout, 3*time.Minute))
	healErr := f.Heal(hctx, c)
	cancel()
	res.Healed = time.Now()
	if d, ok := f.(Describer); ok {
		res.Detail = d.Describe()
	}
	if healErr != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("heal %s: %w", f.Name(), healErr))
	}
	r.emit(f, PhaseHealed, res.Detail, healErr)

	hctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	err := c.WaitCaughtUp(hctx)
	cancel()
	res.HealthyAfter = time.Since(res.Healed)
	if err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("unhealthy after %s: %w", f.Name(), err))
	} else {
		r.healthyAt = time.Now()
	}
	r.emit(f, PhaseCheckAfter, fmt.Sprintf("healthy %s after heal", res.HealthyAfter.Round(time.Millisecond)), err)
	return res
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Catalog returns one of every fault, with durations suited to a short
// run.
func Catalog() []Fault {
	return []Fault{
		Kill(Leader), Kill(Follower), Kill(Random),
		KillMajority(), KillAll(),
		PauseLeader(), PauseFollower(),
		Partition(IsolateLeader), Partition(IsolateFollower), Partition(MajorityMinority),
		Partition(BridgePartition), Partition(OneWayLeaderToFollower), Partition(OneWayFollowerToLeader),
		LinkDelay(50*time.Millisecond, 50*time.Millisecond), LinkLoss(0.02, 0.1), LinkBlackholeLeader(),
		SnapshotInstall(),
		MemberRejoin(), SpareJoin(), LeaderTransfer(), MembershipKillLeader(),
		S3Errors(0.3), S3Timeouts(2*time.Second, 0.3), S3LostReply(LostPut), S3LostReply(LostDelete),
		S3Slow(500*time.Millisecond, 1500*time.Millisecond, 0.3), S3LatePut(time.Minute, 0.5), S3CorruptGet(0.3),
		GCCrashAfterMark(), SnapshotPersistCrash(),
		ClockSkew(90 * time.Second),
		PowerLoss(), PowerLossAll(), PowerLossAllTorn(),
		DiskEIO(Leader), DiskFull(Follower), FsyncStall(Leader, 3*time.Second),
	}
}

// togetherFault is several faults in force at once.
type togetherFault struct {
	faults   []Fault
	injected int
}

// Together returns the fault that injects each of faults in turn (each
// while the ones before are in force: a partition while a member is dead,
// a kill while a member is removed) and heals them in the reverse order.
func Together(faults ...Fault) Fault { return &togetherFault{faults: faults} }

func (f *togetherFault) Name() string {
	names := make([]string, len(f.faults))
	for i, x := range f.faults {
		names[i] = x.Name()
	}
	return strings.Join(names, "&")
}

func (f *togetherFault) Describe() string {
	var parts []string
	for _, x := range f.faults[:f.injected] {
		if d, ok := x.(Describer); ok && d.Describe() != "" {
			parts = append(parts, d.Describe())
		}
	}
	return strings.Join(parts, "; ")
}

func (f *togetherFault) NeedsLossyDisk() bool {
	for _, x := range f.faults {
		if dn, ok := x.(DiskNeeder); ok && dn.NeedsLossyDisk() {
			return true
		}
	}
	return false
}

func (f *togetherFault) ExpectedPanics() []*regexp.Regexp {
	var out []*regexp.Regexp
	for _, x := range f.faults {
		if pe, ok := x.(PanicExpecter); ok {
			out = append(out, pe.ExpectedPanics()...)
		}
	}
	return out
}

func (f *togetherFault) ClockSkew() time.Duration {
	var d time.Duration
	for _, x := range f.faults {
		if sk, ok := x.(Skewer); ok {
			d = max(d, sk.ClockSkew())
		}
	}
	return d
}

func (f *togetherFault) MinHold(c *cluster.Cluster) time.Duration {
	var d time.Duration
	for _, x := range f.faults {
		if mh, ok := x.(MinHolder); ok {
			d = max(d, mh.MinHold(c))
		}
	}
	return d
}

func (f *togetherFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	f.injected = 0
	for _, x := range f.faults {
		f.injected++
		if err := x.Inject(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", x.Name(), err)
		}
	}
	return nil
}

func (f *togetherFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	var errs []error
	for i := f.injected - 1; i >= 0; i-- {
		if err := f.faults[i].Heal(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.faults[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}
