package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
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

// TestWireAnswersKeepTheJSON checks that every record the API answers
// with converts to a wire type whose JSON is byte for byte the record's:
// once with every field set, once as the zero value (nil slices and
// pointers, which omitempty and null depend on).
func TestWireAnswersKeepTheJSON(t *testing.T) {
	records := []any{
		&fsm.Job{}, &fsm.Attempt{}, &fsm.AttemptDetail{}, &fsm.AttemptList{}, &fsm.Epoch{},
		&fsm.EpochDetail{}, &fsm.AckResult{}, &fsm.RestorePlan{}, &fsm.Blob{},
		[]fsm.Job{{}}, []fsm.Epoch{{}},
	}
	for _, rec := range records {
		for _, filled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%T/filled=%v", rec, filled), func(t *testing.T) {
				v := reflect.New(reflect.TypeOf(rec))
				if filled {
					fill(v.Elem(), 0)
				} else {
					v.Elem().Set(reflect.ValueOf(rec))
				}
				in := v.Elem().Interface()
				out := toWire(in)
				if reflect.TypeOf(out) == reflect.TypeOf(in) {
					t.Fatalf("toWire(%T) did not convert it", in)
				}
				if got, want := mustJSON(t, out), mustJSON(t, in); !bytes.Equal(got, want) {
					t.Fatalf("%T answers\n%s\nthe record is\n%s", out, got, want)
				}
			})
		}
	}
	var nilJob *fsm.Job
	if got := mustJSON(t, toWire(nilJob)); string(got) != "null" {
		t.Errorf("a nil job answers %s", got)
	}
	if got := mustJSON(t, toWire([]fsm.Job(nil))); string(got) != "null" {
		t.Errorf("a nil job list answers %s", got)
	}
	if got := mustJSON(t, toWire([]fsm.Job{})); string(got) != "[]" {
		t.Errorf("an empty job list answers %s", got)
	}
}

// TestWireTokenHidesTheHash: a token answers its record without the hash
// of its secret.
func TestWireTokenHidesTheHash(t *testing.T) {
	var tok fsm.Token
	fill(reflect.ValueOf(&tok).Elem(), 0)
	tok.Hash = "0123456789abcdef"
	got := mustJSON(t, toWire(&tok))
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["hash"]; ok || bytes.Contains(got, []byte(tok.Hash)) {
		t.Fatalf("the token answers its hash: %s", got)
	}
	want := map[string]bool{"accessor": true, "role": true, "job": true, "job_prefix": true, "description": true, "created_at": true, "create_index": true}
	for k := range m {
		if !want[k] {
			t.Errorf("the token answers field %q", k)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("the token does not answer field %q", k)
	}
}

func TestWireRequestsBecomeCommands(t *testing.T) {
	var ma wire.ManifestAck
	fill(reflect.ValueOf(&ma).Elem(), 0)
	if got, want := mustJSON(t, fsmManifestAck(&ma)), mustJSON(t, &ma); !bytes.Equal(got, want) {
		t.Fatalf("the manifest of an ack becomes\n%s\nfrom\n%s", got, want)
	}
	var cfg wire.JobConfig
	fill(reflect.ValueOf(&cfg).Elem(), 0)
	if got, want := mustJSON(t, fsmJobConfig(cfg)), mustJSON(t, cfg); !bytes.Equal(got, want) {
		t.Fatalf("a job config becomes %s from %s", got, want)
	}
	var info node.BackupInfo
	fill(reflect.ValueOf(&info).Elem(), 0)
	if got, want := mustJSON(t, wireBackupInfo(info)), mustJSON(t, info); !bytes.Equal(got, want) {
		t.Fatalf("backup info answers %s; the file holds %s", got, want)
	}
}

// TestEnvelopesKeepTheJSON: the objects that wrap answers were written as
// maps, whose keys encoding/json sorts; each wire envelope, with every
// field set, encodes as the map of its fields would.
func TestEnvelopesKeepTheJSON(t *testing.T) {
	for _, env := range []any{
		wire.JobList{}, wire.EpochList{}, wire.Membership{}, wire.MembershipChange{}, wire.LeaderTransfer{},
		wire.StateHash{}, wire.TokenList{}, wire.TokenRevoked{}, wire.Uploads{}, wire.ObjectPut{},
		wire.BlobStatsAnswer{}, wire.FsckAnswer{}, wire.ManifestAnswer{}, wire.SnapshotRestored{}, wire.MembersStatus{},
	} {
		t.Run(fmt.Sprintf("%T", env), func(t *testing.T) {
			v := reflect.New(reflect.TypeOf(env)).Elem()
			fill(v, 0)
			asMap := map[string]any{}
			for i := 0; i < v.NumField(); i++ {
				name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
				asMap[name] = v.Field(i).Interface()
			}
			if got, want := mustJSON(t, v.Interface()), mustJSON(t, asMap); !bytes.Equal(got, want) {
				t.Fatalf("%T encodes as\n%s\nthe map of its fields as\n%s", env, got, want)
			}
		})
	}
}
