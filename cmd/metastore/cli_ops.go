package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/wire"
)

// Maintenance commands: gc, verify, fsck. verify, fsck and gc run exit 1
// when they find a problem, with --json too, so scripts can rely on the
// status.

func runGCStatus(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/gc", func(ctx context.Context, c *client.Client) error { _, err := c.GCStatus(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var st gc.Status
	if err := decodeJSON(body, &st); err != nil {
		return inv.fail(fmt.Errorf("gc status from %s: %w", o.addr, err))
	}
	tw := newTable(inv.stdout)
	collector := "disabled"
	if st.Enabled {
		collector = "enabled, not leading (another member collects)"
		if st.Leading {
			collector = "enabled, leading (this member collects)"
		}
		if st.Running {
			collector += ", a cycle is running"
		}
	}
	fmt.Fprintf(tw, "collector\t%s\n", collector)
	fmt.Fprintf(tw, "store\t%s\n", orDash(st.Store))
	fmt.Fprintf(tw, "candidates\t%d unreferenced blobs (grace %s)\n", st.PendingCandidates, time.Duration(st.Config.Grace))
	fmt.Fprintf(tw, "deleting\t%d\n", st.Deleting)
	if r := st.LastRun; r != nil {
		fmt.Fprintf(tw, "last run\t%s, took %s: %d marked, %d deleted, %s freed, %d errors\n", fmtTime(r.Started),
			fmtDuration(time.Duration(r.Duration)), r.Marked, r.Deleted, fmtBytes(r.BytesFreed), r.Errors)
		if r.Error != "" {
			fmt.Fprintf(tw, "last error\t%s\n", r.Error)
		}
	} else {
		fmt.Fprintf(tw, "last run\tnever\n")
	}
	sweep := "never"
	if st.LastOrphanSweep != nil {
		sweep = fmtTime(*st.LastOrphanSweep)
	}
	if st.OrphanSweepRetryAt != nil {
		sweep += ", did not finish: tried again at " + fmtTime(*st.OrphanSweepRetryAt)
	}
	fmt.Fprintf(tw, "last orphan sweep\t%s\n", sweep)
	t := st.Totals
	fmt.Fprintf(tw, "totals\tsince %s: %s (%d failed), %d deleted, %s freed, %d orphans deleted, %d errors\n",
		fmtTime(t.Since), plural(int(t.Cycles), "cycle"), t.FailedCycles, t.Deleted, fmtBytes(t.BytesFreed), t.OrphansDeleted, t.Errors)
	c := st.Config
	rate := "unlimited"
	if c.Rate > 0 {
		rate = fmt.Sprintf("%g/s", c.Rate)
	}
	orphanEvery := "never"
	if c.OrphanEvery > 0 {
		orphanEvery = "every " + time.Duration(c.OrphanEvery).String()
	}
	fmt.Fprintf(tw, "config\tinterval %s, grace %s, batch %d, rate %s, orphan sweep %s (grace %s), tombstones kept %s\n",
		time.Duration(c.Interval), time.Duration(c.Grace), c.BatchSize, rate, orphanEvery, time.Duration(c.OrphanGrace), time.Duration(c.TombstoneTTL))
	if st.StatusError != "" {
		fmt.Fprintf(tw, "status error\t%s\n", st.StatusError)
	}
	tw.Flush()
	return exitOK
}

