package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/metastore/metastore/client"
)

// TestMutationGivenUpBeforeSendingIsNotApplied: a mutation whose caller
// gave up before any attempt went out sends nothing, and its error is the
// caller's context error with a known outcome (neither ErrOutcomeUnknown
// nor ErrUnavailable): the call was not applied.
func TestMutationGivenUpBeforeSendingIsNotApplied(t *testing.T) {
	var calls atomic.Int32
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	_, err = c.BeginEpoch(ctx, "j", 1, 1)
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrUnavailable) {
		t.Errorf("begin with a cancelled context: %v; want the context's error, outcome known", err)
	}
	_, err = c.Ack(ctx, "j", 1, 1, "s0", input("o=0"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("ack with a cancelled context: %v; want the context's error, outcome known", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the member for calls given up before sending", n)
	}
}
