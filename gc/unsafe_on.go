//go:build faultinject

package gc

import (
	"os"
	"time"
)

// unsafeSkipMark is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_GC_SKIP_MARK=1 the collector
// deletes its candidates from the object store BEFORE the deleting mark
// through Raft, so the state machine's re-check at the mark (is the blob
// still unreferenced?) comes too late: a blob referenced again after it
// was listed as a candidate is deleted while referenced. The suite's GC
// safety checker must report it. The mark and the record of the deletion
// follow as usual, so the collector still makes progress.
var unsafeSkipMark = os.Getenv("METASTORE_UNSAFE_GC_SKIP_MARK") == "1"

// unsafeListToDelete is how long the control waits between listing the
// candidates and deleting them: the window in which a reference can come
// back, which the mark closes in production builds.
const unsafeListToDelete = time.Second

// unsafeDeleteBeforeMark waits unsafeListToDelete, then deletes keys from
// the object store without any mark.
func (cy *cycle) unsafeDeleteBeforeMark(keys []string) error {
	select {
	case <-cy.ctx.Done():
		return cy.ctx.Err()
	case <-time.After(unsafeListToDelete):
	}
	if _, err := cy.deleteObjects(keys); err != nil && cy.ctx.Err() != nil {
		return cy.ctx.Err()
	}
	return nil
}
