package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// putRaw PUTs body to u; chunked sends it without a Content-Length.
func putRaw(t *testing.T, u string, body string, chunked bool) response {
	t.Helper()
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // no length known to the client
	}
	req, err := http.NewRequest("PUT", u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// TestBlobUploadLimits: an upload through the metastore is bounded by
// --max-blob-bytes, not by the JSON body limit (--max-body-bytes): a blob
// above the body limit and within the blob limit is stored whole; one
// above the blob limit is 413 body_too_large and nothing is stored; an
// upload without a Content-Length is 411. Found by a mutation audit: the
// blob route using the JSON limit, and dropping the Content-Length check,
// passed every API test.
func TestBlobUploadLimits(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBlobBytes = 256 << 10
	})
	j := createJob(t, m.URL, "big", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	slot := func() wire.Upload {
		var ua uploadsAnswer
		ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": 1}, &ua)
		return ua.Uploads[0]
	}
	stored := func(key string) (int, bool) {
		rc, err := m.Store.Get(context.Background(), key, 0, -1)
		if err != nil {
			return 0, false
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return len(b), true
	}

	within := slot()
	body := strings.Repeat("s", 200<<10)
	if r := putRaw(t, within.URL, body, false); r.status != http.StatusOK {
		t.Fatalf("upload of %d bytes (body limit %d, blob limit %d): %d %s", len(body), m.Cfg.MaxBodyBytes, m.Cfg.MaxBlobBytes, r.status, r.body)
	}
	if n, ok := stored(within.Key); !ok || n != len(body) {
		t.Fatalf("stored %d bytes (%v), want %d", n, ok, len(body))
	}

	exact := slot()
	if r := putRaw(t, exact.URL, strings.Repeat("e", int(m.Cfg.MaxBlobBytes)), false); r.status != http.StatusOK {
		t.Fatalf("upload of exactly --max-blob-bytes: %d %s", r.status, r.body)
	}

	over := slot()
	r := putRaw(t, over.URL, strings.Repeat("o", 300<<10), false)
	expectError(t, r, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "")
	if _, ok := stored(over.Key); ok {
		t.Fatalf("a refused upload left an object at %s", over.Key)
	}

	unsized := slot()
	r = putRaw(t, unsized.URL, "chunked", true)
	if r.status != http.StatusLengthRequired {
		t.Fatalf("upload without a Content-Length: %d %s", r.status, r.body)
	}
	if e := apiErrorOf(t, r); e.Error.Field != "Content-Length" {
		t.Fatalf("upload without a Content-Length: %s", r.body)
	}
	if _, ok := stored(unsized.Key); ok {
		t.Fatalf("a refused upload left an object at %s", unsized.Key)
	}
}

// TestUploadAfterLeaseRefused: an upload slot takes its upload until its
// lease ends, not after: the orphan sweep may have passed over the key by
// then, and the object would never be collected. Found by a mutation
// audit: objectPut without the lease check passed every API test.
func TestUploadAfterLeaseRefused(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.UploadLease = time.Second })
	j := createJob(t, m.URL, "late", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	var ua uploadsAnswer
	ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": 1}, &ua)
	u := ua.Uploads[0]
	waitFor(t, 10*time.Second, "the slot's lease to end", func() bool { return m.Node.Now().After(u.ExpiresAt) })
	r := putRaw(t, u.URL, "too late", false)
	expectError(t, r, http.StatusConflict, wire.CodeConflict, "key")
	if _, err := m.Store.Get(context.Background(), u.Key, 0, -1); err == nil {
		t.Fatalf("the late upload was stored at %s", u.Key)
	}
}

