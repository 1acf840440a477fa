package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/jepsen/s3proxy"
	"github.com/metastore/metastore/jepsen/workload"
)

// TestChecksumMismatchNeedsACorruptedGet: a restore recorded with
// workload.CodeChecksum (every read of a range failed its acked CRC32C)
// passes acks only when the S3 proxy flipped bytes of a GET of that blob
// while the restore ran (s3-corrupt-get); a flipped GET of another key, or
// one outside the restore, or none, leaves a violation.
func TestChecksumMismatchNeedsACorruptedGet(t *testing.T) {
	b := newHB()
	b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", Key: "j/agg-0/k",
		Outcome: history.Fail, Code: workload.CodeChecksum, Error: "crc32c mismatch", Client: 2}, 100, 200)
	get := func(key string, at, flipped int) s3proxy.Request {
		return s3proxy.Request{Op: s3proxy.OpGet, Key: "ms/" + key, Start: b.ms(at), Status: 206, Upstream: 206, Forwarded: true, Flipped: flipped}
	}
	for _, c := range []struct {
		name string
		s3   []s3proxy.Request
		ok   bool
	}{
		{"no S3 log", nil, false},
		{"GETs answered intact", []s3proxy.Request{get("j/agg-0/k", 120, 0), get("j/agg-0/k", 150, 0)}, false},
		{"flipped GET of another key", []s3proxy.Request{get("j/agg-0/other", 150, 2)}, false},
		{"flipped GET before the restore", []s3proxy.Request{get("j/agg-0/k", 50, 2)}, false},
		{"flipped GET after the restore", []s3proxy.Request{get("j/agg-0/k", 250, 2)}, false},
		{"flipped GET during the restore", []s3proxy.Request{get("j/agg-0/k", 120, 0), get("j/agg-0/k", 150, 3)}, true},
	} {
		v := Acks(&Input{Ops: b.ops, S3: c.s3, S3Prefix: "ms/"})
		if v.OK != c.ok {
			t.Errorf("%s: acks ok=%v, want %v (%s)", c.name, v.OK, c.ok, v.Summary)
		}
	}
}
