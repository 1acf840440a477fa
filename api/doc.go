// Package api is metastore's HTTP API under /v1: one route table
// (server.go), one wrapper that forwards leader-bound requests, applies the
// read consistency and maps every error to a JSON answer with a stable code
// (errors.go), and the handlers (handlers.go).
//
// Writes go to the leader: a follower forwards them transparently
// (forward.go), and the leader stamps its clock into the command it
// proposes. Reads take ?consistency=stale|default|linearizable: stale is
// served by any member from its own state, default by the leader, and
// linearizable by the leader after it confirmed its leadership and applied
// everything committed. Every response carries the Raft index it reflects in
// the X-Metastore-Index header.
//
// Hostile or careless clients are bounded before any handler runs
// (limits.go): NewHTTPServer sets the server's header timeout, header size
// and idle timeout; the root handler refuses a client over its request
// rate or its requests in flight (429 rate_limited) and sets each
// request's read and write deadlines by route. Bodies are decoded strictly
// (decodeBody).
package api
