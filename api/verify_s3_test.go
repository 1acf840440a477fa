package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/gc"
)

// TestVerifyNamesMismatches is issue 16's case against S3: a blob acked as
// 99 bytes whose object holds 10 is reported by verify with the mismatch
// named, and so is an object rewritten behind the store's back at the same
// size (its ETag).
func TestVerifyNamesMismatches(t *testing.T) {
	m, store := s3Member(t)
	ok(t, "PUT", m.URL+"/v1/jobs/j", `{}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/attempts", `{"attempt_id":"a1","tasks":[{"id":"t","capabilities":["state","incremental"]}]}`, nil)
	ok(t, "POST", m.URL+"/v1/jobs/j/epochs", `{"generation":1,"epoch":1}`, nil)

	short := slot(t, m, "j", 1)
	if code := putSlot(t, short, "0123456789", true); code != http.StatusOK {
		t.Fatalf("upload answered %d", code)
	}
	same := slot(t, m, "j", 1)
	state := "state of the same size"
	if code := putSlot(t, same, state, true); code != http.StatusOK {
		t.Fatalf("upload answered %d", code)
	}
	ack := `{"generation":1,"manifest":{"blobs":[{"key":"` + short.Key + `","size":99},{"key":"` + same.Key + `","size":22}],` +
		`"delta":{"add_segments":[{"key":"` + short.Key + `","offset":0,"length":99,"first_seq":1,"last_seq":1},` +
		`{"key":"` + same.Key + `","offset":0,"length":22,"first_seq":2,"last_seq":2}]}}}`
	ok(t, "PUT", m.URL+"/v1/jobs/j/epochs/1/acks/t", ack, nil)
	waitFor(t, 10*time.Second, "observation of both blobs", func() bool {
		a, _, err1 := m.FSM.Blob(short.Key)
		b, _, err2 := m.FSM.Blob(same.Key)
		return err1 == nil && err2 == nil && a.Observed != nil && b.Observed != nil
	})
	b, _, _ := m.FSM.Blob(same.Key)
	forged := strings.Repeat("X", len(state))
	if err := store.Put(context.Background(), same.Key, strings.NewReader(forged), int64(len(forged))); err != nil {
		t.Fatal(err)
	}
	info, err := store.Head(context.Background(), same.Key)
	if err != nil {
		t.Fatal(err)
	}

	var rep gc.VerifyReport
	ok(t, "GET", m.URL+"/v1/jobs/j/verify", nil, &rep)
	if rep.OK() || len(rep.Changed) != 2 || len(rep.Missing) != 0 {
		t.Fatalf("verify: %+v", rep)
	}
	want := map[string][]string{
		short.Key: {"size observed after the ack 10 bytes, ack declared 99"},
		same.Key:  {`ETag now "` + info.ETag + `", observed after the ack "` + b.Observed.ETag + `"`},
	}
	for _, c := range rep.Changed {
		if strings.Join(c.Mismatches, "|") != strings.Join(want[c.Key], "|") {
			t.Errorf("%s: mismatches %q, want %q", c.Key, c.Mismatches, want[c.Key])
		}
	}
}
