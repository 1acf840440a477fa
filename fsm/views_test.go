package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/metastore/metastore/internal/fill"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

// TestViewsKeepEveryField checks that every record the state machine
// shows converts to a wire type whose JSON is byte for byte the record's
// (the API answered with the records' JSON before it had types of its
// own): once with every field set, once as the zero value (nil slices and
// pointers, which omitempty and null depend on).
func TestViewsKeepEveryField(t *testing.T) {
	views := []struct {
		record any
		show   func(any) any
		// command: a command's value may be this record, which its
		// Result shows as the wire type (shown).
		command bool
	}{
		{&jobRecord{}, func(v any) any { return wireJob(v.(*jobRecord)) }, true},
		{&attemptRecord{}, func(v any) any { a := wireAttempt(v.(*attemptRecord)); return &a }, true},
		{&taskRecord{}, func(v any) any { tk := wireTask(v.(*taskRecord)); return &tk }, false},
		{&epochRecord{}, func(v any) any { return wireEpoch(v.(*epochRecord)) }, true},
		{&ackRecord{}, func(v any) any { return wireAck(v.(*ackRecord)) }, false},
		{&ackResult{}, func(v any) any { return wireAckResult(v.(*ackResult)) }, true},
		{&blobRecord{}, func(v any) any { return wireBlob(v.(*blobRecord)) }, true},
		{&observation{}, func(v any) any { return wireObservation(v.(*observation)) }, false},
	}
	for _, c := range views {
		for _, filled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%T/filled=%v", c.record, filled), func(t *testing.T) {
				v := reflect.New(reflect.TypeOf(c.record).Elem())
				if filled {
					fill.Value(v.Elem())
				}
				in := v.Interface()
				out := c.show(in)
				if got, want := mustJSON(t, out), mustJSON(t, in); !bytes.Equal(got, want) {
					t.Fatalf("%T shows\n%s\nthe record is\n%s", out, got, want)
				}
				if c.command {
					if got, want := reflect.TypeOf(shown(in)), reflect.TypeOf(out); got != want {
						t.Fatalf("a command's %T is shown as %v, not %v", in, got, want)
					}
				}
			})
		}
	}
	var nilJob *jobRecord
	if got := mustJSON(t, wireJob(nilJob)); string(got) != "null" {
		t.Errorf("a nil job shows %s", got)
	}
}

// TestTokenViewHidesTheHash: a token shows its record without the hash of
// its secret.
func TestTokenViewHidesTheHash(t *testing.T) {
	var tok tokenRecord
	fill.Fill(&tok)
	tok.Hash = "0123456789abcdef"
	got := mustJSON(t, shown(&tok))
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["hash"]; ok || bytes.Contains(got, []byte(tok.Hash)) {
		t.Fatalf("the token shows its hash: %s", got)
	}
	want := map[string]bool{"accessor": true, "role": true, "job": true, "job_prefix": true, "description": true, "created_at": true, "create_index": true}
	for k := range m {
		if !want[k] {
			t.Errorf("the token shows field %q", k)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("the token does not show field %q", k)
	}
}
