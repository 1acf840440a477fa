package client

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestJSONAsEncodingJSON holds marshal and unmarshal to encoding/json on
// the API's types: the bytes json.Marshal writes for the requests the
// client sends, and the values json.Unmarshal decodes from the answers
// the server writes (through json.Marshal and through the hand-written
// encoders of wire, which the server uses for acks and upload slots).
func TestJSONAsEncodingJSON(t *testing.T) {
	odd := "<a&b> \u2028 \u2029 caf\u00e9 \"q\" \\ \x7f \U0001F600"
	when := time.Date(2026, 12, 4, 15, 4, 5, 123456789, time.FixedZone("x", 3600))
	later := when.Add(90 * time.Second).UTC()
	requests := []any{
		&wire.AckBatchItem{Job: "job-1", Epoch: 7, Task: "t" + odd, Generation: 3,
			Payloads: map[wire.Kind][]byte{"input": []byte("offset=1\x00\xff"), "output": {}},
			Manifest: &wire.ManifestAck{
				Base:  &wire.BaseRef{Job: "job-0", Task: "t0", Epoch: 6},
				Blobs: []wire.BlobCommit{{Key: "job-1/k1", Size: 65536, Checksum: "sha256:00"}},
				Delta: &manifests.Delta{
					Materialize:  &manifests.Materialization{Bases: []manifests.Base{{Key: "job-1/b", Length: 10, CRC32C: "0a0b0c0d"}}},
					DropSegments: []manifests.Ref{{Key: "job-1/k0", Offset: 5}},
					AddSegments:  []manifests.Segment{{Key: "job-1/k1", Length: 65536, FirstSeq: 1, LastSeq: 1 << 62}},
				},
			}},
		wire.TaskAckRequest{Generation: 1, Manifest: &wire.ManifestAck{Full: &manifests.Manifest{}}},
		wire.EpochBeginRequest{Generation: 2, Epoch: 1<<63 - 1},
		wire.UploadsRequest{Generation: 2, Task: odd, Count: 3},
		wire.JobPutRequest{Config: wire.JobConfig{Retained: 2}},
	}
	// Every body the client sends, at its zero value: a field the two
	// encoders treat differently when zero shows here.
	for _, v := range marshaledRequests {
		requests = append(requests, reflect.New(reflect.TypeOf(v)).Elem().Interface())
	}
	for _, v := range requests {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%T: marshal wrote\n%s\nencoding/json\n%s", v, got, want)
		}
	}

	epoch := &wire.Epoch{Job: "job-1" + odd, Epoch: 7, Generation: 3, State: wire.EpochCompleted, BeganAt: when, Deadline: later,
		CompletedAt: &later, Expected: 4, Acked: 4, PayloadBytes: 12, Pinned: true, PinName: "p", CreateIndex: 9, ModifyIndex: 10}
	ack := &wire.AckResult{Completed: true, Epoch: epoch, Ack: &wire.Ack{Task: "t0", At: later, Delay: wire.Duration(1500 * time.Millisecond),
		Sizes: map[wire.Kind]int{"input": 8}, ContentHash: "sha256:ab", Index: 11, Lineage: 2}}
	batch := &wire.AckBatchAnswer{Results: []wire.AckBatchResult{
		{Status: 200, Ack: ack},
		{Status: 409, Error: &wire.Error{Code: "conflict", Field: "generation", Message: odd, Retryable: true}},
	}}
	uploads := wire.Uploads{LeaseUntil: later, Uploads: []wire.Upload{{Key: "job-1/k1", Method: "PUT", URL: "http://127.0.0.1:9/b/job-1/k1?X-Amz-Signature=ab&x=" + odd,
		Header: http.Header{"Content-Type": {"application/octet-stream"}, "X-Amz-Meta-A": {"1", "2"}}, ExpiresAt: later}}}
	answers := []struct {
		v   any
		raw func() ([]byte, bool)
	}{
		{batch, func() ([]byte, bool) { return batch.AppendJSON(nil) }},
		{ack, func() ([]byte, bool) { return ack.AppendJSON(nil) }},
		{&uploads, func() ([]byte, bool) { return uploads.AppendJSON(nil) }},
		{epoch, nil},
		{&wire.Job{ID: "job-1", Config: wire.JobConfig{Retained: 3}, Generation: 2, LastEpoch: 9}, nil},
		{&wire.Attempt{Job: "job-1", Generation: 2, AttemptID: "a", StartedAt: when, Tasks: 2, Expected: 2}, nil},
	}
	for _, a := range answers {
		encoded := [][]byte{}
		raw, err := json.Marshal(a.v)
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, raw)
		if a.raw != nil {
			raw, ok := a.raw()
			if !ok {
				t.Fatalf("%T: the wire encoder refused it", a.v)
			}
			encoded = append(encoded, raw)
		}
		typ := reflect.TypeOf(a.v).Elem()
		for _, raw := range encoded {
			want, got := reflect.New(typ).Interface(), reflect.New(typ).Interface()
			if err := json.Unmarshal(raw, want); err != nil {
				t.Fatal(err)
			}
			if err := unmarshal(raw, got); err != nil {
				t.Fatalf("%T: unmarshal: %v", a.v, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%T from %s: unmarshal decoded %+v, encoding/json %+v", a.v, raw, got, want)
			}
		}
	}

	// A refused answer is refused with encoding/json's words.
	for _, raw := range []string{`{"results":[}`, `{"results":[{"status":"x"}]}`, `{} {}`} {
		var a, b wire.AckBatchAnswer
		errA, errB := unmarshal([]byte(raw), &a), json.Unmarshal([]byte(raw), &b)
		if errA == nil || errA.Error() != errB.Error() {
			t.Errorf("%s: unmarshal answered %v, encoding/json %v", raw, errA, errB)
		}
	}
}

// marshaledRequests are the request bodies the client encodes with
// marshal (mutate, mutateQuery, the acks).
var marshaledRequests = []any{
	wire.AckBatchItem{}, wire.TaskAckRequest{}, wire.JobPutRequest{}, wire.AttemptStartRequest{},
	wire.EpochBeginRequest{}, wire.EpochAbortRequest{}, wire.PinRequest{}, wire.UploadsRequest{},
	wire.MemberRequest{},
}

// TestMarshaledRequestsHaveNoOmitzero: github.com/segmentio/encoding's
// encoder ignores the omitzero option (a zero field is written, where
// json.Marshal leaves it out), so no field of a body the client encodes
// with it may carry the option; one that needs it is encoded with
// encoding/json instead.
func TestMarshaledRequestsHaveNoOmitzero(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if slices.Contains(strings.Split(f.Tag.Get("json"), ",")[1:], "omitzero") {
				t.Errorf("%s.%s (%s) has the omitzero option, which marshal ignores", path, f.Name, typ)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	for _, v := range marshaledRequests {
		walk(reflect.TypeOf(v), reflect.TypeOf(v).String())
	}
	if len(seen) < len(marshaledRequests) {
		t.Fatalf("walked %d types", len(seen))
	}
}
