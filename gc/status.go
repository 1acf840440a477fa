package gc

import "github.com/metastore/metastore/wire"

// The collector's answers are declared in package wire, which clients import
// without the collector's object-store dependencies.
type (
	RunOptions   = wire.GCRunOptions
	Report       = wire.GCReport
	Totals       = wire.GCTotals
	StatusConfig = wire.GCStatusConfig
	Status       = wire.GCStatus
	MissingBlob  = wire.MissingBlob
	ChangedBlob  = wire.ChangedBlob
	VerifyError  = wire.VerifyError
	VerifyReport = wire.VerifyReport
	RunSample    = wire.GCRunSample
)

// RecentRuns is the number of cycles Status.RecentRuns keeps.
const RecentRuns = wire.GCRecentRuns

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
