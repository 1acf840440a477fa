package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// signature is a SigV4 signature's shape: 64 hex digits, a different
// one for each i.
func signature(i int) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(i)))
	return hex.EncodeToString(sum[:])
}

// s3Slots is an answer of n presigned S3 upload slots.
func s3Slots(n int) Uploads {
	at := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	u := Uploads{LeaseUntil: at}
	for i := range n {
		key := "j/t/18edcd52" + strconv.Itoa(1000+i)
		u.Uploads = append(u.Uploads, Upload{Key: key, Method: http.MethodPut,
			URL: "http://127.0.0.1:9000/b/" + key + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261204%2Fus-east-1%2Fs3%2Faws4_request" +
				"&X-Amz-Date=20261204T050000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host%3Bif-none-match&x-id=PutObject&X-Amz-Signature=" + signature(i),
			Header: http.Header{"If-None-Match": {"*"}}, ExpiresAt: at})
	}
	return u
}

// TestUploadsShareExpand: an answer shared and expanded again is the
// answer it was, for presigned S3 URLs, the API's signed object URLs and
// its unsigned ones.
func TestUploadsShareExpand(t *testing.T) {
	local := func(query bool) Uploads {
		u := s3Slots(3)
		for i := range u.Uploads {
			s := &u.Uploads[i]
			s.Header = nil
			s.URL = "http://10.0.0.1:7070/v1/objects/" + s.Key
			if query {
				s.URL += "?expires=1764824400&sig=" + strconv.Itoa(31*(i+1))
			}
		}
		return u
	}
	for name, u := range map[string]Uploads{"s3": s3Slots(300), "one": s3Slots(1), "local-signed": local(true), "local": local(false)} {
		sh, ok := u.Share()
		if !ok {
			t.Fatalf("%s: not shared", name)
		}
		for _, s := range sh.Uploads {
			if s.URL != "" || s.Method != "" || s.Header != nil || !s.ExpiresAt.IsZero() {
				t.Fatalf("%s: a shared slot holds %+v", name, s)
			}
		}
		full, _ := u.AppendJSON(nil)
		small, _ := sh.AppendJSON(nil)
		if name == "s3" && len(small)*4 > len(full) {
			t.Fatalf("300 S3 slots: shared %d bytes, full %d", len(small), len(full))
		}
		sh.Expand()
		if !reflect.DeepEqual(sh, u) {
			t.Fatalf("%s: expanded\n%+v\nwant\n%+v", name, sh, u)
		}
	}

	// Each expanded slot has a header of its own.
	sh, _ := s3Slots(2).Share()
	sh.Expand()
	sh.Uploads[0].Header.Set("X-Other", "1")
	if sh.Uploads[1].Header.Get("X-Other") != "" {
		t.Fatal("expanded slots share one header map")
	}
	// A full answer is left as it is.
	u := s3Slots(2)
	u.Expand()
	if !reflect.DeepEqual(u, s3Slots(2)) {
		t.Fatal("Expand changed a full answer")
	}
}

// TestUploadsShareRefused: slots that differ in more than their keys and
// URL ends are answered in full.
func TestUploadsShareRefused(t *testing.T) {
	cases := map[string]func(*Uploads){
		"no slots":     func(u *Uploads) { u.Uploads = nil },
		"method":       func(u *Uploads) { u.Uploads[1].Method = http.MethodPost },
		"header value": func(u *Uploads) { u.Uploads[1].Header = http.Header{"If-None-Match": {"x"}} },
		"header name":  func(u *Uploads) { u.Uploads[1].Header = http.Header{"If-Match": {"*"}} },
		"no header":    func(u *Uploads) { u.Uploads[1].Header = nil },
		"more headers": func(u *Uploads) { u.Uploads[1].Header = http.Header{"If-None-Match": {"*"}, "X-Other": {"1"}} },
		"lease":        func(u *Uploads) { u.Uploads[1].ExpiresAt = u.Uploads[1].ExpiresAt.Add(time.Second) },
		"host": func(u *Uploads) {
			u.Uploads[1].URL = "http://127.0.0.2:9000/b/" + u.Uploads[1].URL[len("http://127.0.0.1:9000/b/"):]
		},
		"escaped key": func(u *Uploads) {
			u.Uploads[1].URL = "http://127.0.0.1:9000/b/j%2Ft" + u.Uploads[1].URL[len("http://127.0.0.1:9000/b/j/t"):]
		},
		"key not in the URL": func(u *Uploads) { u.Uploads[0].Key = "j/t/other" },
		"empty key":          func(u *Uploads) { u.Uploads[0].Key = "" },
		"already shared":     func(u *Uploads) { *u, _ = u.Share() },
	}
	for name, change := range cases {
		u := s3Slots(3)
		change(&u)
		before := u
		if got, ok := u.Share(); ok || !reflect.DeepEqual(got, before) {
			t.Fatalf("%s: shared (%v) or changed: %+v", name, ok, got)
		}
	}
}
