package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// corruptingProxy forwards to target and flips one byte of the body of
// the next n answers to GET /v1/objects/... (same length), as a
// corrupting object store or network would.
func corruptingProxy(t *testing.T, target string, n *atomic.Int32) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || !strings.HasPrefix(resp.Request.URL.Path, "/v1/objects/") || resp.StatusCode != http.StatusOK {
			return nil
		}
		if n.Add(-1) < 0 {
			n.Add(1)
			return nil
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if len(raw) > 0 {
			raw[len(raw)/2] ^= 0x20
		}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRestoreVerifiesCRC32C: the CRC32C a worker declares travels through
// the ack and the restore plan; ReadRange and OpenState read a corrupted
// range again and return the right bytes, and fail with a ChecksumError
// naming the range when every read is corrupted. A range declared
// without a CRC32C is not checked.
func TestRestoreVerifiesCRC32C(t *testing.T) {
	m := startSingle(t)
	var corrupt atomic.Int32
	px := corruptingProxy(t, m.URL, &corrupt)
	c, err := client.New(client.Config{
		Endpoints:        []string{px},
		RequestTimeout:   10 * time.Second,
		BackoffBase:      2 * time.Millisecond,
		BackoffMax:       20 * time.Millisecond,
		MaxAttempts:      4,
		DisableDiscovery: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	tasks := []wire.Task{{ID: "agg", Caps: mustCaps(t, "state", "incremental")}}
	if _, err := c.PutJob(ctx, "crc", wire.JobConfig{Retained: 2}); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartAttempt(ctx, "crc", "a1", tasks)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := client.NewTaskState(nil, tasks[0].Caps)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("checksummed changelog bytes;", 10))
	key, err := c.Upload(ctx, "crc", a.Generation, "agg", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.AddBlob(key, uint64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegmentCRC(key, 0, 100, 1, 5, manifests.CRC32C(data[:100])); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegment(key, 100, uint64(len(data))-100, 6, 9); err != nil {
		t.Fatal(err)
	}
	if err := ts.AddSegmentCRC(key, 0, 1, 10, 10, "not-a-crc"); err == nil {
		t.Fatal("TaskState took a malformed crc32c")
	}
	if _, err := c.BeginEpoch(ctx, "crc", a.Generation, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(ctx, "crc", a.Generation, 1, "agg", client.AckRequest{Manifest: ts.Manifest()}); err != nil {
		t.Fatal(err)
	}
	ts.Acked()

	r, err := c.Restore(ctx, "crc", "agg", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rgs := r.Ranges()
	if len(rgs) != 2 || rgs[0].CRC32C != manifests.CRC32C(data[:100]) || rgs[1].CRC32C != "" {
		t.Fatalf("restore plan ranges %+v: the declared crc32c did not come back", rgs)
	}

	// Intact: the bytes.
	if got := readState(t, r); !bytes.Equal(got, data) {
		t.Fatalf("state %q, want %q", got, data)
	}
	// Two corrupted reads of the checked range: read again, right bytes.
	corrupt.Store(2)
	got, err := c.ReadRange(ctx, rgs[0])
	if err != nil || !bytes.Equal(got, data[:100]) {
		t.Fatalf("ReadRange after two corrupted reads: %q, %v", got, err)
	}
	corrupt.Store(2)
	if got := readState(t, r); !bytes.Equal(got, data) {
		t.Fatalf("OpenState after two corrupted reads: %q, want %q", got, data)
	}
	if corrupt.Load() != 0 {
		t.Fatalf("%d corruptions left unread", corrupt.Load())
	}

	// Every read corrupted: a ChecksumError naming the range.
	corrupt.Store(100)
	_, err = c.ReadRange(ctx, rgs[0])
	var ce *client.ChecksumError
	if !errors.Is(err, client.ErrChecksum) || !errors.As(err, &ce) {
		t.Fatalf("ReadRange of a range corrupted every time: %v, want a ChecksumError", err)
	}
	if ce.Key != key || ce.Offset != 0 || ce.Length != 100 || ce.Want != rgs[0].CRC32C || ce.Got == ce.Want || ce.Attempts != 4 {
		t.Fatalf("ChecksumError %+v", ce)
	}
	for _, part := range []string{key, "offset 0", "length 100", "want " + ce.Want, "got " + ce.Got} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("error %q does not name %q", err, part)
		}
	}
	rc, err := r.OpenState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, client.ErrChecksum) {
		t.Fatalf("OpenState of a range corrupted every time: %v, want ErrChecksum", err)
	}

	// The range without a crc32c is not checked: its corruption passes.
	corrupt.Store(1)
	got, err = c.ReadRange(ctx, rgs[1])
	if err != nil || bytes.Equal(got, data[100:]) || len(got) != len(data)-100 {
		t.Fatalf("unchecked range: %v, equal %v", err, bytes.Equal(got, data[100:]))
	}
}
