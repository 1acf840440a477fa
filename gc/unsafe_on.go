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
// keeps listing the candidates (every 50 ms, adding each new one to the
// batch) until one of the blobs it listed is referenced again (as the
// local state machine shows), or for the window at most, then lets the
// answer of the ack that referenced it reach its client, then deletes the
// whole batch. Listing again while it waits is what makes it fire in every
// run: a worker references again a blob that has been a candidate for a
// while, so every reuse that lands inside a window is of a listed blob.
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
const unsafeAnswerDelay = 500 * time.Millisecond

// unsafeDeleteBeforeMark lists candidates again and again (adding them to
// keys) until one of them is referenced again (or unsafeListToDelete),
// then deletes them all from the object store without any mark. It
// returns the keys it deleted, for the mark that follows.
func (cy *cycle) unsafeDeleteBeforeMark(keys []string) ([]string, error) {
	c := cy.c
	wait := func(d time.Duration) error {
		select {
		case <-cy.ctx.Done():
			return cy.ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	listed := map[string]bool{}
	for _, k := range keys {
		listed[k] = true
	}
	for deadline := time.Now().Add(unsafeListToDelete); time.Now().Before(deadline); {
		if c.anyReferenced(keys) {
			if err := wait(unsafeAnswerDelay); err != nil {
				return nil, err
			}
			break
		}
		if err := wait(50 * time.Millisecond); err != nil {
			return nil, err
		}
		more, err := c.f.GCCandidates(c.now().Add(-c.cfg.Grace), c.cfg.BatchSize)
		if err != nil {
			continue
		}
		for _, k := range more {
			if !listed[k] {
				listed[k] = true
				keys = append(keys, k)
			}
		}
	}
	if _, err := cy.deleteObjects(keys); err != nil && cy.ctx.Err() != nil {
		return nil, cy.ctx.Err()
	}
	return keys, nil
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
