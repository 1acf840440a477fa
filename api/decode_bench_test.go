package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// ackBatchBody is the body of a POST /v1/acks of n acks of segs segments
// each, as the client sends it.
func ackBatchBody(n, segs int) ([]byte, error) {
	var req wire.AckBatchRequest
	for i := range n {
		it := wire.AckBatchItem{Job: "job-1", Epoch: uint64(100 + i), Task: fmt.Sprintf("t%d", i), Generation: 3,
			Manifest: &wire.ManifestAck{Delta: &manifests.Delta{}}}
		for s := range segs {
			key := fmt.Sprintf("job-1/t%d/%056x", i, s)
			it.Manifest.Blobs = append(it.Manifest.Blobs, wire.BlobCommit{Key: key, Size: 65536})
			it.Manifest.Delta.AddSegments = append(it.Manifest.Delta.AddSegments, manifests.Segment{Key: key, Length: 65536, FirstSeq: uint64(s*100 + 1), LastSeq: uint64(s*100 + 100)})
		}
		req.Acks = append(req.Acks, it)
	}
	return json.Marshal(req)
}

// BenchmarkDecodeAckBatch decodes the body of a POST /v1/acks of 16 acks
// of three segments each, what the client sends at 64 workers.
func BenchmarkDecodeAckBatch(b *testing.B) {
	body, err := ackBatchBody(16, 3)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/acks", bytes.NewReader(body))
		var got wire.AckBatchRequest
		if err := decodeBody(r, &got, false); err != nil {
			b.Fatal(err)
		}
	}
}
