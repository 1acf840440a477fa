package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/metastore/metastore/wire"
)

// TestBackupAndRestore saves a backup of a running store, restores it into
// a fresh one, and compares jobs, checkpoints and reference counts; a
// corrupt backup is refused and changes nothing.
func TestBackupAndRestore(t *testing.T) {
	src := startSingle(t)
	j := createJob(t, src.URL, "job-b", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}, {ID: "src", Caps: []string{"input"}}})
	key := upload(t, j, "agg", "0123456789")
	j.begin(t, 1)
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []any{map[string]any{"key": key, "size": 10}},
		"delta": map[string]any{"add_segments": []any{map[string]any{"key": key, "offset": 0, "length": 10, "first_seq": 1, "last_seq": 2}}}}}, nil)
	j.ack(t, 1, "src", map[string][]byte{"input": []byte("offset=9")})
	j.begin(t, 2)
	// The leader records what the object store holds shortly after the
	// ack (gc/observe.go): wait for it, so that the backup holds it too.
	waitFor(t, 10*time.Second, "observation of "+key, func() bool {
		b, _, err := src.FSM.Blob(key)
		return err == nil && b.Observed != nil
	})

	backup := do(t, "GET", src.URL+"/v1/snapshot", nil)
	if backup.status != http.StatusOK || !bytes.HasPrefix(backup.body, []byte(`{"format":"metastore-backup"`)) {
		t.Fatalf("backup: %d %.200s", backup.status, backup.body)
	}
	if got := backup.header.Get("Content-Length"); got != fmt.Sprint(len(backup.body)) {
		t.Fatalf("backup Content-Length %q, body %d bytes", got, len(backup.body))
	}

	dst := startSingle(t)
	before := stateHash(t, dst)
	corrupt := bytes.Clone(backup.body)
	corrupt[len(corrupt)-100] ^= 0xff
	for _, bad := range [][]byte{corrupt, backup.body[:len(backup.body)/2], []byte("not a backup\n")} {
		expectError(t, do(t, "PUT", dst.URL+"/v1/snapshot", bad), http.StatusBadRequest, "bad_backup", "")
	}
	if stateHash(t, dst) != before {
		t.Fatal("a refused restore changed the state")
	}
	ok(t, "PUT", dst.URL+"/v1/snapshot", backup.body, nil)

	// The same jobs, checkpoints, pending epochs and counts.
	for _, path := range []string{"/v1/jobs/job-b", "/v1/jobs/job-b/epochs/1", "/v1/jobs/job-b/epochs/2", "/v1/jobs/job-b/tasks/agg/restore", "/v1/jobs/job-b/tasks/src/restore", "/v1/blobs/" + key} {
		a := do(t, "GET", src.URL+path, nil)
		b := do(t, "GET", dst.URL+path, nil)
		if a.status != 200 || b.status != 200 || !bytes.Equal(a.body, b.body) {
			t.Fatalf("%s differs after restore:\n%s\n---\n%s", path, a.body, b.body)
		}
	}
	var fsck struct {
		OK bool `json:"ok"`
	}
	ok(t, "GET", dst.URL+"/v1/fsck", nil, &fsck)
	if !fsck.OK {
		t.Fatal("fsck after restore")
	}
	// The restored store keeps working: the pending epoch completes.
	ok(t, "PUT", fmt.Sprintf("%s/v1/jobs/job-b/epochs/2/acks/src", dst.URL), map[string]any{"generation": 1, "payloads": map[string][]byte{"input": []byte("offset=10")}}, nil)
	ok(t, "PUT", fmt.Sprintf("%s/v1/jobs/job-b/epochs/2/acks/agg", dst.URL), map[string]any{"generation": 1}, nil)
	var e wire.EpochDetail
	ok(t, "GET", dst.URL+"/v1/jobs/job-b/epochs/2", nil, &e)
	if e.State != wire.EpochCompleted {
		t.Fatalf("epoch 2 after restore: %+v", e.Epoch)
	}
}
