package api_test

import (
	"net/http"
	"testing"
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
