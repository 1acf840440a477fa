package client_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// TestUploadSlotsEitherForm: UploadSlots asks for the shared form and
// hands back the same slots whether the member answers it or, as a member
// of an earlier release that ignores ?shared does, the full form.
func TestUploadSlotsEitherForm(t *testing.T) {
	lease := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	full := wire.Uploads{LeaseUntil: lease}
	for _, k := range []string{"j/t/aaaa", "j/t/bbbb"} {
		full.Uploads = append(full.Uploads, wire.Upload{Key: k, Method: http.MethodPut,
			URL:    "http://127.0.0.1:9/b/" + k + "?X-Amz-Expires=900&X-Amz-Signature=" + k[4:] + "00",
			Header: http.Header{"If-None-Match": {"*"}}, ExpiresAt: lease})
	}
	shared, ok := full.Share()
	if !ok {
		t.Fatal("the slots do not share")
	}
	for name, answer := range map[string]wire.Uploads{"full": full, "shared": shared} {
		var asked string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked = r.URL.RawQuery
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(answer)
		}))
		c, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.UploadSlots(ctxT(t), "j", 1, "t", 2)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if asked != "shared=true" {
			t.Fatalf("%s: the client asked with query %q", name, asked)
		}
		if len(got) != 2 {
			t.Fatalf("%s: %d slots", name, len(got))
		}
		for i, s := range got {
			want := full.Uploads[i]
			if s.Key != want.Key || s.URL != want.URL || s.Method != want.Method || !s.ExpiresAt.Equal(want.ExpiresAt) ||
				s.Header.Get("If-None-Match") != "*" || s.URLSuffix != "" {
				t.Fatalf("%s: slot %d is %+v, want %+v", name, i, s, want)
			}
		}
	}
}
