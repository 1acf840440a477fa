package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAppendedBucketsFilled: the buckets whose keys grow (blob keys that
// start with their time, lineage records, their changes, acks) keep their
// pages nearly full as acks append to them, instead of the half-full pages
// bbolt leaves by default when a page splits.
func TestAppendedBucketsFilled(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{Retained: 1000})
	var specs []wire.Task
	for i := range 4 {
		specs = append(specs, task(t, fmt.Sprintf("t%d", i), "state", "incremental"))
	}
	h.start("j", "a1", specs...)
	mustOK(t, h.mustApply(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: testSlotKey}))
	signer := fsm.NewSlotSigner(testSlotKey)
	keys := map[string][]string{}
	seq := uint64(0)
	for e := uint64(1); e <= 150; e++ {
		h.begin("j", 1, e)
		for i := range 4 {
			tk := fmt.Sprintf("t%d", i)
			if len(keys[tk]) < 3 {
				keys[tk] = signer.Keys("j", tk, 1, h.now.Add(time.Hour+time.Duration(e)), uint16(e), 300)
			}
			m := &fsm.ManifestAck{Delta: &manifests.Delta{}}
			for _, k := range keys[tk][:3] {
				seq++
				m.Blobs = append(m.Blobs, fsm.BlobCommit{Key: k, Size: 100})
				m.Delta.AddSegments = append(m.Delta.AddSegments, manifests.Segment{Key: k, Length: 100, FirstSeq: seq, LastSeq: seq})
			}
			keys[tk] = keys[tk][3:]
			mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: e, Task: tk, Manifest: m}))
		}
		h.advance(time.Second)
	}
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"blobs", "records", "rec_changes", "acks"} {
		fill, err := fsm.BucketFill(h.f, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: leaf pages %.0f%% full", name, 100*fill)
		if fill < 0.8 {
			t.Errorf("%s: leaf pages %.0f%% full, want at least 80%%", name, 100*fill)
		}
	}
}
