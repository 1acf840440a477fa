package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestClassify pins the outcome each client error gives an operation: an
// outcome the client reports unknown never becomes a definite fail, a
// failure never becomes ok, and a read's failure is always a fail.
func TestClassify(t *testing.T) {
	api := func(status int, code wire.Code, retryable bool) *client.APIError {
		return &client.APIError{Status: status, Code: code, Retryable: retryable, Method: "POST", Path: "/v1/x"}
	}
	cases := []struct {
		name     string
		err      error
		mutation bool
		want     Outcome
	}{
		{"nil", nil, true, OK},
		{"nil read", nil, false, OK},
		{"outcome unknown sentinel", client.ErrOutcomeUnknown, true, Unknown},
		{"wrapped outcome unknown", fmt.Errorf("ack: %w", client.ErrOutcomeUnknown), true, Unknown},
		{"retry error unknown, last a transport error", &client.RetryError{Unknown: true, Last: errors.New("connection reset")}, true, Unknown},
		// The client turns a definite refusal that an earlier attempt of
		// the same call may have caused into an unknown outcome; the 4xx
		// it carries must not make it a fail.
		{"retry error unknown, last a conflict", &client.RetryError{Unknown: true, Last: api(409, wire.CodeConflict, false)}, true, Unknown},
		{"retry error unknown, last epoch not pending", &client.RetryError{Unknown: true, Last: api(409, wire.CodeEpochNotPending, false)}, true, Unknown},
		{"retry error unknown, last the caller's deadline", &client.RetryError{Unknown: true, Last: context.DeadlineExceeded}, true, Unknown},
		{"retry error known (every attempt refused)", &client.RetryError{Unknown: false, Last: api(503, wire.CodeNotLeader, true)}, true, Fail},
		{"conflict", api(409, wire.CodeConflict, false), true, Fail},
		{"fenced", api(409, wire.CodeFenced, false), true, Fail},
		{"not found", api(404, wire.CodeNotFound, false), true, Fail},
		{"invalid", api(400, wire.CodeInvalid, false), true, Fail},
		{"not leader 503", api(503, wire.CodeNotLeader, true), true, Fail},
		{"outcome unknown 503", api(503, wire.CodeOutcomeUnknown, true), true, Unknown},
		{"timeout 504", api(504, wire.CodeTimeout, true), true, Unknown},
		{"internal 500", api(500, wire.CodeInternal, false), true, Unknown},
		{"proxy 502", api(502, "http_502", true), true, Unknown},
		{"503 without code", api(503, "", true), true, Unknown},
		// The client returns the context's error alone only for a call
		// that ended before its request went out.
		{"caller's deadline before sending", fmt.Errorf("metastore: POST /v1/x: %w", context.DeadlineExceeded), true, Fail},
		{"caller canceled before sending", context.Canceled, true, Fail},
		{"caller canceled with an attempt out", &client.RetryError{Unknown: true, Last: context.Canceled}, true, Unknown},
		{"caller canceled, wrapped unknown", fmt.Errorf("ack: %w: %w", client.ErrOutcomeUnknown, context.Canceled), true, Unknown},
		{"anything else", errors.New("boom"), true, Unknown},
		{"read: outcome unknown", client.ErrOutcomeUnknown, false, Fail},
		{"read: internal", api(500, wire.CodeInternal, false), false, Fail},
		{"read: deadline", context.DeadlineExceeded, false, Fail},
	}
	for _, c := range cases {
		got, _ := Classify(c.err, c.mutation)
		if got != c.want {
			t.Errorf("%s: Classify(%v, mutation %v) = %s, want %s", c.name, c.err, c.mutation, got, c.want)
		}
	}
	// The code names what was answered.
	if _, code := Classify(&client.RetryError{Unknown: true, Last: api(409, wire.CodeConflict, false)}, true); code != string(wire.CodeOutcomeUnknown) {
		t.Errorf("code of an unknown retry error = %q, want %q", code, wire.CodeOutcomeUnknown)
	}
	if _, code := Classify(api(404, wire.CodeNotFound, false), false); code != string(wire.CodeNotFound) {
		t.Errorf("code of a not found read = %q, want %q", code, wire.CodeNotFound)
	}
}

// TestClassifyClientCalls runs real client calls against a member stand-in
// and classifies their errors: a mutation whose first attempt lost its
// connection after the request was sent, and whose retry was refused as a
// conflict (which the first attempt may have caused), stays unknown; one
// refused before any attempt could land is a fail.
func TestClassifyClientCalls(t *testing.T) {
	var calls atomic.Int64
	mode := atomic.Value{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		writeErr := func(status int, code wire.Code, retryable bool) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(wire.ErrorResponse{Error: wire.Error{Code: code, Message: "test", Retryable: retryable}})
		}
		switch mode.Load().(string) {
		case "drop-then-conflict":
			if n == 1 {
				hj, _ := w.(http.Hijacker)
				c, _, err := hj.Hijack()
				if err == nil {
					_ = c.Close()
				}
				return
			}
			writeErr(http.StatusConflict, wire.CodeEpochNotIncreasing, false)
		case "not-leader":
			writeErr(http.StatusServiceUnavailable, wire.CodeNotLeader, true)
		case "conflict":
			writeErr(http.StatusConflict, wire.CodeConflict, false)
		}
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true, MaxAttempts: 3,
		BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, RequestTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode string
		want Outcome
	}{
		{"drop-then-conflict", Unknown},
		{"not-leader", Fail},
		{"conflict", Fail},
	} {
		calls.Store(0)
		mode.Store(tc.mode)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.BeginEpoch(ctx, "j", 1, 1)
		cancel()
		if err == nil {
			t.Fatalf("%s: BeginEpoch succeeded", tc.mode)
		}
		if got, code := Classify(err, true); got != tc.want {
			t.Errorf("%s: BeginEpoch's error %v classified %s (%s), want %s", tc.mode, err, got, code, tc.want)
		}
	}
}

