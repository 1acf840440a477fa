package fsm_test

import (
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
)

// Audit of the quota reads (quota.go).

// TestAuditCommittedPastLive: Committed answers true for a key an ack
// committed whatever became of its blob since (live, deleting, gone: an
// ack naming it again adds no bytes), false for an intent and for a key
// without a record.
func TestAuditCommittedPastLive(t *testing.T) {
	h, _, old := gcScene(t)
	h.intents("g", 1, "g/t/open")
	check := func(when string, want bool) {
		t.Helper()
		for _, latest := range []bool{false, true} {
			if err := h.f.Flush(); err != nil {
				t.Fatal(err)
			}
			got, err := h.f.Committed([]string{old, "g/t/open", "g/t/none"}, latest)
			if err != nil {
				t.Fatal(err)
			}
			if got[old] != want || got["g/t/open"] || got["g/t/none"] {
				t.Fatalf("%s (latest %v): committed %v, want %s %v and no other", when, latest, got, old, want)
			}
		}
	}
	check("live", true)
	h.advance(time.Hour)
	marked := h.markKeys(0, old)
	check("deleting", true)
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked}))
	check("gone", true)
	checkUsage(t, h.f, "gone", "g")
}
