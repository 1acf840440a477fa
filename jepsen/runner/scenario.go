// Package runner runs the consistency suite's scenarios: for each, a fresh
// cluster of metastore processes (package jepsen/cluster), the workload
// (jepsen/workload) running while a fault (jepsen/nemesis) is injected and
// healed again and again, then a heal, quiescence, the final GC cycles, the
// collection of the final state and the checkers (jepsen/checker).
//
// Tiers: Short (about ten scenarios, one fault each, for CI) and Long (every
// fault of the nemesis catalog, for a count of scenarios of a given
// duration). cmd/jepsen is the command line; TestShortTier runs the short
// tier as a Go test when METASTORE_JEPSEN=short.
package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/nemesis"
)

// Scenario is one run: a fault injected repeatedly while the workload runs.
type Scenario struct {
	Name string
	// Faults make the faults injected in turn (a fresh value per
	// injection); none: the workload runs without faults.
	Faults []func() nemesis.Fault
	// Duration of the workload.
	Duration time.Duration
	// Hold is how long each fault stays in force (default 5s).
	Hold time.Duration
	// FirstFault is when the first fault is injected, from the
	// workload's start (default 1s). A power loss needs time for
	// unsynced writes to pile up: at 1s a member had 17-109 unsynced
	// pages, few enough that a torn file could come back whole.
	FirstFault time.Duration
	// Env is added to every member's environment (the positive
	// controls' unsafe switches).
	Env []string
	// ReadersPerMember overrides the workload's readers per member.
	ReadersPerMember int
	// ReuseProb overrides the workload's chance, per ack of a state
	// task, of referencing again a blob the collector may be deleting.
	ReuseProb float64
	// ReuseHold and ReuseWindow: see workload.Config.
	ReuseHold   time.Duration
	ReuseWindow time.Duration
	// GCInterval and GCBatch override the members' GC cycle interval and
	// batch size.
	GCInterval time.Duration
	GCBatch    int
	// HealthTimeout bounds each wait for a healthy cluster, between faults
	// and after the final heal (default 90s and 2m): short for a control
	// expected to leave the cluster down.
	HealthTimeout time.Duration
}

// catalogFault returns a constructor of the catalog's fault named name.
func catalogFault(name string) func() nemesis.Fault {
	for i, f := range nemesis.Catalog() {
		if f.Name() == name {
			return func() nemesis.Fault { return nemesis.Catalog()[i] }
		}
	}
	panic("runner: no fault " + name + " in the nemesis catalog")
}

// FaultNames lists the names of every fault of the nemesis catalog.
func FaultNames() []string {
	var out []string
	for _, f := range nemesis.Catalog() {
		out = append(out, f.Name())
	}
	return out
}

// ShortTier is the CI tier: twelve scenarios of 30 seconds. Faults are in
// force for most of each (a hold of 5s, cycles back to back), several at
// once in half of them (Together): crashes of one member, a majority and
// the whole cluster, followers paused as well as leaders, clocks set
// apart while the leadership moves, one-way cuts that drop answers too,
// a member killed while another is out of the configuration, the leader
// killed in the middle of a membership change, S3 answers corrupted and
// PUTs landing late. The power-loss and disk faults (lossy disks) run in
// the long tier and by name: docs/consistency.md, "Findings", 4.
func ShortTier() []Scenario {
	d := 30 * time.Second
	one := func(name string) Scenario {
		return Scenario{Name: name, Faults: []func() nemesis.Fault{catalogFault(name)}, Duration: d}
	}
	seq := func(names ...string) Scenario {
		sc := Scenario{Name: strings.Join(names, "+"), Duration: d}
		for _, n := range names {
			sc.Faults = append(sc.Faults, catalogFault(n))
		}
		return sc
	}
	return []Scenario{
		one("kill-leader"),
		seq("kill-majority", "kill-all"),
		{Name: "clock-skew&pause-leader", Faults: []func() nemesis.Fault{together("clock-skew", "pause-leader")}, Duration: d},
		{Name: "pause-follower&link-delay", Faults: []func() nemesis.Fault{together("pause-follower", "link-delay")}, Duration: d},
		one("partition-isolate-leader"),
		{Name: "partition-majority-minority&kill-random", Faults: []func() nemesis.Fault{together("partition-majority-minority", "kill-random")}, Duration: d},
		one("partition-one-way-follower-to-leader"),
		seq("link-delay", "link-loss"),
		one("snapshot-install"),
		{Name: "member-rejoin&kill-random+membership-kill-leader+leader-transfer", Faults: []func() nemesis.Fault{together("member-rejoin", "kill-random"), catalogFault("membership-kill-leader"), catalogFault("leader-transfer")}, Duration: d},
		{Name: "s3-errors+s3-lost-replies+s3-corrupt-get+s3-late-put", Faults: []func() nemesis.Fault{catalogFault("s3-errors"), catalogFault("s3-lost-delete"), catalogFault("s3-lost-put"), catalogFault("s3-corrupt-get"), catalogFault("s3-late-put")}, Duration: d, Hold: 3 * time.Second},
		one("gc-crash-after-mark"),
	}
}

// together returns a constructor of the catalog's faults named names in
// force at once (nemesis.Together).
func together(names ...string) func() nemesis.Fault {
	makers := make([]func() nemesis.Fault, len(names))
	for i, n := range names {
		makers[i] = catalogFault(n)
	}
	return func() nemesis.Fault {
		fs := make([]nemesis.Fault, len(makers))
		for i, m := range makers {
			fs[i] = m()
		}
		return nemesis.Together(fs...)
	}
}

// LongTier is count scenarios of the given duration, going round the
// whole nemesis catalog (and starting with a fault-free run when count
// exceeds the catalog).
func LongTier(count int, duration time.Duration) []Scenario {
	names := FaultNames()
	var out []Scenario
	for i := range count {
		name := names[i%len(names)]
		out = append(out, Scenario{Name: name, Faults: []func() nemesis.Fault{catalogFault(name)}, Duration: duration})
	}
	return out
}

// Fault returns a constructor of the catalog's fault named name.
func Fault(name string) (func() nemesis.Fault, error) {
	for _, n := range FaultNames() {
		if n == name {
			return catalogFault(name), nil
		}
	}
	return nil, fmt.Errorf("no fault %q (faults: %s)", name, strings.Join(FaultNames(), ", "))
}
