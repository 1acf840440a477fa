package fsm_test

import (
	"encoding/binary"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// batchOf builds a batch entry of cmds by hand (EncodeBatch refuses what
// these cases need), with the count given.
func batchOf(h *harness, count uint64, cmds ...[]byte) []byte {
	buf := append([]byte{byte(fsm.CmdBatch), 1}, binary.BigEndian.AppendUint64(nil, uint64(h.now.UnixNano()))...)
	buf = binary.AppendUvarint(buf, count)
	for _, c := range cmds {
		buf = binary.AppendUvarint(buf, uint64(len(c)))
		buf = append(buf, c...)
	}
	return buf
}

// TestAuditCorruptEntriesAreFatal: entries no build writes are corrupt
// and stop the member (a fatal error, nothing applied) rather than apply:
// a batch of no command, of more than MaxBatchCommands, a batch inside a
// batch, and a binary payload followed by bytes it does not take.
func TestAuditCorruptEntriesAreFatal(t *testing.T) {
	h := newHarness(t)
	put := h.encode(fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{}})
	inner, err := fsm.EncodeBatch(h.now, [][]byte{put})
	if err != nil {
		t.Fatal(err)
	}
	many := make([][]byte, fsm.MaxBatchCommands+1)
	for i := range many {
		many[i] = put
	}
	h.putJob("k", wire.JobConfig{})
	h.start("k", "a1", task(t, "src", "input"))
	h.begin("k", 1, 1)
	ack := h.encode(fsm.CmdTaskAck, fsm.TaskAck{Job: "k", Generation: 1, Epoch: 1, Task: "src"})
	for name, data := range map[string][]byte{
		"empty batch":             batchOf(h, 0),
		"batch above the bound":   batchOf(h, uint64(len(many)), many...),
		"batch in a batch":        batchOf(h, 1, inner),
		"ack with trailing bytes": append(ack, 0xc0),
	} {
		tr, err := fsm.TryApply(h.f, data)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Err == nil {
			t.Errorf("%s: applied (%+v), want a fatal error", name, tr.Result)
		}
	}
}
