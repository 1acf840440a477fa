package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// slots asks for n upload slots of job's task t at attempt gen.
func slots(t *testing.T, m *member, job string, gen uint64, n int) []wire.Upload {
	t.Helper()
	var ans wire.Uploads
	ok(t, "POST", m.URL+"/v1/jobs/"+job+"/uploads", map[string]any{"generation": gen, "task": "t", "count": n}, &ans)
	if len(ans.Uploads) != n {
		t.Fatalf("asked for %d uploads, got %+v", n, ans)
	}
	return ans.Uploads
}

func keyName(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// TestUploadSlotsSigned: with the defaults the leader hands out signed
// upload slots (fsm/upload_slots.go): no record of them exists until an
// ack commits them, the presigned URLs upload to the S3 server, an ack
// commits them, and the job and attempt are still checked when the slots
// are asked for.
func TestUploadSlotsSigned(t *testing.T) {
	m, store := s3Member(t)
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)

	before := scrape(t, m.URL)
	ups := slots(t, m, "j", 1, 3)
	after := scrape(t, m.URL)
	if d := after[`metastore_upload_slots_total{kind="signed"}`] - before[`metastore_upload_slots_total{kind="signed"}`]; d != 3 {
		t.Fatalf("signed slots counted %v, want 3", d)
	}
	if after[`metastore_upload_slots_total{kind="recorded"}`] != before[`metastore_upload_slots_total{kind="recorded"}`] {
		t.Fatal("a recorded slot was counted")
	}
	for _, u := range ups {
		if len(keyName(u.Key)) != fsm.SignedNameLen || !strings.HasPrefix(u.Key, "j/t/") {
			t.Fatalf("key %q is not a signed slot of j/t", u.Key)
		}
		if known, err := m.FSM.Known([]string{u.Key}); err != nil || known[u.Key] {
			t.Fatalf("slot %s has a record before any ack (%v)", u.Key, err)
		}
	}
	for _, u := range ups[:2] {
		if code := putSlot(t, u, "state", true); code != http.StatusOK {
			t.Fatalf("upload to %s answered %d", u.Key, code)
		}
	}
	body := `{"generation":1,"manifest":{"blobs":[{"key":"` + ups[0].Key + `","size":5},{"key":"` + ups[1].Key + `","size":5}],` +
		`"delta":{"add_segments":[{"key":"` + ups[0].Key + `","offset":0,"length":5,"first_seq":1,"last_seq":1},` +
		`{"key":"` + ups[1].Key + `","offset":0,"length":5,"first_seq":2,"last_seq":2}]}}}`
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", body, nil)
	for _, u := range ups[:2] {
		b, _, err := m.FSM.Blob(u.Key)
		if err != nil || b.State != wire.BlobLive {
			t.Fatalf("%s after its ack: %+v %v", u.Key, b, err)
		}
		if got := readObject(t, store, u.Key); got != "state" {
			t.Fatalf("%s holds %q", u.Key, got)
		}
	}

	// The job and the attempt are checked when the slots are asked for.
	r := do(t, "POST", m.URL+"/v1/jobs/nojob/uploads", `{"generation":1,"task":"t"}`)
	if e := apiErrorOf(t, r); r.status != http.StatusNotFound || e.Error.Code != wire.CodeNotFound {
		t.Fatalf("slots of a job that does not exist: %d %s", r.status, r.body)
	}
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a2","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	r = do(t, "POST", m.URL+"/v1/jobs/j/uploads", `{"generation":1,"task":"t"}`)
	if e := apiErrorOf(t, r); r.status != http.StatusConflict || e.Error.Code != wire.CodeFenced {
		t.Fatalf("slots of a superseded attempt: %d %s", r.status, r.body)
	}
	// A slot of the superseded attempt is fenced at the ack.
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":2,"epoch":2}`, nil)
	r = do(t, "PUT", m.URL+"/v1/jobs/j/epochs/2/acks/t", `{"generation":2,"manifest":`+ackBlob(ups[2].Key, 5, 5, 3)+`}`)
	if e := apiErrorOf(t, r); r.status != http.StatusConflict || e.Error.Code != wire.CodeFenced {
		t.Fatalf("ack of generation 2 committing a signed slot of generation 1: %d %s", r.status, r.body)
	}
}

// TestUploadSlotsQuota: --quota-open-intents counts the signed slots the
// leader handed out until an ack commits them (a retried ack closes none
// twice).
func TestUploadSlotsQuota(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.QuotaOpenIntents = 4 })
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)
	ups := slots(t, m, "j", 1, 3)
	if len(keyName(ups[0].Key)) != fsm.SignedNameLen {
		t.Fatalf("key %q is not a signed slot", ups[0].Key)
	}
	refused := func(n int) {
		t.Helper()
		r := do(t, "POST", m.URL+"/v1/jobs/j/uploads", map[string]any{"generation": 1, "task": "t", "count": n})
		if e := apiErrorOf(t, r); r.status != http.StatusInsufficientStorage || e.Error.Code != wire.CodeQuotaExceeded {
			t.Fatalf("%d slots past the quota: %d %s", n, r.status, r.body)
		}
	}
	refused(2)
	body := `{"generation":1,"manifest":{"blobs":[{"key":"` + ups[0].Key + `","size":5},{"key":"` + ups[1].Key + `","size":5}],` +
		`"delta":{"add_segments":[{"key":"` + ups[0].Key + `","offset":0,"length":5,"first_seq":1,"last_seq":1},` +
		`{"key":"` + ups[1].Key + `","offset":0,"length":5,"first_seq":2,"last_seq":2}]}}}`
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", body, nil)
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", body, nil) // retried
	slots(t, m, "j", 1, 3)
	refused(1)
}

// TestUploadSlotsRecordedWithoutSweep: with the orphan sweep off, nothing
// would delete the upload of a signed slot no ack commits, so the slots
// are recorded (an upload batch through Raft).
func TestUploadSlotsRecordedWithoutSweep(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.GCOrphanEvery = 0 })
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state"]}]}`, nil)
	ups := slots(t, m, "j", 1, 3)
	for _, u := range ups {
		b, _, err := m.FSM.Blob(u.Key)
		if err != nil || b.State != wire.BlobIntent || len(keyName(u.Key)) == fsm.SignedNameLen {
			t.Fatalf("slot %s without the sweep: %+v %v, want a recorded intent", u.Key, b, err)
		}
	}
	if got := scrape(t, m.URL)[`metastore_upload_slots_total{kind="recorded"}`]; got != 3 {
		t.Fatalf("recorded slots counted %v, want 3", got)
	}
}

func apiErrorOf(t *testing.T, r response) apiError {
	t.Helper()
	var e apiError
	r.decode(t, &e)
	return e
}