// TestObjectReadParameters: ?offset and ?length of an object read are
// non-negative integers; anything else is 400 naming the parameter, not
// a read of something else; an offset past the end is 416, and an object
// missing from the store 404. Found by a mutation audit: a negative
// length read as "to the end", a malformed offset read as 0, and the
// store's errors answered 5xx, passed every API test.
func TestObjectReadParameters(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "rd", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	key := upload(t, j, "agg", "0123456789")
	j.begin(t, 1)
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": j.gen, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": key, "size": 10}},
		"delta": map[string]any{"add_segments": []map[string]any{{"key": key, "offset": 0, "length": 10, "first_seq": 1, "last_seq": 1}}}}}, nil)
	base := m.URL + "/v1/objects/" + key
	if r := do(t, "GET", base+"?offset=2&length=3", nil); r.status != http.StatusOK || string(r.body) != "234" {
		t.Fatalf("range read: %d %s", r.status, r.body)
	}
	for q, field := range map[string]string{
		"length=-1":        "length",
		"length=x":         "length",
		"offset=-1":        "offset",
		"offset=abc":       "offset",
		"offset=1&length=": "", // an empty length is none: read to the end
	} {
		r := do(t, "GET", base+"?"+q, nil)
		if field == "" {
			if r.status != http.StatusOK || string(r.body) != "123456789" {
				t.Errorf("?%s: %d %s", q, r.status, r.body)
			}
			continue
		}
		expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, field)
	}
	// Past the end: 416, naming the offset.
	expectError(t, do(t, "GET", base+"?offset=11", nil), http.StatusRequestedRangeNotSatisfiable, wire.CodeInvalid, "offset")
	// A live blob whose object is gone from the store: 404 on key, not a
	// server error.
	if failed, err := m.Store.Delete(context.Background(), []string{key}); err != nil || len(failed) != 0 {
		t.Fatal(failed, err)
	}
	expectError(t, do(t, "GET", base, nil), http.StatusNotFound, wire.CodeNotFound, "key")
}

// TestTruncatedUploadIs400: an upload whose body ends before its
// Content-Length (the client closed its side early) is the client's
// error: 400 on Content-Length, not retryable, nothing stored, and the
// slot still takes the whole upload after. It was 502 unavailable,
// retryable, "object store: ... unexpected EOF", blaming the store for
// bad input. Found by a mutation audit of storeError's mapping.
func TestTruncatedUploadIs400(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "short", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	var ua uploadsAnswer
	ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": 1}, &ua)
	u, err := url.Parse(ua.Uploads[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 10\r\n\r\n12345", u.RequestURI(), u.Host)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header, body: raw}
	expectError(t, r, http.StatusBadRequest, wire.CodeInvalid, "Content-Length")
	if e := apiErrorOf(t, r); e.Error.Retryable || !strings.Contains(e.Error.Message, "5 of") {
		t.Fatalf("truncated upload: %s", raw)
	}
	if _, err := m.Store.Get(context.Background(), ua.Uploads[0].Key, 0, -1); err == nil {
		t.Fatalf("the truncated upload was stored")
	}
	if r := putRaw(t, ua.Uploads[0].URL, "0123456789", false); r.status != http.StatusOK {
		t.Fatalf("the whole upload after: %d %s", r.status, r.body)
	}
}

// TestStalledUploadIs408: an upload whose body stops arriving is answered
// 408 request_timeout after --http-transfer-timeout, the client's
// problem, not 502 blamed on the object store; nothing is stored. Found
// by a mutation audit: storeError without its case for the body reader's
// own errors survived every API test.
func TestStalledUploadIs408(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) { c.TransferTimeout = 300 * time.Millisecond })
	j := createJob(t, m.URL, "stall", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}})
	var ua uploadsAnswer
	ok(t, "POST", j.base+"/uploads", map[string]any{"generation": j.gen, "task": "agg", "count": 1}, &ua)
	u, err := url.Parse(ua.Uploads[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// Half the body, then nothing (the connection stays open).
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 10\r\n\r\n12345", u.RequestURI(), u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	expectError(t, response{status: resp.StatusCode, header: resp.Header, body: raw}, http.StatusRequestTimeout, wire.CodeRequestTimeout, "")
	if _, err := m.Store.Get(context.Background(), ua.Uploads[0].Key, 0, -1); err == nil {
		t.Fatalf("the stalled upload was stored")
	}
}
