package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// fill sets every field of the value v points to, recursively, to a value
// that is not the zero value (slices and maps get one element), so a field
// that a conversion forgets shows in its JSON.
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

func TestWireRequestsBecomeCommands(t *testing.T) {
	var ma wire.ManifestAck
	fill(reflect.ValueOf(&ma).Elem(), 0)
	if got, want := mustJSON(t, fsmManifestAck(&ma)), mustJSON(t, &ma); !bytes.Equal(got, want) {
		t.Fatalf("the manifest of an ack becomes\n%s\nfrom\n%s", got, want)
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
