package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// Job commands: jobs, checkpoints, restore-plan, epochs.

func runJobsList(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/jobs", func(ctx context.Context, c *client.Client) error { _, err := c.Jobs(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var answer struct {
		Jobs []wire.Job `json:"jobs"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return inv.fail(fmt.Errorf("jobs from %s: %w", o.addr, err))
	}
	if len(answer.Jobs) == 0 {
		fmt.Fprintln(inv.stdout, "no jobs")
		return exitOK
	}
	tw := newTable(inv.stdout)
	fmt.Fprintln(tw, "JOB\tGENERATION\tATTEMPT\tLAST EPOCH\tLATEST COMPLETED\tPENDING EPOCHS\tRETAINED EPOCHS\tUPDATED")
	for _, j := range answer.Jobs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", j.ID, j.Generation, orDash(j.AttemptID),
			j.LastEpoch, j.LatestCompleted, fmtEpochs(j.Pending), fmtEpochs(j.Retained), fmtTime(j.UpdatedAt))
	}
	tw.Flush()
	return exitOK
}

func runJobsShow(inv *invocation, args []string) int {
	fs, o := inv.flags()
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	job := pos[0]
	jobBody, err := o.call(http.MethodGet, apiPath("/v1/jobs", job), func(ctx context.Context, c *client.Client) error { _, err := c.Job(ctx, job); return err })
	if err != nil {
		return inv.fail(err)
	}
	// A job without an attempt yet answers no_attempt: show the job alone.
	attemptBody, err := o.call(http.MethodGet, apiPath("/v1/jobs", job, "attempts", "current"), func(ctx context.Context, c *client.Client) error { _, err := c.Attempt(ctx, job, 0); return err })
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == string(wire.CodeNoAttempt) {
		attemptBody, err = []byte("null"), nil
	}
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		combined, err := json.Marshal(map[string]json.RawMessage{"job": jobBody, "attempt": attemptBody})
		if err != nil {
			return inv.fail(fmt.Errorf("job %s from %s: %w", job, o.addr, err))
		}
		return printJSON(inv.stdout, inv.stderr, combined)
	}
	var j wire.Job
	var a *wire.AttemptDetail
	if err := decodeJSON(jobBody, &j); err != nil {
		return inv.fail(fmt.Errorf("job %s from %s: %w", job, o.addr, err))
	}
	if err := decodeJSON(attemptBody, &a); err != nil {
		return inv.fail(fmt.Errorf("attempt of job %s from %s: %w", job, o.addr, err))
	}
	w := inv.stdout
	tw := newTable(w)
	fmt.Fprintf(tw, "job\t%s\n", j.ID)
	if a == nil {
		fmt.Fprintf(tw, "attempt\tnone yet (generation 0)\n")
	} else {
		fmt.Fprintf(tw, "attempt\tgeneration %d, id %s, started %s\n", a.Generation, a.AttemptID, fmtTime(a.StartedAt))
		fmt.Fprintf(tw, "tasks\t%d, %d expected to ack each epoch\n", a.Tasks, a.Expected)
		switch {
		case a.RestoredFrom == nil:
			fmt.Fprintf(tw, "started from\tunknown (not recorded)\n")
		case *a.RestoredFrom == 0:
			fmt.Fprintf(tw, "started from\tfresh start\n")
		default:
			fmt.Fprintf(tw, "started from\trestored from epoch %d\n", *a.RestoredFrom)
		}
	}
	c := j.Config
	fmt.Fprintf(tw, "config\tretained %d, ack timeout %s, history %d\n", c.Retained, time.Duration(c.AckTimeout), c.History)
	fmt.Fprintf(tw, "last epoch\t%d\n", j.LastEpoch)
	fmt.Fprintf(tw, "latest completed\t%d\n", j.LatestCompleted)
	fmt.Fprintf(tw, "pending\t%s\n", fmtEpochs(j.Pending))
	fmt.Fprintf(tw, "retained\t%s\n", fmtEpochs(j.Retained))
	fmt.Fprintf(tw, "ended\t%s\n", fmtEpochs(j.Ended))
	switch {
	case j.Generation == 0 || j.RestoresCountedFrom == 1:
		fmt.Fprintf(tw, "restored attempts\t%d\n", j.RestoredAttempts)
	case j.RestoresCountedFrom == 0:
		fmt.Fprintf(tw, "restored attempts\tunknown (not recorded)\n")
	default:
		fmt.Fprintf(tw, "restored attempts\t%d since generation %d\n", j.RestoredAttempts, j.RestoresCountedFrom)
	}
	fmt.Fprintf(tw, "created\t%s (index %d)\n", fmtTime(j.CreatedAt), j.CreateIndex)
	fmt.Fprintf(tw, "updated\t%s (index %d)\n", fmtTime(j.UpdatedAt), j.ModifyIndex)
	tw.Flush()
	if a != nil {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "TASK\tCAPABILITIES\tEXPECTED")
		for _, t := range a.TaskList {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, fmtCaps(t.Caps), yesNo(t.Caps.Expected()))
		}
		tw.Flush()
	}
	return exitOK
}

var epochStates = []string{string(wire.EpochPending), string(wire.EpochCompleted), string(wire.EpochAborted), string(wire.EpochSubsumed)}

func runCheckpointsList(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var state string
	fs.StringVar(&state, "state", "", "list only epochs in this state: "+joinOr(epochStates))
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	if state != "" && !slices.Contains(epochStates, state) {
		return inv.badUsage("--state %q is not %s", state, joinOr(epochStates))
	}
	job := pos[0]
	body, err := o.call(http.MethodGet, withQuery(apiPath("/v1/jobs", job, "epochs"), url.Values{"state": {state}}), func(ctx context.Context, c *client.Client) error {
		_, err := c.Epochs(ctx, job, wire.EpochState(state))
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var answer struct {
		Epochs []wire.Epoch `json:"epochs"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return inv.fail(fmt.Errorf("epochs of job %s from %s: %w", job, o.addr, err))
	}
	if len(answer.Epochs) == 0 {
		if state != "" {
			fmt.Fprintf(inv.stdout, "job %s has no %s epochs\n", job, state)
		} else {
			fmt.Fprintf(inv.stdout, "job %s has no epochs\n", job)
		}
		return exitOK
	}
	tw := newTable(inv.stdout)
	fmt.Fprintln(tw, "EPOCH\tSTATE\tGENERATION\tACKED\tPAYLOAD BYTES\tBEGAN\tDURATION\tPINNED\tREASON")
	for _, e := range answer.Epochs {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d/%d\t%d\t%s\t%s\t%s\t%s\n", e.Epoch, e.State, e.Generation, e.Acked, e.Expected,
			e.PayloadBytes, fmtTime(e.BeganAt), epochDuration(e), pinText(e), orDash(e.Reason))
	}
	tw.Flush()
	return exitOK
}

