package api_test

import (
	"net/http"
	"testing"

	"github.com/metastore/metastore/wire"
)

// TestUploadTaskChecked: an upload request names a task by a valid id:
// one the key charset would take but the id rules refuse ("-x", "x..",
// "_x") is 400 on "task", and no slot is handed out for it. Found by a
// mutation audit: dropping IntentCreate.Validate from uploadsCreate
// survived every API test (signed slots were issued for such tasks).
func TestUploadTaskChecked(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "tk", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	for _, task := range []string{"-x", "_x", ".x", "a b"} {
		r := do(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": task, "count": 1})
		expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "task")
	}
}