func runGCRun(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var dryRun, orphans bool
	fs.BoolVar(&dryRun, "dry-run", false, "report what the cycle would delete and change nothing")
	fs.BoolVar(&orphans, "orphans", false, "also sweep objects the store does not know (lists the object store)")
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	q := url.Values{}
	if dryRun {
		q.Set("dry_run", "true")
	}
	if orphans {
		q.Set("orphans", "true")
	}
	body, err := o.call(http.MethodPost, withQuery("/v1/gc/run", q), func(ctx context.Context, c *client.Client) error {
		_, err := c.RunGC(ctx, wire.GCRunOptions{DryRun: dryRun, Orphans: orphans})
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	var r gc.Report
	if err := decodeJSON(body, &r); err != nil {
		return inv.fail(fmt.Errorf("gc run from %s: %w", o.addr, err))
	}
	if o.json {
		if code := printJSON(inv.stdout, inv.stderr, body); code != exitOK {
			return code
		}
	} else {
		printGCReport(inv, r)
	}
	if r.Errors > 0 {
		return inv.fail(fmt.Errorf("gc run: the cycle met %s; the first: %s", plural(r.Errors, "error"), r.Error))
	}
	return exitOK
}

func printGCReport(inv *invocation, r gc.Report) {
	w := inv.stdout
	would := ""
	if r.DryRun {
		fmt.Fprintln(w, "dry run: what a cycle would do now; nothing was changed")
		would = "would be "
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "started\t%s, took %s\n", fmtTime(r.Started), fmtDuration(time.Duration(r.Duration)))
	fmt.Fprintf(tw, "expired intents\t%d\n", r.ExpiredIntents)
	fmt.Fprintf(tw, "%smarked\t%d (of %d proposed)\n", would, r.Marked, r.MarksProposed)
	fmt.Fprintf(tw, "%sdeleted\t%d (%d resumed from an earlier cycle)\n", would, r.Deleted, r.Resumed)
	fmt.Fprintf(tw, "%sfreed\t%s\n", would, fmtBytes(r.BytesFreed))
	if r.OrphanSweep {
		fmt.Fprintf(tw, "orphan sweep\t%d listed, %d %sdeleted\n", r.OrphansListed, r.OrphansDeleted, would)
	} else {
		fmt.Fprintf(tw, "orphan sweep\tnot run (--orphans runs it)\n")
	}
	fmt.Fprintf(tw, "tombstones purged\t%d\n", r.Purged)
	fmt.Fprintf(tw, "delete errors\t%d\n", r.DeleteErrors)
	errs := fmt.Sprint(r.Errors)
	if r.Error != "" {
		errs += ": " + r.Error
	}
	fmt.Fprintf(tw, "errors\t%s\n", errs)
	tw.Flush()
	for _, list := range []struct {
		title string
		keys  []string
	}{{"candidates", r.Candidates}, {"orphans", r.Orphans}} {
		if len(list.keys) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s %sdeleted:\n", list.title, would)
		for _, k := range list.keys {
			fmt.Fprintf(w, "  %s\n", k)
		}
	}
	if r.Truncated {
		fmt.Fprintln(w, "(lists truncated: the counts are lower bounds)")
	}
}

func runVerify(inv *invocation, args []string) int {
	fs, o := inv.flags()
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	job := pos[0]
	body, err := o.call(http.MethodGet, apiPath("/v1/jobs", job, "verify"), func(ctx context.Context, c *client.Client) error { _, err := c.Verify(ctx, job); return err })
	if err != nil {
		return inv.fail(err)
	}
	var r gc.VerifyReport
	if err := decodeJSON(body, &r); err != nil {
		return inv.fail(fmt.Errorf("verify of job %s from %s: %w", job, o.addr, err))
	}
	if o.json {
		if code := printJSON(inv.stdout, inv.stderr, body); code != exitOK {
			return code
		}
	} else {
		w := inv.stdout
		fmt.Fprintf(w, "job %s: checked %s (%s from retained and pinned checkpoints) in %s, at index %d\n",
			r.Job, plural(r.Blobs, "blob"), plural(r.References, "reference"), fmtDuration(time.Duration(r.Duration)), r.Index)
		if len(r.Missing) > 0 {
			fmt.Fprintln(w, "\nmissing from the object store:")
			tw := newTable(w)
			fmt.Fprintln(tw, "JOB\tEPOCH\tTASK\tKEY\tPINNED")
			for _, m := range r.Missing {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", m.Job, m.Epoch, m.Task, m.Key, yesNo(m.Pinned))
			}
			tw.Flush()
		}
		if len(r.Changed) > 0 {
			fmt.Fprintln(w, "\nnot the object the ack committed (size or ETag changed):")
			tw := newTable(w)
			fmt.Fprintln(tw, "JOB\tEPOCH\tTASK\tKEY\tPINNED\tDECLARED\tOBSERVED\tNOW\tOBSERVED ETAG\tETAG NOW")
			why := map[string][]string{}
			var keys []string
			for _, c := range r.Changed {
				observed := "-"
				if c.ObservedSize != nil {
					observed = strconv.FormatUint(*c.ObservedSize, 10)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", c.Job, c.Epoch, c.Task, c.Key, yesNo(c.Pinned), c.DeclaredSize, observed, c.Size, dash(c.ObservedETag), dash(c.ETag))
				if _, ok := why[c.Key]; !ok {
					keys = append(keys, c.Key)
				}
				why[c.Key] = c.Mismatches
			}
			tw.Flush()
			fmt.Fprintln(w, "\nmismatches:")
			for _, k := range keys {
				for _, m := range why[k] {
					fmt.Fprintf(w, "  %s: %s\n", k, m)
				}
			}
		}
		if len(r.Errors) > 0 {
			fmt.Fprintln(w, "\nnot checked (the object store failed):")
			tw := newTable(w)
			fmt.Fprintln(tw, "KEY\tERROR")
			for _, e := range r.Errors {
				fmt.Fprintf(tw, "%s\t%s\n", e.Key, e.Error)
			}
			tw.Flush()
		}
		if r.OK() {
			fmt.Fprintln(w, "all present")
		}
	}
	switch {
	case len(r.Missing) > 0:
		return inv.fail(fmt.Errorf("verify: job %s: %s to missing blobs; its checkpoints cannot all be restored", job, plural(len(r.Missing), "reference")))
	case len(r.Changed) > 0:
		return inv.fail(fmt.Errorf("verify: job %s: %s to blobs whose object is not the one the ack committed; restoring them reads other bytes", job, plural(len(r.Changed), "reference")))
	case len(r.Errors) > 0:
		return inv.fail(fmt.Errorf("verify: job %s: %s could not be checked", job, plural(len(r.Errors), "blob")))
	}
	return exitOK
}

func runFsck(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/fsck", func(ctx context.Context, c *client.Client) error { _, err := c.Fsck(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	var answer struct {
		OK     bool            `json:"ok"`
		Report wire.FsckReport `json:"report"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return inv.fail(fmt.Errorf("fsck from %s: %w", o.addr, err))
	}
	r := answer.Report
	if o.json {
		if code := printJSON(inv.stdout, inv.stderr, body); code != exitOK {
			return code
		}
	} else {
		w := inv.stdout
		tw := newTable(w)
		fmt.Fprintf(tw, "index\t%d\n", r.Index)
		fmt.Fprintf(tw, "blobs\t%d\n", r.Blobs)
		fmt.Fprintf(tw, "references\t%d\n", r.Records)
		fmt.Fprintf(tw, "lineages\t%d\n", r.Lineages)
		fmt.Fprintf(tw, "mismatches\t%d\n", len(r.Mismatches))
		fmt.Fprintf(tw, "problems\t%d\n", len(r.Problems))
		tw.Flush()
		if len(r.Mismatches) > 0 {
			fmt.Fprintln(w)
			tw = newTable(w)
			fmt.Fprintln(tw, "KEY\tSTATE\tSTORED REFS\tRECOUNTED")
			for _, m := range r.Mismatches {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", m.Key, orDash(string(m.State)), m.Stored, m.Recounted)
			}
			tw.Flush()
		}
		if len(r.Problems) > 0 {
			fmt.Fprintln(w)
			for _, p := range r.Problems {
				fmt.Fprintf(w, "problem: %s\n", p)
			}
		}
		if answer.OK {
			fmt.Fprintln(w, "ok: every reference count matches its manifests")
		}
	}
	if !answer.OK || len(r.Mismatches) > 0 || len(r.Problems) > 0 {
		return inv.fail(fmt.Errorf("fsck: %s and %s", plural(len(r.Mismatches), "reference count mismatch"), plural(len(r.Problems), "other problem")))
	}
	return exitOK
}
