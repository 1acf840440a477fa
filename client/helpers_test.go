package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// The harness is api/helpers_test.go's: real in-process members, each a
// Raft node on loopback with its bbolt state machine on disk, the HTTP API
// on a real listener, a garbage collector and a local blob store.

// member is one in-process member (internal/testmember).
type member = testmember.Member

func startSingle(t *testing.T) *member { return testmember.StartSingle(t) }

func startCluster(t *testing.T) []*member { return testmember.StartCluster(t, 3) }

func leaderOf(ms []*member) *member { return testmember.LeaderOf(ms) }

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testmember.WaitFor(t, timeout, what, cond)
}

func newClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		Endpoints:      endpoints,
		RequestTimeout: 10 * time.Second,
		BackoffBase:    2 * time.Millisecond,
		BackoffMax:     100 * time.Millisecond,
		MaxAttempts:    40,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawJSON performs a request outside the client (test set-up and checks).
func rawJSON(t *testing.T, method, url string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCaps(t *testing.T, names ...string) wire.Caps {
	t.Helper()
	c, err := wire.ParseCaps(names)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func freeAddr(t *testing.T) (net.Listener, string) { return testmember.FreeAddr(t) }

// fsmManifestAck is the state machine's form of a manifest ack, whose
// Validate is the check the API applies before proposing it.
func fsmManifestAck(m *wire.ManifestAck) *fsm.ManifestAck {
	out := &fsm.ManifestAck{Base: (*fsm.BaseRef)(m.Base), Delta: m.Delta, Full: m.Full}
	for _, b := range m.Blobs {
		out.Blobs = append(out.Blobs, fsm.BlobCommit(b))
	}
	return out
}
