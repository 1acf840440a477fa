package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestUploadIntentFlood replays issue 13's fifth finding against the
// default store: one worker asks for upload intents as fast as it can
// (1,000 a request). The default quota stops it at
// config.DefaultQuotaOpenIntents, with a 507 naming the limit, long
// before the 120,000 of the report; other jobs are not affected.
func TestUploadIntentFlood(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "flood", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	granted := 0
	var refusal response
	for granted < 120_000 {
		r := do(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": wire.MaxIntents})
		if r.status != http.StatusOK {
			refusal = r
			break
		}
		granted += wire.MaxIntents
	}
	if refusal.status != http.StatusInsufficientStorage {
		t.Fatalf("granted %d intents to one job; last answer %d %s", granted, refusal.status, refusal.body)
	}
	if granted != config.DefaultQuotaOpenIntents {
		t.Fatalf("granted %d intents, want the quota %d", granted, config.DefaultQuotaOpenIntents)
	}
	if code := errorCode(t, string(refusal.body)); code != "quota_exceeded" || !strings.Contains(string(refusal.body), "--quota-open-intents") {
		t.Fatalf("refusal does not name the limit: %s", refusal.body)
	}
	// The slots are signed (fsm/upload_slots.go): the leader counted
	// them, and none is a record in any member's state.
	u := m.FSM.JobUsage("flood")
	if scanned, _, err := m.FSM.ScanJobUsage("flood"); err != nil || u != scanned || u.Intents != 0 {
		t.Fatalf("usage %+v, scanned %+v %v", u, scanned, err)
	}
	// Another job still gets its uploads.
	other := createJob(t, m.URL, "other", []taskSpec{{ID: "agg", Caps: []string{"state"}}})
	ok(t, "POST", other.base+"/uploads", map[string]any{"generation": other.gen, "task": "agg", "count": 10}, nil)
}

// TestAckRateAndLiveBytesQuotas: acks above --quota-ack-rate are answered
// 429 rate_limited (retryable), and an ack committing blobs past
// --quota-live-bytes is answered 507 quota_exceeded, changing nothing.
func TestAckRateAndLiveBytesQuotas(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.QuotaAckRate, c.QuotaAckBurst = 0.001, 4 // four acks, then none for a long while
		c.QuotaLiveBytes = 150
	})
	j := createJob(t, m.URL, "q", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	k1 := upload(t, j, "agg", strings.Repeat("a", 100))
	k2 := upload(t, j, "agg", strings.Repeat("b", 100))
	j.begin(t, 1)
	ackWith := func(key string) map[string]any {
		return map[string]any{"generation": 1, "manifest": map[string]any{
			"blobs": []map[string]any{{"key": key, "size": 100}},
			"delta": map[string]any{"add_segments": []map[string]any{{"key": key, "offset": 0, "length": 100, "first_seq": 1, "last_seq": 1}}}}}
	}
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", ackWith(k1), nil) // ack 1: 100 live bytes
	// Its retry makes nothing new live: admitted, whatever the quota.
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", ackWith(k1), nil)
	j.begin(t, 2)
	r := do(t, "PUT", j.base+"/epochs/2/acks/agg", ackWith(k2)) // ack 3: would be 200
	if r.status != http.StatusInsufficientStorage || errorCode(t, string(r.body)) != "quota_exceeded" || !strings.Contains(string(r.body), "--quota-live-bytes") {
		t.Fatalf("ack past the live bytes quota: %d %s", r.status, r.body)
	}
	if b, _, err := m.FSM.Blob(k2); err != nil || b.State != wire.BlobIntent {
		t.Fatalf("the refused ack changed blob %s: %+v %v", k2, b, err)
	}
	ok(t, "PUT", j.base+"/epochs/2/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{"delta": map[string]any{}}}, nil) // ack 4
	j.begin(t, 3)
	r = do(t, "PUT", j.base+"/epochs/3/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{"delta": map[string]any{}}})
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "--quota-ack-rate") {
		t.Fatalf("ack above the rate: %d %s", r.status, r.body)
	}
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error.Code != "rate_limited" || !env.Error.Retryable {
		t.Fatalf("rate refusal: %s", r.body)
	}
}

// TestLiveBytesQuotaSizesDoNotWrap: declared sizes whose sum passes 2^64
// bytes never reach the live bytes quota (summed in 64 bits they once
// wrapped to a small number, here 0, and the ack was admitted): each is
// above api.MaxBlobSize, refused before the quota.
func TestLiveBytesQuotaSizesDoNotWrap(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.QuotaLiveBytes = 150 })
	j := createJob(t, m.URL, "w", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	k1 := upload(t, j, "agg", "a")
	k2 := upload(t, j, "agg", "b")
	j.begin(t, 1)
	var blobs, segs []map[string]any
	for i, k := range []string{k1, k2} {
		blobs = append(blobs, map[string]any{"key": k, "size": uint64(1) << 63})
		segs = append(segs, map[string]any{"key": k, "offset": 0, "length": 1, "first_seq": i + 1, "last_seq": i + 1})
	}
	r := do(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": blobs, "delta": map[string]any{"add_segments": segs}}})
	if r.status != http.StatusBadRequest || errorCode(t, string(r.body)) != "invalid_argument" {
		t.Fatalf("ack of 2^64 declared bytes: %d %s", r.status, r.body)
	}
}
