package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"
)

// fillRecord sets every exported field of the struct v points to, nested
// structs and pointed-to values included, to a value other than its zero.
func fillRecord(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillRecord(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 2, 7, 30, 0, 123456789, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fillRecord(t, v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.String:
		v.SetString("x" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fillRecord(t, s.Index(i), path)
		}
		v.Set(s)
	case reflect.Map:
		// Several keys, so that an encoding in Go's map order would show.
		m := reflect.MakeMap(v.Type())
		for _, k := range []string{"c", "a", "d", "b"} {
			key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			key.SetString(k + path)
			fillRecord(t, val, path)
			m.SetMapIndex(key, val)
		}
		v.Set(m)
	default:
		t.Fatalf("%s: a %s field; teach fillRecord (and check msgp encodes it)", path, v.Kind())
	}
}

// TestBinaryRecordsKeepEveryField: every record of records.go, with every
// field set, comes back from its MessagePack form as it came back from
// JSON, and so do records with empty and nil lists and maps. A field added to a
// record without running `go generate ./fsm/` is missing from the
// generated methods and fails here.
func TestBinaryRecordsKeepEveryField(t *testing.T) {
	for _, b := range binaryBuckets {
		full := b.zero()
		fillRecord(t, reflect.ValueOf(full).Elem(), reflect.TypeOf(full).Elem().Name())
		empty := b.zero()
		for i := range reflect.ValueOf(empty).Elem().NumField() {
			switch f := reflect.ValueOf(empty).Elem().Field(i); {
			case f.Kind() == reflect.Slice && f.CanSet():
				f.Set(reflect.MakeSlice(f.Type(), 0, 0))
			case f.Kind() == reflect.Map && f.CanSet():
				f.Set(reflect.MakeMap(f.Type()))
			}
		}
		for _, rec := range []msgRecord{full, empty, b.zero()} {
			want, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := encodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if raw[0] == '{' {
				t.Fatalf("%T stored as JSON", rec)
			}
			back := b.zero()
			if err := decodeRecord(raw, back); err != nil {
				t.Fatalf("%T: %v", rec, err)
			}
			if blob, ok := rec.(*blobRecord); ok {
				// A blob's key is its bucket key, not in its value
				// (schema version 7); decodeBlob sets it.
				if blob.Key != "" && bytes.Contains(raw, []byte(blob.Key)) {
					t.Errorf("the stored blob record holds its key %q", blob.Key)
				}
				back.(*blobRecord).Key = blob.Key
			}
			got, _ := json.Marshal(back)
			if string(got) != string(want) {
				t.Errorf("%T through MessagePack:\n got %s\nwant %s", rec, got, want)
			}
			// A JSON record (schema version 1) reads the same.
			fromJSON := b.zero()
			if err := decodeRecord(want, fromJSON); err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(fromJSON); string(again) != string(want) {
				t.Errorf("%T through JSON:\n got %s\nwant %s", rec, again, want)
			}
		}
	}
}

// TestMapFieldsEncodeInOrder: a record with a map field has one stored
// form, whatever Go's map order: members compare their states' bytes
// (stateHash).
func TestMapFieldsEncodeInOrder(t *testing.T) {
	sizes := kindSizes{}
	for i := range 40 {
		sizes[Kind(fmt.Sprintf("kind-%02d", (i*17)%40))] = i
	}
	a := &ackRecord{Task: "t", Sizes: sizes}
	first, err := encodeRecord(a)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		raw, err := encodeRecord(&ackRecord{Task: "t", Sizes: maps.Clone(sizes)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, first) {
			t.Fatalf("the same ack record encoded twice differs:\n%x\n%x", first, raw)
		}
	}
	var back ackRecord
	if err := decodeRecord(first, &back); err != nil || !maps.Equal(back.Sizes, sizes) {
		t.Fatalf("decoded %v, %v; want %v", back.Sizes, err, sizes)
	}
}
