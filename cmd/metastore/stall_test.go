package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/faultpoint"
)

// statusPromptly bounds the answer of GET /v1/status and /readyz while the
// member is stuck: they answer in milliseconds when they do not wait for
// Raft or the state machine, and never when they do.
const statusPromptly = 5 * time.Second

// getWithin answers GET url within d, or fails the test saying what
// waited.
func getWithin(t *testing.T, d time.Duration, url, while string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s did not answer within %s %s: %v", url, d, while, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the answer %s: %v", url, while, err)
	}
	return resp.StatusCode, body
}

// TestStatusAnswersWhileRestoreHoldsTheStateMachine: GET /v1/status and
// /readyz answer promptly while Raft's main goroutine waits for a restore
// of the state machine that does not finish (paused by a fault point after
// the restored file was renamed, where the state machine holds its file
// exclusively): an operator, and the consistency suite's health check,
// ask a member for its status exactly when it is in trouble. The restore
// is a backup's (PUT /v1/snapshot): hashicorp/raft runs it on its main
// goroutine, which waits there for the state machine, as it does for a
// snapshot installed from the leader.
func TestStatusAnswersWhileRestoreHoldsTheStateMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs metastore processes; skipped in -short mode")
	}
	const point = faultpoint.RestoreRenamed
	ctl := freeAddr(t)
	p := newFaultProc(t)
	p.startWith(t, "", faultpoint.EnvAddr+"="+ctl)
	setupJob(t, p, 10)
	for i := range 5 {
		if ack(p, i, acks{}) != http.StatusOK {
			t.Fatalf("ack %d failed", i)
		}
	}
	status, backup := clDo("GET", p.url("/v1/snapshot"), nil)
	if status != http.StatusOK {
		t.Fatalf("backup: %d %.300s", status, backup)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := &faultpoint.Client{Addr: ctl}
	if _, err := fc.Set(ctx, point, faultpoint.Arm{Action: faultpoint.Pause, Count: 1}); err != nil {
		t.Fatalf("arm %s: %v", point, err)
	}
	// Whatever happens below, the restore is let go, so the member can be
	// stopped.
	t.Cleanup(func() { _, _ = fc.Set(context.Background(), point, faultpoint.Arm{Action: faultpoint.Off}) })
	restored := make(chan string, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "PUT", p.url("/v1/snapshot"), bytes.NewReader(backup))
		if err != nil {
			restored <- err.Error()
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			restored <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		restored <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	if _, err := fc.Wait(ctx, point, 1, 1, time.Minute); err != nil {
		t.Fatalf("the restore did not reach %s: %v", point, err)
	}

	while := "while the restore holds the state machine and Raft's main goroutine waits for it"
	status, body := getWithin(t, statusPromptly, p.url("/v1/status"), while)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/status %s: %d %s", while, status, body)
	}
	var st clStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != "leader" || st.LeaderID != "n1" || len(st.Members) != 1 ||
		st.Members[0].ID != "n1" || st.Members[0].Suffrage != "voter" || st.Members[0].HTTPAddr != p.httpAddr {
		t.Fatalf("status %s: %s", while, body)
	}
	// Ready or not, /readyz answers.
	getWithin(t, statusPromptly, p.url("/readyz"), while)
	status, body = getWithin(t, statusPromptly, p.url("/v1/members"), while)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/members %s: %d %s", while, status, body)
	}

	if _, err := fc.Set(ctx, point, faultpoint.Arm{Action: faultpoint.Off}); err != nil {
		t.Fatalf("release %s: %v", point, err)
	}
	select {
	case ans := <-restored:
		if !strings.HasPrefix(ans, "200 ") {
			t.Fatalf("restore: %.300s", ans)
		}
	case <-ctx.Done():
		t.Fatal("the restore did not finish once released")
	}
	// The backup carries no member records; the leader writes its own
	// again after the restore, and the status shows it.
	waitFor(t, 30*time.Second, func() error {
		var st clStatus
		if err := clGet(p.url("/v1/status"), &st); err != nil {
			return err
		}
		if len(st.Members) != 1 || st.Members[0].HTTPAddr != p.httpAddr {
			return fmt.Errorf("members after the restore: %+v", st.Members)
		}
		return nil
	})
}
