package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestEpochBeyondInt64Refused: epochs above 2^63-1 (the int64 of the
// OpenAPI document) are refused with 400 naming the field, in the body and
// in the path, and the job goes on beginning epochs. Before, 2^63 and
// 2^64-1 were accepted and every later begin answered 409
// epoch_not_increasing.
func TestEpochBeyondInt64Refused(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "big", []taskSpec{{ID: "src", Caps: []string{"input"}}})
	for body, code := range map[string]string{
		`{"generation": 1, "epoch": 9223372036854775808}`:  "invalid_argument",
		`{"generation": 1, "epoch": 18446744073709551615}`: "invalid_argument",
		`{"generation": 1, "epoch": 18446744073709551616}`: "invalid_json",
	} {
		r := do(t, "POST", j.base+"/epochs", body)
		expectError(t, r, http.StatusBadRequest, code, "epoch")
		if strings.Contains(string(r.body), "uint64") {
			t.Errorf("%s: the message names a Go type: %s", body, r.body)
		}
	}
	expectError(t, do(t, "GET", j.base+"/epochs/9223372036854775808", nil), http.StatusBadRequest, "invalid_argument", "epoch")
	expectError(t, do(t, "GET", m.URL+"/v1/jobs/big/tasks/src/restore?epoch=9223372036854775808", nil), http.StatusBadRequest, "invalid_argument", "epoch")
	j.begin(t, 1)
	j.begin(t, 9223372036854775807)
}