// TestClassifyCallsGivenUp runs real client calls whose caller gives up:
// one given up before its request went out is a fail (nothing reached the
// member), one given up while its request is at the member is unknown.
func TestClassifyCallsGivenUp(t *testing.T) {
	var calls atomic.Int64
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done() // held until the caller gives up
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, DisableDiscovery: true, MaxAttempts: 3,
		BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, RequestTimeout: time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.BeginEpoch(ctx, "j", 1, 1)
	if got, code := Classify(err, true); got != Fail || calls.Load() != 0 {
		t.Errorf("begin given up before sending: %v classified %s (%s), %d requests; want fail, none sent", err, got, code, calls.Load())
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err = c.BeginEpoch(ctx, "j", 1, 1)
	cancel()
	if got, code := Classify(err, true); got != Unknown || calls.Load() != 1 {
		t.Errorf("begin given up at the member: %v classified %s (%s), %d requests; want unknown, one sent", err, got, code, calls.Load())
	}
}

// TestSnapshotInFlight: an operation without an outcome when the history
// is read counts as unknown, never as a fail.
func TestSnapshotInFlight(t *testing.T) {
	h := New()
	a := h.Invoke(&Op{Kind: KindAck})
	h.Invoke(&Op{Kind: KindAck})
	h.Finish(a, nil, true)
	ops := h.Snapshot()
	if ops[0].Outcome != OK || ops[1].Outcome != Unknown || ops[1].Code != "in-flight" {
		t.Fatalf("outcomes %s, %s (%s), want ok, unknown (in-flight)", ops[0].Outcome, ops[1].Outcome, ops[1].Code)
	}
	if !ops[0].Complete.After(ops[0].Invoke) && !ops[0].Complete.Equal(ops[0].Invoke) {
		t.Fatalf("completion %s before invocation %s", ops[0].Complete, ops[0].Invoke)
	}
}

// TestManifestRefsNameEveryField: two manifests have equal refs exactly
// when they hold the same bases and segments, in any order: a change of
// offset, length, CRC32C or sequence numbers, or a segment turned base,
// changes them.
func TestManifestRefsNameEveryField(t *testing.T) {
	seg := manifests.Segment{Key: "k", Offset: 1, Length: 2, FirstSeq: 3, LastSeq: 4, CRC32C: "0000000a"}
	base := manifests.Base{Key: "b", Offset: 0, Length: 9, CRC32C: "0000000b"}
	m := manifests.Manifest{Bases: []manifests.Base{base}, Segments: []manifests.Segment{seg, {Key: "a", Length: 1, FirstSeq: 5, LastSeq: 5}}}
	same := manifests.Manifest{Bases: []manifests.Base{base}, Segments: []manifests.Segment{{Key: "a", Length: 1, FirstSeq: 5, LastSeq: 5}, seg}}
	if a, b := ManifestRefs(m), ManifestRefs(same); !slices.Equal(a, b) {
		t.Fatalf("the same manifest in another order: %v, %v", a, b)
	}
	for name, change := range map[string]func(*manifests.Segment){
		"offset":    func(s *manifests.Segment) { s.Offset++ },
		"length":    func(s *manifests.Segment) { s.Length++ },
		"crc32c":    func(s *manifests.Segment) { s.CRC32C = "0000000c" },
		"first seq": func(s *manifests.Segment) { s.FirstSeq++ },
		"last seq":  func(s *manifests.Segment) { s.LastSeq++ },
		"key":       func(s *manifests.Segment) { s.Key = "k2" },
	} {
		s := seg
		change(&s)
		other := manifests.Manifest{Bases: m.Bases, Segments: []manifests.Segment{s, m.Segments[1]}}
		if slices.Equal(ManifestRefs(m), ManifestRefs(other)) {
			t.Errorf("a segment's %s changed, refs equal", name)
		}
	}
	asBase := manifests.Manifest{Bases: []manifests.Base{base, {Key: "k", Offset: 1, Length: 2, CRC32C: "0000000a"}}, Segments: m.Segments[1:]}
	if slices.Equal(ManifestRefs(m), ManifestRefs(asBase)) {
		t.Error("a segment turned base, refs equal")
	}
	b2 := m
	b2.Bases = []manifests.Base{{Key: "b", Offset: 0, Length: 8, CRC32C: "0000000b"}}
	if slices.Equal(ManifestRefs(m), ManifestRefs(b2)) {
		t.Error("a base's length changed, refs equal")
	}
}
