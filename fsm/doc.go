// Package fsm is metastore's replicated state machine: the checkpoint model
// (jobs, attempts with per-task capability flags, epochs, acks with inline
// payloads, pins, retention) and the Raft commands that change it, kept in
// one bbolt file.
//
// Every change is a command: an envelope with an append-only numbered type,
// a payload version and the proposer's time, dispatched through a table of
// handlers (command.go). Apply is deterministic: it never reads the clock,
// never calls out, and answers a rule violation with a *wire.RuleError that is the
// same on every member and writes nothing. A batch of Raft entries applies in
// one bbolt transaction that also stores the last applied index, so a
// restarted member never applies an entry twice.
//
// Snapshots stream a read transaction of the file; Restore swaps in a new
// file under the lock readers take. See DESIGN.md beside this file.
package fsm
