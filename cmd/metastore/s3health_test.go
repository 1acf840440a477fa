package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/wire"
)

// statusBlobStore reads blob_store of GET /v1/status from p.
func statusBlobStore(p *clProc) (*wire.BlobStoreHealth, error) {
	code, body := clDo("GET", p.url("/v1/status"), nil)
	if code != http.StatusOK {
		return nil, fmt.Errorf("status answered %d %s", code, body)
	}
	var st wire.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, err
	}
	if st.BlobStore == nil {
		return nil, fmt.Errorf("no blob_store in %s", body)
	}
	return st.BlobStore, nil
}

// TestS3BlobStoreHealthInStatus: a member process on the S3 server process
// reports in /v1/status, and as a detail of /readyz, how its object-store
// calls went: ok after the startup ping; failing, with the error and the
// count of consecutive failures, while the server is frozen (SIGSTOP) and
// after it is stopped; ok again once it answers. /readyz stays 200
// throughout (readiness is the member's Raft state).
func TestS3BlobStoreHealthInStatus(t *testing.T) {
	srv := blobtest.StartS3ServerProcess(t, "--bucket", s3Bucket)
	c := startSingleS3(t, srv.Endpoint, "--s3-attempt-timeout", "300ms", "--s3-max-attempts", "1", "--s3-timeout", "2s",
		"--gc-interval", "1h", "--gc-orphan-grace", "1h")
	p := c.procs[0]

	h, err := statusBlobStore(p)
	if err != nil {
		t.Fatal(err)
	}
	if h.State != wire.BlobStoreOK || h.Location != "s3://"+s3Bucket+"/ms" || h.LastSuccess == nil || h.ConsecutiveFailures != 0 {
		t.Fatalf("after the start: %+v", h)
	}

	// gcCycle runs a cycle with the orphan sweep, which lists the bucket:
	// one object-store call at least, answered or not.
	gcCycle := func() {
		t.Helper()
		if code, body := clDo("POST", p.url("/v1/gc/run?orphans=true"), nil); code != http.StatusOK && code != http.StatusBadGateway && code != http.StatusServiceUnavailable {
			t.Fatalf("gc run: %d %s", code, body)
		}
	}
	failing := func(want string) *wire.BlobStoreHealth {
		t.Helper()
		var got *wire.BlobStoreHealth
		waitFor(t, 30*time.Second, func() error {
			gcCycle()
			h, err := statusBlobStore(p)
			if err != nil {
				return err
			}
			if h.State != wire.BlobStoreFailing || h.ConsecutiveFailures == 0 || h.LastErrorAt == nil || !strings.Contains(h.LastError, want) {
				return fmt.Errorf("blob_store %+v, want failing with %q", h, want)
			}
			got = h
			return nil
		})
		return got
	}

	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := failing("timeout awaiting response headers")
	if frozen.LastSuccess == nil || frozen.LastErrorOp == "" || frozen.Failures < frozen.ConsecutiveFailures {
		t.Fatalf("frozen: %+v", frozen)
	}
	code, body := clDo("GET", p.url("/readyz"), nil)
	var ready struct {
		Status    string               `json:"status"`
		BlobStore wire.BlobStoreHealth `json:"blob_store"`
	}
	if err := json.Unmarshal(body, &ready); err != nil || code != http.StatusOK || ready.Status != "ready" || ready.BlobStore.State != wire.BlobStoreFailing {
		t.Fatalf("readyz with the store frozen: %d %s", code, body)
	}

	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		gcCycle()
		h, err := statusBlobStore(p)
		if err != nil {
			return err
		}
		if h.State != wire.BlobStoreOK || h.ConsecutiveFailures != 0 || !h.LastSuccess.After(*frozen.LastErrorAt) || h.LastError == "" {
			return fmt.Errorf("blob_store %+v after the thaw", h)
		}
		return nil
	})

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	failing("connection refused")
}
