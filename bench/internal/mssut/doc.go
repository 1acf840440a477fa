// Package mssut is the metastore as a system under test of the benchmark:
// it implements sut.System and sut.Extras with three real `metastore
// serve` processes on loopback, their blobs in a real S3-protocol server
// process (cmd/s3server, objects on disk), driven through the project's Go
// client (package client).
//
//	sys := mssut.New(mssut.Options{})
//	err := sys.Start(ctx, dir) // builds the binaries into dir/bin, starts everything
//	defer sys.Stop()
//
// # Processes
//
// Start builds cmd/metastore and cmd/s3server from the tree with the go
// tool (the bench module's replace directive points at the checkout; both
// are tools of the bench module so their dependencies are in its go.sum)
// unless Options names prebuilt binaries. The S3 server keeps its bucket
// in dir/s3 and logs every request (-v): the system counts the requests
// from that log. The members are n1, n2 and n3 with data in dir/n1..n3
// and logs in dir/n1.log..n3.log; they keep the store's production
// defaults (fsync on every Raft append and FSM batch, Raft timeouts,
// snapshot thresholds, request body limit) except for the garbage
// collector, whose grace is short (Options.GCGrace, 2s) and whose periodic
// cycle is an hour away (Options.GCInterval) so that Extras.GC starts the
// cycles it times; the orphan sweep runs once, when Start has the cluster
// ready, and its period of 24h keeps it from running again (off, the
// leader would record upload slots through Raft instead of signing them).
// Every process gets SIGKILL
// when the benchmark's process dies (Linux).
//
// # Mapping of the logical operations
//
//   - CreateJob: PUT /v1/jobs/{job} (default config: one retained
//     checkpoint) and POST .../attempts with every task ["state",
//     "incremental"]; the generation is kept per job.
//   - BeginEpoch: POST .../epochs.
//   - Keys: upload slots (POST .../uploads, at most 1,000 per request):
//     keys held by intents with a lease. The store presigns an S3 PUT URL
//     for each, which costs the leader CPU per key.
//   - Ack: PUT .../acks/{task} with an incremental delta adding the
//     segments; keys not yet committed by the task are committed by the
//     ack (manifest.blobs) with the extent of their segments in it. No
//     object bytes are uploaded: the store does not look at the object
//     store when an ack commits a blob.
//   - ReadManifest: the restore plan (GET .../tasks/{task}/restore), which
//     carries the whole state manifest; from the leader, or with stale
//     from a follower's own state (consistency=stale, added by the
//     transport of a per-member client since the client has no
//     consistency option).
//   - Preload: acks packed to the store's limits (10,000 references and
//     1,000 blobs per ack, a 1 MiB body).
//   - Leader, Kill, Restart: /v1/status of the members; SIGKILL; the same
//     command line again, waiting until the member is ready and has
//     applied what the leader had.
package mssut
