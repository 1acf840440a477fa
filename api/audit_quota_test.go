package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// TestRefusedAckKeepsSlotsOpen: the leader's tally of open signed upload
// slots (--quota-open-intents) closes a slot when an ack commits it, not
// when an ack that names it is refused: otherwise a worker lifts its
// job's quota at will by sending acks the state machine refuses (here,
// of an epoch never begun) that list its open slots, and gets as many
// slots as it asks for. Found by a mutation audit of quota.go.
func TestRefusedAckKeepsSlotsOpen(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.QuotaOpenIntents = 4 })
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)
	ups := slots(t, m, "j", 1, 3)
	refused := func(n int) {
		t.Helper()
		r := do(t, "POST", m.URL+"/v1/jobs/j/uploads", map[string]any{"generation": 1, "task": "t", "count": n})
		if e := apiErrorOf(t, r); r.status != http.StatusInsufficientStorage || e.Error.Code != wire.CodeQuotaExceeded {
			t.Fatalf("%d slots past the quota: %d %s", n, r.status, r.body)
		}
	}
	refused(2)
	var blobs, segs []map[string]any
	for i, u := range ups {
		blobs = append(blobs, map[string]any{"key": u.Key, "size": 5})
		segs = append(segs, map[string]any{"key": u.Key, "offset": 0, "length": 5, "first_seq": i + 1, "last_seq": i + 1})
	}
	ack := map[string]any{"generation": 1, "manifest": map[string]any{"blobs": blobs, "delta": map[string]any{"add_segments": segs}}}
	for range 3 {
		r := do(t, "PUT", m.URL+"/v1/jobs/j/epochs/7/acks/t", ack)
		if r.status != http.StatusNotFound {
			t.Fatalf("ack of an epoch never begun: %d %s", r.status, r.body)
		}
		refused(2)
	}
	// Committed, they close.
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", ack, nil)
	slots(t, m, "j", 1, 4)
	refused(1)
}

// TestLiveBytesAtTheQuotaRefusesUploads: a job whose live blobs hold
// exactly --quota-live-bytes gets no new upload slots (507 naming the
// limit): nothing more could be committed. Found by a mutation audit:
// the check off by one (refusing only above the limit) survived every
// API test.
func TestLiveBytesAtTheQuotaRefusesUploads(t *testing.T) {
	// The open-intents quota is off: the live bytes quota holds alone.
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.QuotaLiveBytes, c.QuotaOpenIntents = 100, 0 })
	j := createJob(t, m.URL, "full", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	k := upload(t, j, "agg", strings.Repeat("f", 100))
	j.begin(t, 1)
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": k, "size": 100}},
		"delta": map[string]any{"add_segments": []map[string]any{{"key": k, "offset": 0, "length": 100, "first_seq": 1, "last_seq": 1}}}}}, nil)
	waitFor(t, 5*time.Second, "100 live bytes", func() bool { return m.FSM.JobUsage("full").LiveBytes == 100 })
	r := do(t, "POST", j.base+"/uploads", map[string]any{"generation": 1, "task": "agg", "count": 1})
	if e := apiErrorOf(t, r); r.status != http.StatusInsufficientStorage || e.Error.Code != wire.CodeQuotaExceeded || !strings.Contains(e.Error.Message, "--quota-live-bytes") {
		t.Fatalf("uploads with the live bytes at the quota: %d %s", r.status, r.body)
	}
}

// TestExpiredSlotsLeaveTheQuota: signed upload slots count against
// --quota-open-intents until their lease ends, then no more. Found by a
// mutation audit: grants kept past their lease survived every API test.
func TestExpiredSlotsLeaveTheQuota(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.QuotaOpenIntents = 4
		c.UploadLease = time.Second
	})
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ups := slots(t, m, "j", 1, 4)
	r := do(t, "POST", m.URL+"/v1/jobs/j/uploads", map[string]any{"generation": 1, "task": "t", "count": 1})
	if r.status != http.StatusInsufficientStorage {
		t.Fatalf("a slot past the quota: %d %s", r.status, r.body)
	}
	waitFor(t, 10*time.Second, "the slots' lease to end", func() bool { return m.Node.Now().After(ups[0].ExpiresAt) })
	slots(t, m, "j", 1, 4)
}

// TestRecordedIntentsCountAtOnce: with the orphan sweep off, upload
// slots are recorded intents, and a request's intents count against
// --quota-open-intents from the moment they are granted, before the
// leader reads the job's usage again (it reuses a read for a second).
// Found by a mutation audit: not tallying them survived every API test.
// (The mutant is caught when the two requests fall within that second.)
func TestRecordedIntentsCountAtOnce(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.QuotaOpenIntents = 4
		c.GCOrphanEvery = 0
	})
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	// A first request reads the usage (no intents) and caches it.
	slots(t, m, "j", 1, 1)
	slots(t, m, "j", 1, 3)
	r := do(t, "POST", m.URL+"/v1/jobs/j/uploads", map[string]any{"generation": 1, "task": "t", "count": 1})
	if e := apiErrorOf(t, r); r.status != http.StatusInsufficientStorage || e.Error.Code != wire.CodeQuotaExceeded {
		t.Fatalf("a fifth recorded intent with a quota of 4: %d %s", r.status, r.body)
	}
	if u, _, err := m.FSM.ScanJobUsage("j"); err != nil || u.Intents != 4 {
		t.Fatalf("recorded intents: %+v %v", u, err)
	}
}

