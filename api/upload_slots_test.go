package api_test

import (
	"net/http"
	"strconv"
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

// sharedSlots asks for n upload slots of job's task with ?shared=true and
// checks the answer is in the shared form: each slot holds its key and
// the end of its URL, nothing else. It returns the answer's size and its
// slots expanded.
func sharedSlots(t *testing.T, base, job, token, task string, gen uint64, n int) (int, []wire.Upload) {
	t.Helper()
	body := []byte(`{"generation":` + strconv.FormatUint(gen, 10) + `,"task":"` + task + `","count":` + strconv.Itoa(n) + `}`)
	r := doTok(t, "POST", base+"/v1/jobs/"+job+"/uploads?shared=true", token, body)
	if r.status != http.StatusOK {
		t.Fatalf("shared slots: %d %s", r.status, r.body)
	}
	var ans wire.Uploads
	r.decode(t, &ans)
	if ans.Shared == nil || len(ans.Uploads) != n {
		t.Fatalf("?shared=true answered %s", r.body)
	}
	for _, u := range ans.Uploads {
		if u.URL != "" || u.Method != "" || u.Header != nil || !u.ExpiresAt.IsZero() || u.URLSuffix == "" {
			t.Fatalf("a slot of the shared form holds more than its key and URL suffix: %+v", u)
		}
	}
	ans.Expand()
	return len(r.body), ans.Uploads
}

// TestUploadSlotsShared: ?shared=true answers what the slots share once,
// and the slots it expands to upload, with the presigned S3 URLs and with
// the signed URLs of this API's object endpoint; the shared form is
// smaller than the full one.
func TestUploadSlotsShared(t *testing.T) {
	m, store := s3Member(t)
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)

	full := ok(t, "POST", m.URL+"/v1/jobs/j/uploads", map[string]any{"generation": 1, "task": "t", "count": 100}, nil)
	size, ups := sharedSlots(t, m.URL, "j", "", "t", 1, 100)
	if size*2 > len(full.body) {
		t.Fatalf("100 slots: shared form %d bytes, full form %d", size, len(full.body))
	}
	for i, u := range ups {
		if u.Method != http.MethodPut || u.Header.Get("If-None-Match") != "*" || u.ExpiresAt.IsZero() {
			t.Fatalf("expanded slot %+v", u)
		}
		if i >= 2 {
			continue
		}
		if code := putSlot(t, u, "state", true); code != http.StatusOK {
			t.Fatalf("upload to the expanded URL of %s answered %d", u.Key, code)
		}
		if got := readObject(t, store, u.Key); got != "state" {
			t.Fatalf("%s holds %q", u.Key, got)
		}
	}
	// The suffix is what is signed for the slot: another slot's URL end
	// does not upload to this one's key.
	swapped := ups[2]
	swapped.URL = strings.Replace(ups[2].URL, keyName(ups[2].Key), keyName(ups[3].Key), 1)
	swapped.Key = ups[3].Key
	if code := putSlot(t, swapped, "state", true); code != http.StatusForbidden {
		t.Fatalf("an upload with another slot's signature answered %d", code)
	}

	r := do(t, "POST", m.URL+"/v1/jobs/j/uploads?shared=perhaps", `{"generation":1,"task":"t"}`)
	expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "shared")

	// The local store, its object URLs signed.
	am, op := startAuthSingle(t, nil)
	okTok(t, "PUT", am.URL+"/v1/jobs/ja", op, []byte("{}"), nil)
	worker, _ := createToken(t, am.URL, op, `{"role":"worker","job":"ja"}`)
	okTok(t, "POST", am.URL+"/v1/jobs/ja/attempts", worker,
		[]byte(`{"attempt_id":"a1","tasks":[{"id":"t1","capabilities":["state","incremental"]}]}`), nil)
	_, lups := sharedSlots(t, am.URL, "ja", worker, "t1", 1, 3)
	for _, u := range lups {
		if !strings.Contains(u.URL, "/v1/objects/"+u.Key+"?") {
			t.Fatalf("expanded local slot URL %s", u.URL)
		}
		if code := putSlot(t, u, "state", false); code != http.StatusOK {
			t.Fatalf("upload to the expanded URL of %s answered %d", u.Key, code)
		}
	}
}
