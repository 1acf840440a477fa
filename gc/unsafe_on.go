//go:build faultinject

package gc

import "os"

// unsafeSkipMark is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_GC_SKIP_MARK=1 the collector
// deletes its candidates from the object store directly, without the
// deleting mark through Raft and so without the state machine's re-check
// (unsafeDeleteUnmarked). A blob referenced again after it became a
// candidate is then deleted while referenced, or stays "live" in the state
// machine after its object is gone; the suite's GC safety checker must
// report it.
var unsafeSkipMark = os.Getenv("METASTORE_UNSAFE_GC_SKIP_MARK") == "1"

// unsafeDeleteUnmarked deletes candidates with no mark and records
// nothing: the state machine never learns that their objects are gone.
func (cy *cycle) unsafeDeleteUnmarked(keys []string) error {
	_, err := cy.deleteObjects(keys)
	cy.rep.Deleted += len(keys)
	if err != nil && cy.ctx.Err() != nil {
		return cy.ctx.Err()
	}
	return nil
}
