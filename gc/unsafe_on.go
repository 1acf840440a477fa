//go:build faultinject

package gc

import (
	"os"
	"time"
)

// unsafeSkipMark is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_GC_SKIP_MARK set the collector
// deletes its candidates from the object store BEFORE the deleting mark
// through Raft, so the state machine's re-check at the mark (is the blob
// still unreferenced?) comes too late: a blob referenced again after it
// was listed as a candidate is deleted while referenced. The suite's GC
// safety checker must report it. The mark and the record of the deletion
// follow as usual, so the collector still makes progress.
//
// Between listing and deleting, the control plays the worst scheduler: it
// waits until one of the listed blobs is referenced again (as the local
// state machine shows), or for the window at most, then lets the answer
// of the ack that referenced it reach its client, then deletes.
var unsafeSkipMark, unsafeListToDelete = unsafeWindow(os.Getenv("METASTORE_UNSAFE_GC_SKIP_MARK"))

// unsafeWindow reads the switch: "1" waits a second at most between
// listing the candidates and deleting them (the window in which a
// reference can come back, which the mark closes in production builds); a
// duration such as "5s" waits that long at most.
func unsafeWindow(v string) (bool, time.Duration) {
	if v == "1" {
		return true, time.Second
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return true, d
	}
	return false, 0
}

// unsafeAnswerDelay is how long the control waits after it saw a listed
// blob referenced again: the ack's answer must reach its client before the
// delete, or the suite cannot know the blob was protected.
const unsafeAnswerDelay = 200 * time.Millisecond

// unsafeDeleteBeforeMark waits until a listed blob is referenced again (or
// unsafeListToDelete), then deletes keys from the object store without any
// mark.
func (cy *cycle) unsafeDeleteBeforeMark(keys []string) error {
	wait := func(d time.Duration) error {
		select {
		case <-cy.ctx.Done():
			return cy.ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	for deadline := time.Now().Add(unsafeListToDelete); time.Now().Before(deadline); {
		if cy.c.anyReferenced(keys) {
			if err := wait(unsafeAnswerDelay); err != nil {
				return err
			}
			break
		}
		if err := wait(50 * time.Millisecond); err != nil {
			return err
		}
	}
	if _, err := cy.deleteObjects(keys); err != nil && cy.ctx.Err() != nil {
		return cy.ctx.Err()
	}
	return nil
}

// anyReferenced reports whether one of keys has a reference in the local
// state machine.
func (c *Collector) anyReferenced(keys []string) bool {
	for _, k := range keys {
		if b, _, err := c.f.Blob(k); err == nil && b != nil && b.Refs > 0 {
			return true
		}
	}
	return false
}
