package api_test

import (
	"testing"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/wire"
)

// TestAckOfAnOversizedBlobRefused: an ack that declares a blob larger than
// the largest object (api.MaxBlobSize, 5 TiB) is a 400 naming the blob's
// size, alone or in a batch, and changes nothing.
func TestAckOfAnOversizedBlobRefused(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-big", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	key := upload(t, j, "agg", "0123456789")
	j.begin(t, 1)
	manifest := func(size uint64) map[string]any {
		return map[string]any{
			"blobs": []map[string]any{{"key": key, "size": size}},
			"delta": map[string]any{"add_segments": []map[string]any{{"key": key, "offset": 0, "length": 10, "first_seq": 1, "last_seq": 1}}}}
	}
	before := stateHash(t, m)
	for _, size := range []uint64{api.MaxBlobSize + 1, 1<<64 - 1} {
		r := do(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": manifest(size)})
		expectError(t, r, 400, "invalid_argument", "manifest.blobs[0].size")
		var ans wire.AckBatchAnswer
		ok(t, "POST", m.URL+"/v1/acks", map[string]any{"acks": []map[string]any{{"job": "job-big", "generation": 1, "epoch": 1, "task": "agg", "manifest": manifest(size)}}}, &ans)
		if len(ans.Results) != 1 || ans.Results[0].Status != 400 || ans.Results[0].Error == nil || ans.Results[0].Error.Field != "manifest.blobs[0].size" {
			t.Fatalf("batched ack of a %d-byte blob: %+v, want 400 on manifest.blobs[0].size", size, ans.Results)
		}
	}
	if after := stateHash(t, m); after != before {
		t.Fatal("a refused ack changed the state")
	}
	// At the bound the size is not what refuses it: the ack is applied
	// (the leader's observation later finds the object's real size).
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": manifest(api.MaxBlobSize)}, nil)
}
