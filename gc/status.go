package gc

import "github.com/metastore/metastore/gc/gcapi"

// The collector's answers are declared in gcapi, which clients import
// without the collector's object-store dependencies.
type (
	RunOptions   = gcapi.RunOptions
	Report       = gcapi.Report
	Totals       = gcapi.Totals
	StatusConfig = gcapi.StatusConfig
	Status       = gcapi.Status
	MissingBlob  = gcapi.MissingBlob
	ChangedBlob  = gcapi.ChangedBlob
	VerifyError  = gcapi.VerifyError
	VerifyReport = gcapi.VerifyReport
	RunSample    = gcapi.RunSample
)

// RecentRuns is the number of cycles Status.RecentRuns keeps.
const RecentRuns = gcapi.RecentRuns

// noteErr records a problem in r: the first one becomes Error.
func noteErr(r *Report, err error) {
	if err == nil {
		return
	}
	r.Errors++
	if r.Error == "" {
		r.Error = err.Error()
	}
}

// addToTotals adds one cycle's report to the totals.
func addToTotals(t *Totals, r *Report, failed bool) {
	t.Cycles++
	if failed {
		t.FailedCycles++
	}
	t.ExpiredIntents += int64(r.ExpiredIntents)
	t.MarksProposed += int64(r.MarksProposed)
	t.Marked += int64(r.Marked)
	t.Deleted += int64(r.Deleted)
	t.BytesFreed += r.BytesFreed
	if r.OrphanSweep {
		t.OrphanSweeps++
	}
	t.OrphansDeleted += int64(r.OrphansDeleted)
	t.Purged += int64(r.Purged)
	t.DeleteErrors += int64(r.DeleteErrors)
	t.Errors += int64(r.Errors)
}
