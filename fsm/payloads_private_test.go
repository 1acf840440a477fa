package fsm

import (
	"reflect"
	"testing"
	"time"

	"github.com/metastore/metastore/manifests"
)

// TestAckPayloadRoundTrips: a task-ack payload decodes from MessagePack
// (version 3) to what it decoded to from JSON (version 2), nil and empty
// slices and maps kept apart, so its content hash, which a retried ack is
// compared by, is the one an older build stored.
func TestAckPayloadRoundTrips(t *testing.T) {
	seg := manifests.Segment{Key: "j/t/a", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 2, CRC32C: "0a0b0c0d"}
	base := manifests.Base{Key: "j/t/b", Offset: 5, Length: 20}
	acks := map[string]TaskAck{
		"bare":           {Job: "j", Generation: 1, Epoch: 2, Task: "t"},
		"empty payloads": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Payloads: map[Kind][]byte{}},
		"payloads":       {Job: "j", Generation: 1, Epoch: 2, Task: "t", Payloads: map[Kind][]byte{"input": []byte("offsets"), "state": {}}},
		"empty manifest": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{}},
		"delta": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{
			Base:  &BaseRef{Job: "k", Task: "u", Epoch: 7},
			Blobs: []BlobCommit{{Key: "j/t/a", Size: 10, Checksum: "c"}},
			Delta: &manifests.Delta{DropSegments: []manifests.Ref{{Key: "j/t/z", Offset: 3}}, AddSegments: []manifests.Segment{seg}},
		}},
		"empty delta lists": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{
			Blobs: []BlobCommit{},
			Delta: &manifests.Delta{DropSegments: []manifests.Ref{}, AddSegments: []manifests.Segment{}, Materialize: &manifests.Materialization{}},
		}},
		"materialize": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{
			Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{base}, TruncateBefore: 9}},
		}},
		"materialize no bases": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{
			Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{}, TruncateBefore: 9}},
		}},
		"full": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{
			Full: &manifests.Manifest{Bases: []manifests.Base{base}, Segments: []manifests.Segment{seg}},
		}},
		"full empty":    {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{Full: &manifests.Manifest{Bases: []manifests.Base{}, Segments: []manifests.Segment{}}}},
		"full nil sets": {Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &ManifestAck{Full: &manifests.Manifest{}}},
	}
	now := time.Unix(1_800_000_000, 0)
	for name, ack := range acks {
		t.Run(name, func(t *testing.T) {
			decode := func(v uint8) *TaskAck {
				t.Helper()
				raw, err := encodeVersion(CmdTaskAck, v, now, ack)
				if err != nil {
					t.Fatal(err)
				}
				c, err := Decode(raw)
				if err != nil {
					t.Fatal(err)
				}
				var out TaskAck
				if err := decodePayload(c, &out); err != nil {
					t.Fatal(err)
				}
				return &out
			}
			fromJSON, fromBinary := decode(2), decode(3)
			if !reflect.DeepEqual(fromJSON, fromBinary) {
				t.Fatalf("version 3 decodes to\n%#v\nversion 2 to\n%#v", fromBinary, fromJSON)
			}
			if a, b := fromJSON.contentHash(), fromBinary.contentHash(); a != b {
				t.Fatalf("content hash %s from version 3, %s from version 2", b, a)
			}
		})
	}
}

// TestBinaryPayloadsRoundTrip: intent-create and blobs-observed decode
// from MessagePack (intent-create 3, blobs-observed 2) to what they
// decoded to from JSON (intent-create 2, blobs-observed 1).
func TestBinaryPayloadsRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	lease := time.Unix(1_800_000_900, 123456789).UTC()
	cases := []struct {
		name      string
		typ       CommandType
		json, bin uint8
		payload   any
		zero      func() any
	}{
		{"intent", CmdIntentCreate, 2, 3, IntentCreate{Job: "j", Generation: 4, Task: "t", Keys: []string{"j/a", "j/b"}, LeaseUntil: lease}, func() any { return new(IntentCreate) }},
		{"intent without task", CmdIntentCreate, 2, 3, IntentCreate{Job: "j", Generation: 4, Keys: []string{"j/a"}, LeaseUntil: lease}, func() any { return new(IntentCreate) }},
		{"observed", CmdBlobsObserved, 1, 2, BlobsObserved{Blobs: []BlobObservation{{Key: "j/a", Size: 10, ETag: "e"}, {Key: "j/b", Missing: true}}}, func() any { return new(BlobsObserved) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			decode := func(v uint8) any {
				t.Helper()
				raw, err := encodeVersion(tc.typ, v, now, tc.payload)
				if err != nil {
					t.Fatal(err)
				}
				c, err := Decode(raw)
				if err != nil {
					t.Fatal(err)
				}
				out := tc.zero()
				if err := decodePayload(c, out); err != nil {
					t.Fatal(err)
				}
				return out
			}
			if a, b := decode(tc.json), decode(tc.bin); !reflect.DeepEqual(a, b) {
				t.Fatalf("version %d decodes to\n%#v\nversion %d to\n%#v", tc.bin, b, tc.json, a)
			}
		})
	}
}
