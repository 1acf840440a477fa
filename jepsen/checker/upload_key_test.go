package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
)

// TestUploadKeyHandedOutTwice: two upload-slot requests of different
// tasks were answered the same key ("each call hands out fresh keys",
// client.UploadSlots); the second upload then writes over (or, with a
// conditional presigned PUT, is refused by) the object a checkpoint of
// the first references. The history holds both keys, but no checker
// compares them, and the workload keeps one content per key
// (workload.go:618, contents.Store overwrites): the restores of the first
// checkpoint then fail their CRC32C check, which the history records as a
// plain failed read (see TestRestoreOfChangedBytesIsAViolation). Fails
// today. Proposed fix: GCSafety (or Acks) reports an upload key answered
// to two upload ops, and the workload uses LoadOrStore and records the
// second upload with a code of its own.
func TestUploadKeyHandedOutTwice(t *testing.T) {
	b := newHB()
	exp := b.ms(60_000)
	b.add(history.Op{Kind: history.KindUpload, Job: "j", Task: "agg-0", Gen: 1, Epoch: 1, Key: "j/agg-0/k", Expires: &exp, Client: 1}, 0, 10)
	b.add(history.Op{Kind: history.KindUpload, Job: "j", Task: "agg-1", Gen: 1, Epoch: 1, Key: "j/agg-0/k", Expires: &exp, Client: 2}, 20, 30)
	in := &Input{Ops: b.ops}
	for _, v := range []Verdict{Acks(in), GCSafety(in)} {
		if !v.OK {
			return
		}
	}
	t.Fatal("an upload key handed out to two uploads accepted by acks and gc-safety")
}
