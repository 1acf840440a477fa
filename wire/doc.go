// Package wire holds the HTTP API's types: the request bodies, the answers,
// the error codes with their meaning and HTTP status, and the checks of a
// request's shape that need no state (id charset, ranges, capability
// names). It imports the standard library and package manifests (pure
// manifest logic, itself standard library only), nothing else, so a client
// decodes the API's answers without linking Raft, bbolt or metrics.
//
// What lives where:
//
//   - codes.go: Code, every error code the API answers with (rule codes of
//     the state machine and codes of the HTTP layer), RuleStatus, RuleError
//     and its sentinels, the Error body.
//   - model.go: the value types (Kind, Caps, Duration), the limits, CheckID,
//     CheckText, ParseCaps.
//   - answers.go: jobs, attempts, epochs, acks, restore plans, blobs, fsck,
//     tokens.
//   - requests.go: request bodies.
//   - envelopes.go: the objects that wrap answers (lists, membership
//     changes, the state hash, upload slots, fsck, ...).
//   - cluster.go, gc.go: member status and backups; the garbage
//     collector's answers.
//
// The state machine (package fsm) keeps its own records, unexported, and
// its command payloads: their encoding is the storage and log format. Its
// reads and command values answer with these types, converted from the
// records field by field (fsm/views.go), so a change of the storage
// encoding does not change the API. fsm uses this package's
// codes, value types and checks, so a rule is named the same way in the
// state machine and on the wire.
package wire
