package fsm_test

import (
	"testing"
)

// emptyStateHash is the state hash of a new state machine file: the
// twenty buckets of the hash's first format digested by name though
// empty, the schema version, and none of the buckets digested only when
// they hold a record (job_tombstones on).
const emptyStateHash = "d2055d84a48f66d72ce72478dfdecaaba770a337efc3c13ee44f6cf63cdb8ba8"

// TestAuditEmptyStateHashIsStable pins the hash of the empty state, where
// every bucket is empty: which buckets are digested when empty is part of
// the format (TestStateHashIsStable's state fills all of them but
// job_tombstones).
func TestAuditEmptyStateHashIsStable(t *testing.T) {
	h := newHarness(t)
	if got := h.hash(); got != emptyStateHash {
		t.Fatalf("state hash of an empty state machine %s, want %s", got, emptyStateHash)
	}
	h.reopen()
	if got := h.hash(); got != emptyStateHash {
		t.Fatalf("state hash after reopening %s, want %s", got, emptyStateHash)
	}
}
