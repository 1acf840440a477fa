package blobstore_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
)

// deleteFaults is an HTTP transport between a store and the S3 server
// process. It records the keys of every DeleteObjects request; it answers
// a request that carries one of failKeys with a 500 InternalError itself
// (nothing is forwarded, so none of that batch's keys is deleted); and it
// adds a per-key <Error> to the server's answer for each key of keyErrors,
// which the server (gofakes3) never reports itself. Every other request
// goes to the server unchanged.
type deleteFaults struct {
	next      http.RoundTripper
	failKeys  []string          // full object keys
	keyErrors map[string]string // full object key -> S3 error code
	// answered, if set, is called after each DeleteObjects answer the
	// server gave, before the store sees it.
	answered func()

	mu      sync.Mutex
	batches [][]string // the full keys of each DeleteObjects request, in order
	loud    int        // requests not in quiet mode
}

func (d *deleteFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !req.URL.Query().Has("delete") {
		return d.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	var asked struct {
		Quiet   bool `xml:"Quiet"`
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if err := xml.Unmarshal(body, &asked); err != nil {
		return nil, fmt.Errorf("deleteFaults: DeleteObjects body: %w", err)
	}
	keys := make([]string, len(asked.Objects))
	for i, o := range asked.Objects {
		keys[i] = o.Key
	}
	d.mu.Lock()
	d.batches = append(d.batches, keys)
	if !asked.Quiet {
		d.loud++
	}
	d.mu.Unlock()
	if slices.ContainsFunc(keys, func(k string) bool { return slices.Contains(d.failKeys, k) }) {
		msg := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected</Message></Error>`
		return &http.Response{
			Status: "500 Internal Server Error", StatusCode: http.StatusInternalServerError, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/xml"}, "X-Amz-Request-Id": {"injected"}},
			Body:          io.NopCloser(strings.NewReader(msg)),
			ContentLength: int64(len(msg)),
			Request:       req,
		}, nil
	}
	fwd := req.Clone(req.Context())
	fwd.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := d.next.RoundTrip(fwd)
	if err == nil && d.answered != nil {
		// The answer is read in full first: answered may cancel the
		// request's context, which would cut its body short.
		answer, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if rerr != nil {
			return nil, rerr
		}
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		d.answered()
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	var extra strings.Builder
	for _, k := range keys {
		if code, ok := d.keyErrors[k]; ok {
			fmt.Fprintf(&extra, "<Error><Key>%s</Key><Code>%s</Code><Message>injected for %s</Message></Error>", k, code, k)
		}
	}
	if extra.Len() == 0 {
		return resp, nil
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndex(answer, []byte("</DeleteResult>"))
	if end < 0 {
		return nil, fmt.Errorf("deleteFaults: unexpected DeleteObjects answer %q", answer)
	}
	answer = slices.Concat(answer[:end], []byte(extra.String()), answer[end:])
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	resp.ContentLength = int64(len(answer))
	resp.Header.Set("Content-Length", strconv.Itoa(len(answer)))
	return resp, nil
}

// sent returns the keys of each DeleteObjects request so far, and how many
// of the requests were not in quiet mode.
func (d *deleteFaults) sent() ([][]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.batches), d.loud
}

// faultyStore is a store on the S3 server process whose requests go
// through faults, with retries off (MaxAttempts 1): an injected 500 fails
// its batch at once.
func faultyStore(t *testing.T, endpoint, prefix string, faults *deleteFaults, obs blobstore.Observer) *blobstore.S3 {
	t.Helper()
	faults.next = http.DefaultTransport
	cfg := blobtest.Config(endpoint, testBucket, prefix)
	cfg.MaxAttempts = 1
	cfg.Observer = obs
	cfg.HTTPClient = &http.Client{Transport: faults}
	s, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestS3DeleteBatches: a Delete of 2,100 keys is sent as DeleteObjects
// requests in quiet mode of 1,000, 1,000 and 100 keys, the keys asked for
// and no other.
// When the second request fails (the server answers 500), the first and
// third still delete their keys, the Delete as a whole succeeds, and failed
// holds exactly the 1,000 keys of the failed request, each with its error;
// their objects are still there. The observer is told of the 1,100 keys
// deleted.
func TestS3DeleteBatches(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "") // the SDK cannot add one to a plain *http.Client
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	faults := &deleteFaults{failKeys: []string{"batches/k-1500"}}
	var (
		mu      sync.Mutex
		deleted []int
	)
	s := faultyStore(t, endpoint, "batches", faults, func(op string, n int, err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if op == blobstore.OpDelete {
			deleted = append(deleted, n)
		}
	})
	keys := make([]string, 2100)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%04d", i)
	}
	present := []string{"k-0000", "k-0999", "k-1000", "k-1500", "k-1999", "k-2000", "k-2099"}
	for _, k := range present {
		put(t, s, k, k)
	}
	put(t, s, "keep", "not asked for")

	failed, err := s.Delete(ctx, keys)
	if err != nil {
		t.Fatalf("Delete with one failed batch of three: %v, want nil (failed holds its keys)", err)
	}
	batches, loud := faults.sent()
	if loud != 0 {
		t.Errorf("%d DeleteObjects requests not in quiet mode (their answers list every key deleted)", loud)
	}
	var sizes []int
	var sent []string
	for _, b := range batches {
		sizes = append(sizes, len(b))
		sent = append(sent, b...)
	}
	if !slices.Equal(sizes, []int{1000, 1000, 100}) {
		t.Fatalf("DeleteObjects requests of %v keys, want [1000 1000 100]", sizes)
	}
	want := make([]string, len(keys))
	for i, k := range keys {
		want[i] = "batches/" + k
	}
	if !slices.Equal(sent, want) {
		t.Fatalf("the requests asked for other keys than given (%d keys)", len(sent))
	}
	if len(failed) != 1000 {
		t.Fatalf("failed holds %d keys, want the 1,000 of the failed request", len(failed))
	}
	for _, k := range keys[1000:2000] {
		if err := failed[k]; err == nil || !strings.Contains(err.Error(), "InternalError") {
			t.Fatalf("failed[%q] = %v, want the batch's InternalError", k, err)
		}
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"k-1000", "k-1500", "k-1999", "keep"}) {
		t.Fatalf("objects after the Delete: %q, want the failed batch's and the one not asked for", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(deleted, []int{1100}) {
		t.Fatalf("delete observed with counts %v, want [1100]", deleted)
	}
}

// TestS3DeleteReportsPerKeyErrors: keys that S3 reports failed inside a
// successful DeleteObjects answer come back in failed, under the key Delete
// was given (the store's prefix cut off), with S3's code; a key S3 reports
// as NoSuchKey counts as deleted.
func TestS3DeleteReportsPerKeyErrors(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "")
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx := context.Background()
	faults := &deleteFaults{keyErrors: map[string]string{
		"perkey/j/b": "AccessDenied",
		"perkey/j/c": "NoSuchKey",
	}}
	s := faultyStore(t, endpoint, "perkey", faults, nil)
	for _, k := range []string{"j/a", "j/b", "j/c"} {
		put(t, s, k, k)
	}
	failed, err := s.Delete(ctx, []string{"j/a", "j/b", "j/c", "j/d"})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if len(failed) != 1 || failed["j/b"] == nil {
		t.Fatalf("failed = %v, want only j/b", failed)
	}
	var oe *blobstore.ObjectError
	if !errors.As(failed["j/b"], &oe) || oe.Code != "AccessDenied" {
		t.Fatalf("failed[j/b] = %#v, want an ObjectError with code AccessDenied", failed["j/b"])
	}
}

// TestS3DeleteStopsWhenCallerGivesUp: once the caller's context is done,
// Delete sends no further DeleteObjects request; the keys of the batches it
// did not send are failed with the context's error, and the Delete, one of
// whose batches got through, succeeds.
func TestS3DeleteStopsWhenCallerGivesUp(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "")
	endpoint := blobtest.StartS3Server(t, testBucket)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	faults := &deleteFaults{answered: cancel}
	s := faultyStore(t, endpoint, "giveup", faults, nil)
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%04d", i)
	}
	put(t, s, "k-0000", "first batch")
	put(t, s, "k-2400", "last batch")
	failed, err := s.Delete(ctx, keys)
	if err != nil {
		t.Fatalf("Delete: %v, want nil: its first batch got through", err)
	}
	if batches, _ := faults.sent(); len(batches) != 1 {
		t.Fatalf("%d DeleteObjects requests, want 1: the caller gave up after the first", len(batches))
	}
	if len(failed) != 1500 {
		t.Fatalf("failed holds %d keys, want the 1,500 not sent", len(failed))
	}
	for _, k := range keys[1000:] {
		if !errors.Is(failed[k], context.Canceled) {
			t.Fatalf("failed[%q] = %v, want context.Canceled", k, failed[k])
		}
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"k-2400"}) {
		t.Fatalf("objects after the Delete: %q, want k-2400 only", got)
	}
}

// TestS3DeleteAllBatchesFail: when every DeleteObjects request fails, the
// Delete fails as a whole with the first request's error (it names the
// first batch) and no failed map; nothing is deleted.
func TestS3DeleteAllBatchesFail(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "")
	endpoint := blobtest.StartS3Server(t, testBucket)
	faults := &deleteFaults{failKeys: []string{"allfail/k-0000", "allfail/k-1000"}}
	s := faultyStore(t, endpoint, "allfail", faults, nil)
	keys := make([]string, 1500)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%04d", i)
	}
	put(t, s, "k-0000", "x")
	put(t, s, "k-1499", "y")
	failed, err := s.Delete(context.Background(), keys)
	if err == nil || failed != nil {
		t.Fatalf("Delete with every batch failing = %v, %v; want an error and no failed map", failed, err)
	}
	if !strings.Contains(err.Error(), "1000 keys from k-0000") {
		t.Fatalf("Delete's error %q does not name the first batch (1000 keys from k-0000)", err)
	}
	if batches, _ := faults.sent(); len(batches) != 2 {
		t.Fatalf("%d DeleteObjects requests, want 2", len(batches))
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"k-0000", "k-1499"}) {
		t.Fatalf("objects after the failed Delete: %q", got)
	}
}
