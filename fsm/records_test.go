package fsm

import (
	"encoding/json"
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
	default:
		t.Fatalf("%s: a %s field; teach fillRecord (and check msgp encodes it)", path, v.Kind())
	}
}

// TestBinaryRecordsKeepEveryField: every record of records.go, with every
// field set, comes back from its MessagePack form as it came back from
// JSON, and so do records with empty and nil lists. A field added to a
// record without running `go generate ./fsm/` is missing from the
// generated methods and fails here.
func TestBinaryRecordsKeepEveryField(t *testing.T) {
	for _, b := range binaryBuckets {
		full := b.zero()
		fillRecord(t, reflect.ValueOf(full).Elem(), reflect.TypeOf(full).Elem().Name())
		empty := b.zero()
		for i := range reflect.ValueOf(empty).Elem().NumField() {
			if f := reflect.ValueOf(empty).Elem().Field(i); f.Kind() == reflect.Slice && f.CanSet() {
				f.Set(reflect.MakeSlice(f.Type(), 0, 0))
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
