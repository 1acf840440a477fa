// Package gc is the leader-only garbage collector of object-store blobs.
//
// The state machine (package fsm) counts the references every retained,
// pinned or pending checkpoint holds on each blob and keeps a blob's
// lifecycle: intent -> live -> deleting -> gone (and intent -> expired when
// an upload's lease ends uncommitted). The collector turns that state into
// object-store deletes. It runs on the leader only (Run is a leader task
// whose context ends with leadership) and every decision it acts on is
// either committed through Raft or re-checked by the state machine.
//
// # A cycle
//
// Every Interval (and on RunOnce), after VerifyLeader has confirmed
// leadership with a quorum and that the local state machine is current:
//
//  1. Expire intents. Intents whose lease ended (ExpiredIntents(now)) are
//     proposed in CmdIntentsExpire batches; the state machine expires those
//     whose lease is over by the command's time and that no ack committed,
//     making them candidates unreferenced since their lease's end.
//  2. Resume. Blobs already marked deleting (by an earlier cycle, or by a
//     leader that died between its mark and its delete) are deleted from
//     the object store, and the keys the store confirmed are recorded gone
//     with CmdBlobsGone.
//  3. Mark and delete. Candidates unreferenced since at least Grace ago
//     (GCCandidates(now-Grace)) are proposed BatchSize at a time in
//     CmdBlobsDeleting{Keys, Grace}. The state machine re-checks each key
//     against its state as of that entry: no reference, no live intent,
//     unreferenced for Grace by the entry's time. Only the keys it returns
//     are deleted from the object store (DeleteObjects of at most
//     BatchSize keys, paced by Rate), and only the keys the store
//     confirmed are proposed in CmdBlobsGone.
//  4. Purge. Tombstones of blobs gone more than TombstoneTTL ago are
//     forgotten (CmdBlobsPurge).
//  5. Orphan sweep, every OrphanEvery (or when RunOnce asks), counted from
//     the last sweep of any leader (the replicated slot cut-off it
//     proposed): CmdSlotCutoff (its clock minus OrphanGrace; no signed
//     upload slot whose lease ended by then can be committed after it),
//     then after VerifyLeader, List(Prefix); objects whose key the state
//     machine does not know (Known), whose modification time is older
//     than OrphanGrace and, for a signed slot's name, whose lease is
//     behind the cut-off, are deleted directly, each batch after
//     VerifyLeader again and a fresh Known check, right before the
//     Delete.
//
// Run starts with a resume pass (step 2 alone), so a new leader finishes the
// batches its predecessor left deleting before anything else.
//
// # Why it is safe (design invariants 2 and 4)
//
// A blob is deleted from the object store only if it is in state deleting
// (steps 2 and 3), or the state machine has no record of it (step 5).
//
// Deleting is entered only through CmdBlobsDeleting, applied in log order
// like every ack: at that entry the blob had no reference from any pending,
// retained or pinned checkpoint and was not a live intent. From then on the
// state machine refuses any ack that references it (blob_deleting), so no
// later checkpoint can come to need it. What the collector read before
// proposing (a possibly stale candidate list, on a leader that may already
// be deposed) only chooses which keys to propose; a deposed leader's
// proposal does not commit, and a committed one is judged on the current
// state. Marks are therefore safe whatever the collector's view, and the
// delete of a marked key is safe whenever it happens, by whichever leader.
//
// Gone is recorded only for keys the object store confirmed deleted. A store
// that errors, throttles or times out (each Delete call is bounded by
// DeleteTimeout) leaves its keys deleting; the next cycle, or the next
// leader, deletes them again (deleting a missing key is success). A cycle in
// which a whole Delete call failed proposes no further marks, so an
// unhealthy store does not pile up deleting blobs.
//
// For an orphan (step 5) the argument is the key's provenance: keys are
// handed to workers only through intents, recorded before the upload and
// unique, so an object whose key is unknown cannot be referenced now or
// later. The check is ordered to make that hold against stale reads: the
// object was uploaded after its intent committed, listed after the upload,
// and the leadership check before each Delete comes after the listing, so
// the local state machine then holds every intent the listed objects could
// have; the Known check reads it after that. OrphanGrace (object age) is the
// last line of defence, not the first. The store's prefix must be dedicated
// to this metastore: the sweep deletes whatever else it finds there.
//
// Stopping is always safe: when ctx ends (leadership lost) the collector
// returns at its next store call, rate-limit wait or proposal. A command
// whose outcome is unknown is harmless: marks are re-checked and a deleting
// blob is finished by the next leader; an unconfirmed gone leaves the blob
// deleting, to be deleted (again) and recorded.
//
// # Liveness (invariant 3)
//
// When the system is quiet, every unreferenced blob becomes a candidate
// (refs fall to 0, or an intent's lease ends) and is marked and deleted
// once Grace has passed; uploads without an intent, and late uploads to
// keys already collected and purged, are swept by the orphan sweep once
// older than OrphanGrace.
//
// # Clock
//
// Commands are proposed through Deps.Propose (node.Node.Propose), which
// stamps them with the member's clock; the collector chooses its candidates
// by the same clock (Deps.Now, node.Node.Now), read before the stamp.
// Grace, tombstone and lease checks in the state machine use the stamp,
// never the applier's clock, so every member decides alike. A leader whose clock is
// behind only delays collection.
//
// # Observing new blobs
//
// Run also runs the observer of new blobs (observe.go). An ack that commits
// blobs queues them in the state machine (Unobserved) and the API calls
// ObserveSoon with their count. The observer gathers them rather than
// running after every ack: its pass starts ObserveDelay (default 1s) after
// the first ack since the last pass, or as soon as acks have reported
// ObservePass (default 10,000) new blobs, whichever comes first. A pass
// reads the object store once for all its blobs: one listing per
// directory and time window of blobstore.NewKey that holds two of them or
// more, a HEAD for each other blob, VerifyConcurrency at a time. It
// proposes what the store answered in one CmdBlobsObserved entry per
// ObserveBatch (default 1,000) blobs, so under load one entry, applied on
// every member, carries the blobs of many acks, and a directory is listed
// about once per ObserveDelay whatever the ack rate. A blob whose HEAD
// failed stays queued, for the next pass or the next Interval; a new
// leader's first pass takes what the queue still holds. Observations only
// record and flag (size and ETag into the blob's record); nothing is
// deleted on their account.
//
// # Counting
//
// BytesFreed adds the sizes the state machine recorded for the blobs that
// CmdBlobsGone returned (read after the command; the gone record keeps its
// size until purged), plus the listed sizes of orphans deleted. An upload
// whose intent expired was never committed with a size and counts 0.
package gc
