package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

type uploadsAnswer struct {
	Uploads []wire.Upload `json:"uploads"`
}

// upload asks for one slot and PUTs body to it.
func upload(t *testing.T, j *job, task, body string) string {
	t.Helper()
	var ua uploadsAnswer
	ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": task, "count": 1}, &ua)
	if len(ua.Uploads) != 1 || ua.Uploads[0].Method != "PUT" {
		t.Fatalf("uploads: %+v", ua)
	}
	u := ua.Uploads[0]
	req, err := http.NewRequest("PUT", u.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", u.URL, resp.StatusCode, raw)
	}
	return u.Key
}

func TestManifestOverHTTP(t *testing.T) {
	// Quiet: the state hashes compared below would otherwise also move by
	// the observer's blobs-observed entry for the blob acked first.
	m := testmember.StartSingleQuiet(t)
	j := createJob(t, m.URL, "job-m", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}, {ID: "src", Caps: []string{"input"}}})

	// Epoch 1: one changelog blob with two segments.
	log1 := upload(t, j, "agg", strings.Repeat("a", 60)+strings.Repeat("b", 40))
	j.begin(t, 1)
	ack1 := map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": log1, "size": 100, "checksum": "crc32c:1234"}},
		"delta": map[string]any{"add_segments": []map[string]any{
			{"key": log1, "offset": 0, "length": 60, "first_seq": 1, "last_seq": 5},
			{"key": log1, "offset": 60, "length": 40, "first_seq": 6, "last_seq": 9}}}}}
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", ack1, nil)
	// The same ack again is the same ack.
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", ack1, nil)
	j.ack(t, 1, "src", map[string][]byte{"input": []byte("o=1")})

	var plan wire.RestorePlan
	ok(t, "GET", j.base+"/tasks/agg/restore", nil, &plan)
	st := plan.Kinds[wire.KindState]
	if st.Manifest == nil || len(st.Manifest.Segments) != 2 || plan.ObjectStoreReads != 2 || plan.ObjectStoreBytes != 100 {
		t.Fatalf("restore plan: %+v", plan)
	}
	// The restore reads its ranges through the object endpoint.
	resp := do(t, "GET", fmt.Sprintf("%s/v1/objects/%s?offset=60&length=40", m.URL, log1), nil)
	if resp.status != 200 || string(resp.body) != strings.Repeat("b", 40) {
		t.Fatalf("object range: %d %q", resp.status, resp.body)
	}
	var src wire.RestorePlan
	ok(t, "GET", j.base+"/tasks/src/restore", nil, &src)
	if src.ObjectStoreReads != 0 || src.Kinds[wire.KindState].Status != wire.RestoreNothing {
		t.Fatalf("task without state: %+v", src)
	}

	// Bad references, each a 4xx naming it, changing nothing.
	j.begin(t, 2)
	log2 := upload(t, j, "agg", "0123456789")
	seg := func(key string, off, n uint64) map[string]any {
		return map[string]any{"key": key, "offset": off, "length": n, "first_seq": 10, "last_seq": 10}
	}
	cases := []struct {
		name     string
		manifest map[string]any
		status   int
		code     wire.Code
		inMsg    string
	}{
		{"unknown blob", map[string]any{"delta": map[string]any{"add_segments": []any{seg("job-m/agg/nope", 0, 1)}}}, 409, "blob_unknown", "job-m/agg/nope"},
		{"uncommitted intent", map[string]any{"delta": map[string]any{"add_segments": []any{seg(log2, 0, 1)}}}, 400, "invalid_argument", log2},
		{"drop not in manifest", map[string]any{"delta": map[string]any{"drop_segments": []any{map[string]any{"key": log1, "offset": 5}}}}, 409, "manifest_mismatch", log1 + "@5"},
		{"duplicate segment", map[string]any{"blobs": []any{map[string]any{"key": log2, "size": 10}}, "delta": map[string]any{"add_segments": []any{seg(log2, 0, 1), seg(log2, 0, 1)}}}, 400, "invalid_argument", log2 + "@0"},
		{"past the end", map[string]any{"blobs": []any{map[string]any{"key": log2, "size": 10}}, "delta": map[string]any{"add_segments": []any{seg(log2, 5, 6)}}}, 400, "invalid_argument", log2 + "@5"},
		{"key outside the prefix", map[string]any{"delta": map[string]any{"add_segments": []any{seg("../other/x", 0, 1)}}}, 400, "invalid_argument", "../other/x"},
		{"absolute key", map[string]any{"delta": map[string]any{"add_segments": []any{seg("/etc/passwd", 0, 1)}}}, 400, "invalid_argument", "/etc/passwd"},
		{"already present", map[string]any{"delta": map[string]any{"add_segments": []any{seg(log1, 0, 60)}}}, 409, "manifest_mismatch", log1 + "@0"},
		{"full manifest from an incremental task", map[string]any{"full": map[string]any{"segments": []any{}}}, 400, "invalid_argument", "incremental"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateHash(t, m)
			for try := 0; try < 2; try++ {
				r := do(t, "PUT", j.base+"/epochs/2/acks/agg", map[string]any{"generation": 1, "manifest": tc.manifest})
				expectError(t, r, tc.status, tc.code, "")
				if !strings.Contains(string(r.body), tc.inMsg) {
					t.Fatalf("error does not name %q: %s", tc.inMsg, r.body)
				}
			}
			if stateHash(t, m) != before {
				t.Fatal("a rejected ack changed the state")
			}
		})
	}
	// A valid delta: drop the first segment, add one of the new blob.
	ok(t, "PUT", j.base+"/epochs/2/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []any{map[string]any{"key": log2, "size": 10}},
		"delta": map[string]any{"drop_segments": []any{map[string]any{"key": log1, "offset": 0}}, "add_segments": []any{seg(log2, 0, 10)}}}}, nil)
	j.ack(t, 2, "src", map[string][]byte{"input": []byte("o=2")})
	var mf struct {
		Manifest manifests.Manifest `json:"manifest"`
		Bytes    uint64             `json:"bytes"`
	}
	ok(t, "GET", j.base+"/epochs/2/manifests/agg", nil, &mf)
	if len(mf.Manifest.Segments) != 2 || mf.Bytes != 50 {
		t.Fatalf("manifest of epoch 2: %+v", mf)
	}
	var fsck struct {
		OK bool `json:"ok"`
	}
	ok(t, "GET", m.URL+"/v1/fsck", nil, &fsck)
	if !fsck.OK {
		t.Fatal("fsck reports a mismatch")
	}
	var b wire.Blob
	ok(t, "GET", m.URL+"/v1/blobs/"+log1, nil, &b)
	if b.State != wire.BlobLive || b.Refs != 2 || b.Size != 100 || b.Checksum != "crc32c:1234" {
		t.Fatalf("blob record: %+v", b)
	}
	// Uploads to keys without a live intent are refused.
	expectError(t, do(t, "PUT", m.URL+"/v1/objects/job-m/agg/unknown", "x"), 404, "not_found", "key")
	expectError(t, do(t, "PUT", m.URL+"/v1/objects/"+log1, "x"), 409, "conflict", "key")
	expectError(t, do(t, "GET", m.URL+"/v1/objects/..%2Fetc", nil), 400, "invalid_argument", "key")
}
