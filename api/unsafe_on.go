//go:build faultinject

package api

import "os"

// unsafeStaleReads is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_STALE_READS=1 every read is
// served as a stale one, by the member asked, from its own state, without
// forwarding to the leader or confirming leadership. The suite's
// linearizability checker must then report a violation.
var unsafeStaleReads = os.Getenv("METASTORE_UNSAFE_STALE_READS") == "1"
