package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

// TestS3WrongSecretWarnsAccessDenied: a member started with a wrong secret
// warns that the blob store denies access (not that it is unreachable) and
// names where the SDK took the credentials from: the environment, or the
// shared credentials file; the secret is never printed.
func TestS3WrongSecretWarnsAccessDenied(t *testing.T) {
	endpoint := blobtest.StartS3Server(t, s3Bucket)
	const wrong = "wrong-secret-4711"
	credFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credFile, []byte("[default]\naws_access_key_id = "+blobtest.AccessKeyID+"\naws_secret_access_key = "+wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noConfig := filepath.Join(t.TempDir(), "config")
	for name, tc := range map[string]struct {
		env    []string
		source string
	}{
		"environment": {
			env:    []string{"AWS_ACCESS_KEY_ID=" + blobtest.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + wrong, "AWS_REGION=" + blobtest.Region, "AWS_SHARED_CREDENTIALS_FILE=" + credFile, "AWS_CONFIG_FILE=" + noConfig},
			source: "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), access key id " + blobtest.AccessKeyID,
		},
		"shared file": {
			env: []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
				"AWS_REGION=" + blobtest.Region, "AWS_SHARED_CREDENTIALS_FILE=" + credFile, "AWS_CONFIG_FILE=" + noConfig},
			source: "the shared credentials file " + credFile + ", access key id " + blobtest.AccessKeyID,
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := &clProc{id: "n1", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(t.TempDir(), "n1")}
			p.args = append([]string{"serve", "--node-id", "n1", "--data-dir", p.dataDir, "--http-addr", p.httpAddr, "--raft-addr", p.raftAddr}, s3Flags(endpoint)...)
			p.env = tc.env // after the test's environment: these win
			p.start(t)
			defer p.kill(t)
			waitFor(t, 30*time.Second, func() error {
				if !p.running() {
					return fmt.Errorf("exited: %s", p.stderr)
				}
				if !strings.Contains(p.stderr.String(), "blob store access denied") {
					return fmt.Errorf("no access-denied warning yet")
				}
				return nil
			})
			var line string
			for _, l := range strings.Split(p.stderr.String(), "\n") {
				if strings.Contains(l, "blob store access denied") {
					line = l
				}
			}
			if !strings.Contains(line, tc.source) || strings.Contains(p.stderr.String(), wrong) || strings.Contains(p.stderr.String(), "not reachable") {
				t.Fatalf("warning %q, want the source %q and no secret; stderr:\n%s", line, tc.source, p.stderr)
			}
		})
	}
}
