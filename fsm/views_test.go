package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// fill sets every field of the value v points to, recursively, to a value
// that is not the zero value (slices and maps get one element), so a field
// of a record that a conversion forgets shows in its JSON.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("payload"))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

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
					fill(v.Elem(), 0)
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
	fill(reflect.ValueOf(&tok).Elem(), 0)
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