// epochDuration is the time from begin to completion or end; "-" while
// pending.
func epochDuration(e wire.Epoch) string {
	switch {
	case e.CompletedAt != nil:
		return fmtDuration(e.CompletedAt.Sub(e.BeganAt))
	case e.EndedAt != nil:
		return fmtDuration(e.EndedAt.Sub(e.BeganAt))
	}
	return "-"
}

func pinText(e wire.Epoch) string {
	switch {
	case e.Pinned && e.PinName != "":
		return e.PinName
	case e.Pinned:
		return "yes"
	}
	return "-"
}

func runCheckpointsShow(inv *invocation, args []string) int {
	fs, o := inv.flags()
	pos, code, ok := inv.parse(fs, args, 2)
	if !ok {
		return code
	}
	job := pos[0]
	epoch, err := parseEpoch(pos[1])
	if err != nil {
		return inv.badUsage("%v", err)
	}
	body, err := o.call(http.MethodGet, apiPath("/v1/jobs", job, "epochs", strconv.FormatUint(epoch, 10)), func(ctx context.Context, c *client.Client) error {
		_, err := c.Epoch(ctx, job, epoch)
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var e wire.EpochDetail
	if err := decodeJSON(body, &e); err != nil {
		return inv.fail(fmt.Errorf("epoch %d of job %s from %s: %w", epoch, job, o.addr, err))
	}
	w := inv.stdout
	tw := newTable(w)
	fmt.Fprintf(tw, "job\t%s\n", e.Job)
	fmt.Fprintf(tw, "epoch\t%d\n", e.Epoch.Epoch)
	fmt.Fprintf(tw, "state\t%s\n", e.State)
	fmt.Fprintf(tw, "generation\t%d\n", e.Generation)
	fmt.Fprintf(tw, "began\t%s\n", fmtTime(e.BeganAt))
	switch {
	case e.CompletedAt != nil:
		fmt.Fprintf(tw, "completed\t%s\n", fmtTime(*e.CompletedAt))
	case e.EndedAt != nil:
		fmt.Fprintf(tw, "ended\t%s\n", fmtTime(*e.EndedAt))
	default:
		fmt.Fprintf(tw, "deadline\t%s\n", fmtTime(e.Deadline))
	}
	if e.State == wire.EpochPending {
		fmt.Fprintf(tw, "duration\t%s so far (to the last ack)\n", fmtDuration(time.Duration(e.Duration)))
	} else {
		fmt.Fprintf(tw, "duration\t%s\n", fmtDuration(time.Duration(e.Duration)))
	}
	fmt.Fprintf(tw, "acked\t%d of %d expected tasks\n", e.Acked, e.Expected)
	fmt.Fprintf(tw, "stragglers\t%s\n", fmtList(e.Stragglers, 20))
	fmt.Fprintf(tw, "payload\t%s inline\n", fmtBytes(uint64(max(e.PayloadBytes, 0))))
	fmt.Fprintf(tw, "pinned\t%s\n", pinText(e.Epoch))
	if e.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", e.Reason)
	}
	tw.Flush()
	if len(e.Acks) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "TASK\tACK DELAY\tINPUT\tSTATE\tOUTPUT\tMANIFEST\tACKED AT")
		for _, a := range e.Acks {
			manifest := "-"
			if a.Lineage != 0 {
				manifest = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Task, fmtDuration(time.Duration(a.Delay)),
				ackSize(a, wire.KindInput), ackSize(a, wire.KindState), ackSize(a, wire.KindOutput), manifest, fmtTime(a.At))
		}
		tw.Flush()
	}
	return exitOK
}

