// Package s3server is an S3-protocol server for tests and development: an
// http.Handler built on github.com/johannesboyne/gofakes3, keeping buckets in
// memory or in a bbolt file.
//
// It is what metastore's tests talk to instead of AWS, usually as its own
// process (cmd/s3server, started by blobstore/blobtest), so that the tests go
// through the SDK's real HTTP transport, request signing, XML encoding,
// ranged reads, pagination and batch deletes. Two things make it stricter
// than gofakes3 alone, and closer to S3:
//
//   - With credentials configured, every request must carry a valid
//     Signature Version 4 signature made with them, in the Authorization
//     header or as a presigned URL that has not expired; a signed payload
//     SHA-256 is checked against the body. gofakes3 checks no signature.
//   - DeleteObjects requests of more than 1,000 keys are refused with
//     MalformedXML, as AWS does; gofakes3 accepts any number.
//   - aws-chunked uploads with trailing checksums (what AWS SDKs send over
//     HTTPS by default since 2025) are refused with NotImplemented; gofakes3
//     would store the chunk framing as the object's content.
//
// It is not for production: it holds whole objects in memory (or in one
// bbolt file) and implements only the S3 subset gofakes3 does.
package s3server
