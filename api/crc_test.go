package api_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestCRC32COverHTTP: a malformed crc32c is a 400 naming its field and
// changes nothing; a well-formed one comes back in the restore plan.
func TestCRC32COverHTTP(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-c", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	body := strings.Repeat("c", 100)
	key := upload(t, j, "agg", body)
	j.begin(t, 1)
	ack := func(crc string) map[string]any {
		return map[string]any{"generation": 1, "manifest": map[string]any{
			"blobs": []map[string]any{{"key": key, "size": 100}},
			"delta": map[string]any{
				"materialize":  map[string]any{"bases": []map[string]any{{"key": key, "offset": 0, "length": 50, "crc32c": manifests.CRC32C([]byte(body[:50]))}}},
				"add_segments": []map[string]any{{"key": key, "offset": 50, "length": 50, "first_seq": 1, "last_seq": 2, "crc32c": crc}}}}}
	}
	before := stateHash(t, m)
	for _, bad := range []string{"DEADBEEF", "1234567", "123456789", "crc32c:1", "0x123456"} {
		r := do(t, "PUT", j.base+"/epochs/1/acks/agg", ack(bad))
		expectError(t, r, 400, "invalid_argument", "manifest.delta.add_segments.crc32c")
		if !strings.Contains(string(r.body), key+"@50") {
			t.Fatalf("error does not name the segment: %s", r.body)
		}
	}
	if after := stateHash(t, m); after != before {
		t.Fatal("a refused ack changed the state")
	}
	want := manifests.CRC32C([]byte(body[50:]))
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", ack(want), nil)

	var plan wire.RestorePlan
	r := ok(t, "GET", j.base+"/tasks/agg/restore", nil, &plan)
	st := plan.Kinds[wire.KindState]
	if st.Manifest == nil || len(st.Manifest.Segments) != 1 || st.Manifest.Segments[0].CRC32C != want ||
		len(st.Manifest.Bases) != 1 || st.Manifest.Bases[0].CRC32C != manifests.CRC32C([]byte(body[:50])) {
		t.Fatalf("restore plan without the declared crc32c: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"crc32c":"`+want+`"`) {
		t.Fatalf("restore plan JSON lacks crc32c %s: %s", want, r.body)
	}
}
