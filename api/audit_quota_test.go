package api_test

import (
	"net/http"
	"testing"

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
