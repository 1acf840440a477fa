// Package blobstore is metastore's object-store layer: the Store interface
// for checkpoint blobs (changelog segments, materialized bases) and two
// implementations, S3 (any S3-compatible server, through aws-sdk-go-v2) and
// Local (a directory, the embedded default). Open picks one from a
// --blob-store value ("s3://bucket/prefix" or "file:///dir").
//
// The metastore keeps blob metadata and reference counts; this package only
// moves bytes. The garbage collector deletes unreferenced blobs with Delete
// (batched, at most 1,000 keys per S3 DeleteObjects, per-key failures
// reported), restore reads byte ranges with Get, and workers upload through
// PresignPut URLs (S3) or the API's own upload endpoint (Local, which
// returns ErrPresignUnsupported).
//
// # Keys
//
// A key is relative to the store's prefix (S3) or root directory (Local)
// and can never leave it. ValidateKey accepts 1 to 512 bytes of
// [A-Za-z0-9._-] in "/"-separated segments: no leading or trailing "/", no
// empty, "." or ".." segment, no backslash, control character or non-ASCII
// byte. Every method checks its keys first and fails with ErrInvalidKey
// without touching anything (Delete refuses the whole batch if one key is
// bad). The same key is the same object on every store and platform. Local
// also opens every path through an os.Root, so even a symbolic link placed
// inside its root cannot lead a read or write outside it.
//
// # Semantics shared by both stores
//
//   - Put replaces atomically: readers see the old or the new object, never
//     part of one. The body must hold exactly the declared size, else
//     ErrSizeMismatch and nothing changes.
//   - Get and Head of a missing object fail with ErrNotFound; Delete of a
//     missing key succeeds.
//   - List yields keys in ascending byte order, like S3, paginating
//     internally; its prefix is empty or ends with "/".
//   - Errors wrap the sentinels, for errors.Is.
//
// Tests run one conformance suite against both stores; the S3 store is
// tested against a real S3-protocol server process (cmd/s3server, started by
// package blobtest), not an in-memory fake of the interface.
package blobstore
