package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/metastore/metastore/internal/fill"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

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
	fill.Fill(&ma)
	if got, want := mustJSON(t, fsmManifestAck(&ma)), mustJSON(t, &ma); !bytes.Equal(got, want) {
		t.Fatalf("the manifest of an ack becomes\n%s\nfrom\n%s", got, want)
	}
	var info node.BackupInfo
	fill.Fill(&info)
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
			fill.Value(v)
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