// TestCommittedIntentsLeaveTheQuota: recorded intents that an ack
// commits leave --quota-open-intents once the leader reads the job's
// usage again (at most a second later). Found by a mutation audit:
// reusing the first read for ever survived every API test.
func TestCommittedIntentsLeaveTheQuota(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.QuotaOpenIntents = 4
		c.GCOrphanEvery = 0
	})
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)
	ups := slots(t, m, "j", 1, 4)
	var blobs, segs []map[string]any
	for i, u := range ups {
		blobs = append(blobs, map[string]any{"key": u.Key, "size": 5})
		segs = append(segs, map[string]any{"key": u.Key, "offset": 0, "length": 5, "first_seq": i + 1, "last_seq": i + 1})
	}
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", map[string]any{"generation": 1, "manifest": map[string]any{"blobs": blobs, "delta": map[string]any{"add_segments": segs}}}, nil)
	committed := time.Now()
	if u, _, err := m.FSM.ScanJobUsage("j"); err != nil || u.Intents != 0 {
		t.Fatalf("intents after the ack: %+v %v", u, err)
	}
	waitFor(t, 10*time.Second, "the leader's read of the usage to age", func() bool { return time.Since(committed) > 1100*time.Millisecond })
	slots(t, m, "j", 1, 4)
}

// TestLiveBytesTalliedOnThePrecisePath: an ack admitted after the
// precise check of --quota-live-bytes (the cached usage was too high for
// the quick one, here because a refused ack was counted in it) adds its
// bytes to the usage at once, so the next ack is judged with them. Found
// by a mutation audit: not adding them survived every API test. (The
// mutant is caught when the acks fall within the second the leader
// reuses a read of the usage.)
func TestLiveBytesTalliedOnThePrecisePath(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.QuotaLiveBytes = 150 })
	j := createJob(t, m.URL, "p", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	keys := []string{upload(t, j, "agg", strings.Repeat("a", 100))}
	for _, c := range "bcd" {
		keys = append(keys, upload(t, j, "agg", strings.Repeat(string(c), 40)))
	}
	ack := func(epoch string, key string, size, seq int) response {
		return do(t, "PUT", j.base+"/epochs/"+epoch+"/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
			"blobs": []map[string]any{{"key": key, "size": size}},
			"delta": map[string]any{"add_segments": []map[string]any{{"key": key, "offset": 0, "length": size, "first_seq": seq, "last_seq": seq}}}}})
	}
	for _, e := range []uint64{1, 2, 3} {
		j.begin(t, e)
	}
	if r := ack("1", keys[0], 100, 1); r.status != http.StatusOK {
		t.Fatalf("ack of 100 bytes: %d %s", r.status, r.body)
	}
	if r := ack("9", keys[1], 40, 2); r.status != http.StatusNotFound {
		t.Fatalf("ack of an epoch never begun: %d %s", r.status, r.body)
	}
	if r := ack("2", keys[2], 40, 2); r.status != http.StatusOK {
		t.Fatalf("ack to 140 bytes: %d %s", r.status, r.body)
	}
	r := ack("3", keys[3], 40, 3)
	if e := apiErrorOf(t, r); r.status != http.StatusInsufficientStorage || e.Error.Code != wire.CodeQuotaExceeded {
		t.Fatalf("ack to 180 bytes with a quota of 150: %d %s", r.status, r.body)
	}
}

// TestAckRateIsPerJob: --quota-ack-rate bounds each job's acks on its
// own: a job over its rate does not hold back another's. Found by a
// mutation audit: one limiter shared by every job survived every API
// test (which used one job).
func TestAckRateIsPerJob(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.QuotaAckRate, c.QuotaAckBurst = 0.001, 2 // two acks, then none for a long while
	})
	ackOf := func(j *job, epoch string) response {
		return do(t, "PUT", j.base+"/epochs/"+epoch+"/acks/src", map[string]any{"generation": j.gen, "payloads": map[string][]byte{"input": []byte("o")}})
	}
	a := createJob(t, m.URL, "ja", []taskSpec{{ID: "src", Caps: []string{"input"}}})
	b := createJob(t, m.URL, "jb", []taskSpec{{ID: "src", Caps: []string{"input"}}})
	for _, e := range []uint64{1, 2, 3} {
		a.begin(t, e)
	}
	b.begin(t, 1)
	for _, e := range []string{"1", "2"} {
		if r := ackOf(a, e); r.status != http.StatusOK {
			t.Fatalf("job ja's ack %s: %d %s", e, r.status, r.body)
		}
	}
	if r := ackOf(a, "3"); r.status != http.StatusTooManyRequests {
		t.Fatalf("job ja's third ack: %d %s", r.status, r.body)
	}
	if r := ackOf(b, "1"); r.status != http.StatusOK {
		t.Fatalf("job jb's first ack after ja went over its rate: %d %s", r.status, r.body)
	}
}