// ackSize is the inline payload size an ack stored for kind k, "-" if none.
func ackSize(a wire.Ack, k wire.Kind) string {
	if n, ok := a.Sizes[k]; ok {
		return strconv.Itoa(n)
	}
	return "-"
}

// parseEpoch parses an EPOCH argument: a positive integer.
func parseEpoch(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("epoch %q is not a positive integer", s)
	}
	return n, nil
}

func runRestorePlan(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var epoch uint64
	var pin, sourceJob, sourceTask string
	fs.Uint64Var(&epoch, "epoch", 0, "restore from this completed (retained or pinned) epoch (default: the latest completed)")
	fs.StringVar(&pin, "pin", "", "restore from the savepoint of this name")
	fs.StringVar(&sourceJob, "source-job", "", "restore from this job's checkpoint (default: JOB)")
	fs.StringVar(&sourceTask, "source-task", "", "restore from this task's checkpoint (default: TASK)")
	pos, code, ok := inv.parse(fs, args, 2)
	if !ok {
		return code
	}
	if epoch != 0 && pin != "" {
		return inv.badUsage("--epoch and --pin exclude each other")
	}
	job, task := pos[0], pos[1]
	q := url.Values{"pin": {pin}, "source_job": {sourceJob}, "source_task": {sourceTask}}
	if epoch != 0 {
		q.Set("epoch", strconv.FormatUint(epoch, 10))
	}
	body, err := o.call(http.MethodGet, withQuery(apiPath("/v1/jobs", job, "tasks", task, "restore"), q), func(ctx context.Context, c *client.Client) error {
		_, err := c.Restore(ctx, job, task, client.RestoreOptions{Epoch: epoch, Pin: pin, SourceJob: sourceJob, SourceTask: sourceTask})
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var p wire.RestorePlan
	if err := decodeJSON(body, &p); err != nil {
		return inv.fail(fmt.Errorf("restore plan of %s/%s from %s: %w", job, task, o.addr, err))
	}
	w := inv.stdout
	tw := newTable(w)
	fmt.Fprintf(tw, "job\t%s\n", p.Job)
	fmt.Fprintf(tw, "task\t%s\n", p.Task)
	fmt.Fprintf(tw, "status\t%s\n", p.Status)
	source := p.Source.Job + "/" + p.Source.Task
	switch {
	case p.Source.Epoch != 0:
		source += fmt.Sprintf(", epoch %d (generation %d)", p.Source.Epoch, p.Source.Generation)
	default:
		source += ", no completed checkpoint"
	}
	if p.Source.Pin != "" {
		source += ", savepoint " + p.Source.Pin
	}
	fmt.Fprintf(tw, "source\t%s\n", source)
	caps := "-"
	if p.Capabilities != nil {
		caps = fmtCaps(*p.Capabilities)
	}
	fmt.Fprintf(tw, "capabilities\t%s\n", caps)
	fmt.Fprintf(tw, "inline bytes\t%d\n", p.InlineBytes)
	fmt.Fprintf(tw, "object-store reads\t%d, %s\n", p.ObjectStoreReads, fmtBytes(p.ObjectStoreBytes))
	tw.Flush()
	if len(p.Kinds) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "KIND\tSTATUS\tINLINE\tBASES\tSEGMENTS\tMANIFEST BYTES\tTOTAL BYTES")
		for _, k := range wire.Kinds {
			kr, ok := p.Kinds[k]
			if !ok {
				continue
			}
			inline, bases, segments, mbytes := "-", "-", "-", "-"
			if kr.Payload != nil {
				inline = strconv.Itoa(len(kr.Payload))
			}
			if m := kr.Manifest; m != nil {
				bases, segments = strconv.Itoa(len(m.Bases)), strconv.Itoa(len(m.Segments))
				mbytes = strconv.FormatUint(m.Bytes(), 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", k, kr.Status, inline, bases, segments, mbytes, kr.Bytes)
		}
		tw.Flush()
	}
	if len(p.FlaggedBlobs) > 0 {
		fmt.Fprintln(w, "\nflagged blobs (the object did not match its ack when the leader looked):")
		tw = newTable(w)
		fmt.Fprintln(tw, "KEY\tDECLARED\tOBSERVED\tETAG")
		for _, f := range p.FlaggedBlobs {
			observed, etag := "-", "-"
			if o := f.Observed; o != nil {
				observed, etag = strconv.FormatUint(o.Size, 10), dash(o.ETag)
				if o.Missing {
					observed = "missing"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", f.Key, f.Declared, observed, etag)
		}
		tw.Flush()
	}
	return exitOK
}

func runEpochsAbort(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var reason string
	var gen uint64
	fs.StringVar(&reason, "reason", "aborted by an operator", "why the epoch is aborted (kept with the epoch)")
	fs.Uint64Var(&gen, "generation", 0, "generation of the attempt the epoch belongs to (default: the job's current one)")
	pos, code, ok := inv.parse(fs, args, 2)
	if !ok {
		return code
	}
	job := pos[0]
	epoch, err := parseEpoch(pos[1])
	if err != nil {
		return inv.badUsage("%v", err)
	}
	if gen == 0 {
		body, err := o.call(http.MethodGet, apiPath("/v1/jobs", job), func(ctx context.Context, c *client.Client) error { _, err := c.Job(ctx, job); return err })
		if err != nil {
			return inv.fail(err)
		}
		var j wire.Job
		if err := decodeJSON(body, &j); err != nil {
			return inv.fail(fmt.Errorf("job %s from %s: %w", job, o.addr, err))
		}
		if j.Generation == 0 {
			return inv.fail(fmt.Errorf("job %s has no attempt, so no pending epoch", job))
		}
		gen = j.Generation
	}
	body, err := o.call(http.MethodPost, apiPath("/v1/jobs", job, "epochs", strconv.FormatUint(epoch, 10), "abort"), func(ctx context.Context, c *client.Client) error {
		_, err := c.AbortEpoch(ctx, job, gen, epoch, reason)
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	fmt.Fprintf(inv.stdout, "aborted epoch %d of job %s (generation %d)\n", epoch, job, gen)
	return exitOK
}

func runJobsDelete(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var force bool
	fs.BoolVar(&force, "force", false, "delete even while the job has pinned savepoints, releasing them")
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	job := pos[0]
	path := apiPath("/v1/jobs", job)
	if force {
		path = withQuery(path, url.Values{"force": {"true"}})
	}
	body, err := o.call(http.MethodDelete, path, func(ctx context.Context, c *client.Client) error { _, err := c.DeleteJob(ctx, job, force); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var d wire.JobDeletion
	if err := decodeJSON(body, &d); err != nil {
		return inv.fail(fmt.Errorf("job %s from %s: %w", job, o.addr, err))
	}
	fmt.Fprintf(inv.stdout, "deleted job %s (last generation %d, last epoch %d): %d task manifests released, %d upload intents expired", d.Job, d.Generation, d.LastEpoch, d.LineagesReleased, d.IntentsExpired)
	if len(d.PinsReleased) > 0 {
		pins := make([]string, len(d.PinsReleased))
		for i, p := range d.PinsReleased {
			pins[i] = strconv.FormatUint(p.Epoch, 10)
			if p.Name != "" {
				pins[i] += " (" + p.Name + ")"
			}
		}
		fmt.Fprintf(inv.stdout, ", savepoints released: %s", strings.Join(pins, ", "))
	}
	fmt.Fprintln(inv.stdout)
	return exitOK
}

func runEpochsPin(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var name string
	fs.StringVar(&name, "name", "", "name of the savepoint (restore-plan --pin NAME)")
	pos, code, ok := inv.parse(fs, args, 2)
	if !ok {
		return code
	}
	return pinOrUnpin(inv, o, pos, true, name)
}

func runEpochsUnpin(inv *invocation, args []string) int {
	fs, o := inv.flags()
	pos, code, ok := inv.parse(fs, args, 2)
	if !ok {
		return code
	}
	return pinOrUnpin(inv, o, pos, false, "")
}

func pinOrUnpin(inv *invocation, o *clientOptions, pos []string, pin bool, name string) int {
	job := pos[0]
	epoch, err := parseEpoch(pos[1])
	if err != nil {
		return inv.badUsage("%v", err)
	}
	path := apiPath("/v1/jobs", job, "epochs", strconv.FormatUint(epoch, 10), "pin")
	var body []byte
	if pin {
		body, err = o.call(http.MethodPut, path, func(ctx context.Context, c *client.Client) error { _, err := c.Pin(ctx, job, epoch, name); return err })
	} else {
		body, err = o.call(http.MethodDelete, path, func(ctx context.Context, c *client.Client) error { _, err := c.Unpin(ctx, job, epoch); return err })
	}
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	switch {
	case pin && name != "":
		fmt.Fprintf(inv.stdout, "pinned epoch %d of job %s as %s\n", epoch, job, name)
	case pin:
		fmt.Fprintf(inv.stdout, "pinned epoch %d of job %s\n", epoch, job)
	default:
		fmt.Fprintf(inv.stdout, "unpinned epoch %d of job %s\n", epoch, job)
	}
	return exitOK
}
