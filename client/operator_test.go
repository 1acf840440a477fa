package client_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// startAuthMember starts a single member with --auth and returns it with
// a client holding its operator (bootstrap) token.
func startAuthMember(t *testing.T) (*member, *client.Client) {
	t.Helper()
	secret := api.GenerateToken()
	file := filepath.Join(t.TempDir(), "bootstrap-token")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, addr := testmember.FreeAddr(t)
	cfg := testmember.Config(t, "n1")
	cfg.HTTPAddr = addr
	cfg.RaftAddr = testmember.FreePort(t)
	cfg.Auth = true
	cfg.AuthBootstrapTokenFile = file
	m := testmember.StartLogged(t, cfg, l, "", nil)
	waitFor(t, 10*time.Second, "leader with the bootstrap token", func() bool {
		tok, err := m.FSM.TokenByHash(wire.TokenHash(secret))
		return m.Node.IsLeader() && m.Node.Ready() == nil && err == nil && tok != nil
	})
	c, err := client.New(client.Config{Endpoints: []string{m.URL}, Token: secret, RequestTimeout: 10 * time.Second,
		BackoffBase: 2 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// TestOperatorCalls drives the client's operator calls against a member
// running with --auth: membership, leadership, tokens, GC, checks, and a
// backup saved and restored.
func TestOperatorCalls(t *testing.T) {
	m, c := startAuthMember(t)
	ctx := ctxT(t)

	ms, err := c.Members(ctx)
	if err != nil || len(ms.Members) != 1 || ms.LeaderID != "n1" || !ms.Members[0].Leader {
		t.Fatalf("Members: %+v, %v", ms, err)
	}
	self := ms.Members[0]
	if after, err := c.AddMember(ctx, self.ID, self.RaftAddr, self.HTTPAddr); err != nil || len(after) != 1 {
		t.Fatalf("AddMember of the voter itself: %+v, %v", after, err)
	}
	if _, err := c.RemoveMember(ctx, "n9"); err == nil {
		t.Fatalf("RemoveMember of an unknown member: no error")
	}
	if _, err := c.TransferLeadership(ctx); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("TransferLeadership with no other voter: %v, want ErrConflict", err)
	}

	tok, err := c.CreateToken(ctx, client.TokenRequest{Role: wire.RoleWorker, Job: "ops", Description: "ops worker"})
	if err != nil || tok.Secret == "" || tok.Accessor == "" || tok.Role != wire.RoleWorker || tok.Job != "ops" {
		t.Fatalf("CreateToken: %+v, %v", tok, err)
	}
	listed, err := c.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range listed {
		if l.Secret != "" {
			t.Errorf("Tokens shows a secret: %+v", l)
		}
		found = found || l.Accessor == tok.Accessor
	}
	if !found || len(listed) != 2 {
		t.Fatalf("Tokens: %+v, want the bootstrap token and %s", listed, tok.Accessor)
	}
	// The worker token reaches its job but not the operator calls.
	worker, err := client.New(client.Config{Endpoints: []string{m.URL}, Token: tok.Secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.GCStatus(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("GCStatus with a worker token: %v, want ErrForbidden", err)
	}
	if revoked, err := c.RevokeToken(ctx, tok.Accessor, false); err != nil || revoked.Accessor != tok.Accessor {
		t.Fatalf("RevokeToken: %+v, %v", revoked, err)
	}
	if _, err := worker.Jobs(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("a revoked token: %v, want ErrUnauthenticated", err)
	}

	// A job with one completed epoch: GC, verify and fsck see it.
	if _, err := c.PutJob(ctx, "ops", wire.JobConfig{}); err != nil {
		t.Fatal(err)
	}
	att, err := c.StartAttempt(ctx, "ops", "a1", []wire.Task{{ID: "t", Caps: mustCaps(t, "state")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginEpoch(ctx, "ops", att.Generation, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(ctx, "ops", att.Generation, 1, "t", client.AckRequest{Payloads: map[wire.Kind][]byte{wire.KindState: []byte("s1")}}); err != nil {
		t.Fatal(err)
	}
	st, err := c.GCStatus(ctx)
	if err != nil || !st.Enabled || !st.Leading {
		t.Fatalf("GCStatus: %+v, %v", st, err)
	}
	rep, err := c.RunGC(ctx, wire.GCRunOptions{DryRun: true})
	if err != nil || !rep.DryRun || rep.Errors != 0 {
		t.Fatalf("RunGC dry run: %+v, %v", rep, err)
	}
	vr, err := c.Verify(ctx, "ops")
	if err != nil || vr.Job != "ops" || !vr.OK() {
		t.Fatalf("Verify: %+v, %v", vr, err)
	}
	if _, err := c.Verify(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Verify of an unknown job: %v, want ErrNotFound", err)
	}
	fr, err := c.Fsck(ctx)
	if err != nil || !fr.OK {
		t.Fatalf("Fsck: %+v, %v", fr, err)
	}

	var backup bytes.Buffer
	n, err := c.SaveSnapshot(ctx, &backup)
	if err != nil || n != int64(backup.Len()) || n == 0 {
		t.Fatalf("SaveSnapshot: %d bytes (%d buffered), %v", n, backup.Len(), err)
	}
	line, err := bufio.NewReader(bytes.NewReader(backup.Bytes())).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var info wire.BackupInfo
	if err := json.Unmarshal(line, &info); err != nil || info.Index == 0 {
		t.Fatalf("backup header %q: %+v, %v", line, info, err)
	}
	restored, err := c.RestoreSnapshot(ctx, bytes.NewReader(backup.Bytes()), int64(backup.Len()))
	if err != nil || restored.Index != info.Index || restored.SHA256 != info.SHA256 {
		t.Fatalf("RestoreSnapshot: %+v, %v; saved %+v", restored, err, info)
	}
	var ae *client.APIError
	if _, err := c.RestoreSnapshot(ctx, bytes.NewReader([]byte("not a backup\n")), 13); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "bad_backup" {
		t.Fatalf("RestoreSnapshot of garbage: %v, want a 400 bad_backup answer", err)
	}
	if j, err := c.Job(ctx, "ops"); err != nil || j.LatestCompleted != 1 {
		t.Fatalf("the job after the restore: %+v, %v", j, err)
	}
}

// TestCreateTokenNotRepeated checks that a token creation whose outcome is
// unknown is not sent again (a second creation would be a second token),
// while an idempotent mutation is.
func TestCreateTokenNotRepeated(t *testing.T) {
	var tokens, jobs atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/tokens":
			tokens.Add(1)
		case "/v1/jobs/j":
			jobs.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"outcome_unknown","message":"leadership lost","retryable":true}}`))
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true, MaxAttempts: 3,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := c.CreateToken(ctx, client.TokenRequest{Role: wire.RoleOperator}); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("CreateToken: %v, want ErrOutcomeUnknown", err)
	}
	if n := tokens.Load(); n != 1 {
		t.Errorf("CreateToken sent %d times, want 1", n)
	}
	if _, err := c.PutJob(ctx, "j", wire.JobConfig{}); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("PutJob: %v, want ErrOutcomeUnknown", err)
	}
	if n := jobs.Load(); n != 3 {
		t.Errorf("PutJob sent %d times, want 3 (MaxAttempts)", n)
	}
}

// TestWithRawAnswer checks that a call made with WithRawAnswer hands back
// the answer's body byte for byte, fields the client does not decode
// included.
func TestWithRawAnswer(t *testing.T) {
	const answer = `{"jobs": [],   "extra": {"kept": true}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	jobs, err := c.Jobs(client.WithRawAnswer(ctxT(t), &raw))
	if err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs: %v, %v", jobs, err)
	}
	if string(raw) != answer {
		t.Errorf("raw answer %q, want %q", raw, answer)
	}
}
