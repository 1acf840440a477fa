package api_test

import (
	"net/http"
	"testing"

	"github.com/metastore/metastore/wire"
)

// TestBlankBodyIsEmpty: a body of blanks is an empty body: a route that
// takes none (PUT /v1/jobs/{job}) applies its default, as with no body
// at all. Found by a mutation audit: counting blanks as a body survived
// every API test.
func TestBlankBodyIsEmpty(t *testing.T) {
	m := startSingle(t)
	for i, body := range []string{"", " ", "\r\n\t \n"} {
		if r := do(t, "PUT", m.URL+"/v1/jobs/blank"+string(rune('a'+i)), body); r.status != http.StatusOK {
			t.Fatalf("PUT a job with the body %q: %d %s", body, r.status, r.body)
		}
	}
}

// TestBaseWithoutJobRefused: an ack's manifest.base names its job; one
// without is 400 on manifest.base.job, and nothing is applied (not an
// ack without a base). Found by a mutation audit: dropping a base
// without a job on its way to the command survived every API test.
func TestBaseWithoutJobRefused(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "nb", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	j.begin(t, 1)
	r := do(t, "PUT", j.base+"/epochs/1/acks/agg", `{"generation":1,"manifest":{"base":{"task":"agg","epoch":1},"delta":{}}}`)
	expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "manifest.base.job")
	var e wire.Epoch
	ok(t, "GET", j.base+"/epochs/1", nil, &e)
	if e.Acked != 0 {
		t.Fatalf("the refused ack was applied: %+v", e)
	}
}
