package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// resume starts a new attempt with the tasks of topology, restores every
// task from the latest completed checkpoint, checks what it restored, and
// checkpoints epochs more epochs.
func (j *jobRunner) resume(ctx context.Context, attemptID, topology string, epochs uint64) error {
	var before []string
	if cur, err := j.c.Attempt(ctx, j.job, 0); err == nil {
		for _, tk := range cur.TaskList {
			before = append(before, tk.ID)
		}
	} else if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("job %s does not exist: start it with run first", j.job)
	} else if !errors.Is(err, wire.ErrNoAttempt) {
		return err
	}
	if err := j.start(ctx, attemptID, topology, false); err != nil {
		return err
	}
	var ids []string
	for _, tk := range j.tasks {
		ids = append(ids, tk.ID)
	}
	var removed, added []string
	for _, id := range before {
		if !slices.Contains(ids, id) {
			removed = append(removed, id)
		}
	}
	for _, id := range ids {
		if !slices.Contains(before, id) {
			added = append(added, id)
		}
	}
	if len(removed)+len(added) > 0 {
		j.printf("topology %s: removed %s, added %s\n", topology, list(removed), list(added))
	} else {
		j.printf("topology %s: the same tasks as before\n", topology)
	}

	restoreStart := j.c.Stats()
	j.aggs = map[string]*aggTask{}
	var failures, stateless []string
	var statelessRequests int64
	printedSource := false
	for _, tk := range j.tasks {
		before := j.c.Stats()
		r, err := j.c.Restore(ctx, j.job, tk.ID, client.RestoreOptions{})
		if err != nil {
			return fmt.Errorf("restore %s: %w", tk.ID, err)
		}
		p := r.Plan
		if !printedSource {
			printedSource = true
			if p.Status == wire.RestoreNoCheckpoint {
				j.printf("the job has no completed checkpoint: every task starts without state\n")
			} else {
				j.printf("restoring from the latest completed checkpoint: epoch %d (generation %d)\n", p.Source.Epoch, p.Source.Generation)
			}
		}
		R := p.Source.Epoch
		hasState := false
		switch p.Status {
		case wire.RestoreNoPriorState, wire.RestoreNoCheckpoint:
			j.printf("  %-9s %-7s no prior state (new task)\n", tk.ID, "-")
		case wire.RestoreNothing:
			j.printf("  %-9s %-7s nothing to recover (no capabilities)\n", tk.ID, "-")
		default:
			for _, k := range wire.Kinds {
				line, bad, err := j.restoreKind(ctx, r, tk, k, R)
				if err != nil {
					return err
				}
				if bad {
					failures = append(failures, tk.ID+" "+string(k))
				}
				if k == wire.KindState && r.Status(k) == wire.RestoreRestored {
					hasState = true
				}
				j.printf("  %-9s %-7s %s\n", tk.ID, k, line)
			}
		}
		if !hasState {
			// Nothing to read: OpenState answers without a request.
			if rc, err := r.OpenState(ctx); err == nil {
				rc.Close()
				return fmt.Errorf("%s: OpenState opened a state the plan does not have", tk.ID)
			} else if !errors.Is(err, client.ErrNothingToRecover) && !errors.Is(err, client.ErrNoPriorState) {
				return fmt.Errorf("%s: OpenState: %w", tk.ID, err)
			}
			stateless = append(stateless, tk.ID)
			statelessRequests += j.c.Stats().Sub(before).ObjectRequests()
		}
		if tk.Caps.Has(wire.KindState) && j.aggs[tk.ID] == nil {
			ts, err := client.NewTaskState(nil, tk.Caps)
			if err != nil {
				return err
			}
			j.aggs[tk.ID] = &aggTask{ts: ts}
		}
	}
	rs := j.c.Stats().Sub(restoreStart)
	j.printf("restore: %d metastore requests, %d object-store GETs (%d bytes); tasks without state (%s) made %d object-store requests\n",
		rs.MetastoreRequests, rs.ObjectGets, rs.ObjectBytesRead, strings.Join(stateless, ", "), statelessRequests)
	if statelessRequests != 0 {
		failures = append(failures, "tasks without state made object-store requests")
	}
	if len(failures) > 0 {
		return fmt.Errorf("MISMATCH: the restore differs from what the job checkpointed: %s", strings.Join(failures, "; "))
	}
	j.printf("verified: every restored task holds what it checkpointed\n")

	first, err := j.nextEpoch(ctx)
	if err != nil {
		return err
	}
	if err := j.checkpoint(ctx, first, epochs); err != nil {
		return err
	}
	j.printStats(j.c.Stats())
	return nil
}

// restoreKind restores one kind of a task and checks it against what the
// job checkpointed at epoch R. It returns the line to print and whether the
// restore differs.
func (j *jobRunner) restoreKind(ctx context.Context, r *client.Restore, tk wire.Task, k wire.Kind, R uint64) (string, bool, error) {
	switch r.Status(k) {
	case wire.RestoreNothing:
		return "nothing to recover", false, nil
	case wire.RestoreNoPriorState:
		return "no prior state", false, nil
	}
	payload := string(r.Payload(k))
	switch k {
	case wire.KindInput:
		want := offsets(r.Plan.Source.Task, R)
		return fmt.Sprintf("restored %s (inline)%s", payload, check(payload == want, want)), payload != want, nil
	case wire.KindOutput:
		want := txnID(R)
		return fmt.Sprintf("restored %s (inline)%s", payload, check(payload == want, want)), payload != want, nil
	}
	m := r.StateManifest()
	if m == nil {
		return "restored, but the checkpoint holds no manifest", true, nil
	}
	before := j.c.Stats()
	rc, err := r.OpenState(ctx)
	if err != nil {
		return "", false, fmt.Errorf("%s: open state: %w", tk.ID, err)
	}
	agg, seq, err := replay(rc)
	rc.Close()
	if err != nil {
		return "", false, fmt.Errorf("%s: read state: %w", tk.ID, err)
	}
	read := j.c.Stats().Sub(before)
	want := aggregateAt(r.Plan.Source.Task, R)
	ok := agg.equal(want)
	line := fmt.Sprintf("restored %d base(s) + %d segment(s), %d bytes in %d object-store GETs: %s through seq %d",
		len(m.Bases), len(m.Segments), read.ObjectBytesRead, read.ObjectGets, agg, seq)
	if ok {
		line += fmt.Sprintf(", matches the aggregate checkpointed at epoch %d", R)
	} else {
		line += fmt.Sprintf(", MISMATCH: epoch %d checkpointed %s", R, want)
	}
	if tk.Caps.Has(wire.KindState) {
		ts, err := client.NewTaskState(r, tk.Caps)
		if err != nil {
			return "", false, err
		}
		j.aggs[tk.ID] = &aggTask{ts: ts, epoch: R, seq: seq}
	}
	return line, !ok, nil
}

func check(ok bool, want string) string {
	if ok {
		return ", as checkpointed"
	}
	return ", MISMATCH: the job checkpointed " + want
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(sortedTasks(ids), ", ")
}
