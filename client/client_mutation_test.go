package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// The tests of this file pin guards of the client's retry loop
// (client.go: Client.do and its helpers) that the tests against real
// members do not reach: each answers the client from an httptest server on
// loopback, as a member, a proxy in front of one, or a dead one would.

// fakeMember serves h on loopback until the test ends.
func fakeMember(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// answer writes v as a JSON answer with status.
func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// refuse writes the API's error answer.
func refuse(w http.ResponseWriter, status int, code wire.Code, retryable bool) {
	answer(w, status, wire.ErrorResponse{Error: wire.Error{Code: code, Message: "fake member says so", Retryable: retryable}})
}

// page writes a proxy's error page (not the API's JSON).
func page(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "<html><body>proxy error</body></html>")
}

// hangUp reads the whole request and drops the connection without an
// answer: the request reached the member, its answer is lost.
func hangUp(t *testing.T, w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

// TestUnknownThenInvalidIsDefinite: a mutation whose first answer was lost
// and whose repeat is refused as malformed gets that refusal (a malformed
// request could not have landed the first time either); a refusal the lost
// attempt may have caused (a conflict) leaves the outcome unknown.
func TestUnknownThenInvalidIsDefinite(t *testing.T) {
	for _, tc := range []struct {
		code    wire.Code
		status  int
		invalid bool
	}{
		{wire.CodeInvalid, http.StatusBadRequest, true},
		{wire.CodeConflict, http.StatusConflict, false},
	} {
		var n atomic.Int32
		srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				hangUp(t, w, r)
				return
			}
			refuse(w, tc.status, tc.code, false)
		})
		_, err := proxiedClient(t, 4, srv.URL).PutJob(ctxT(t), "j", wire.JobConfig{})
		if got := n.Load(); got != 2 {
			t.Errorf("%s: %d requests, want 2 (the lost answer, the refusal)", tc.code, got)
		}
		if tc.invalid && (!errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrOutcomeUnknown)) {
			t.Errorf("lost answer, then invalid_argument: %v; want the definite ErrInvalid", err)
		}
		if !tc.invalid && (!errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrConflict)) {
			t.Errorf("lost answer, then conflict: %v; want outcome unknown", err)
		}
	}
}

// TestCallerGivesUpWhileInFlight: the caller's context ends while a
// mutation is at the member: its outcome is unknown (and the error still
// says the context ended); a read's is not.
func TestCallerGivesUpWhileInFlight(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done() // the client hung up
	})
	c := proxiedClient(t, 4, srv.URL)
	for _, mutation := range []bool{true, false} {
		ctx, cancel := context.WithCancel(ctxT(t))
		go func() {
			<-arrived
			cancel()
		}()
		var err error
		if mutation {
			_, err = c.PutJob(ctx, "j", wire.JobConfig{})
		} else {
			_, err = c.Job(ctx, "j")
		}
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("mutation %v: %v does not say the context was cancelled", mutation, err)
		}
		if errors.Is(err, client.ErrOutcomeUnknown) != mutation || errors.Is(err, client.ErrUnavailable) {
			t.Errorf("mutation %v, cancelled while at the member: %v; want outcome unknown for a mutation only", mutation, err)
		}
	}
}

// TestReadsNeverOutcomeUnknown: a read whose answers are a gateway's
// error page, or lost, ends unavailable: only a mutation has an outcome
// to be unknown. The last page is in the error as a retryable answer.
func TestReadsNeverOutcomeUnknown(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"bad gateway page": func(w http.ResponseWriter, r *http.Request) { page(w, http.StatusBadGateway) },
		"proxy's JSON page": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"message":"no healthy upstream"}`)
		},
		"gateway timeout page": func(w http.ResponseWriter, r *http.Request) { page(w, http.StatusGatewayTimeout) },
		"answer lost":          func(w http.ResponseWriter, r *http.Request) { hangUp(t, w, r) },
	} {
		srv := fakeMember(t, h)
		_, err := proxiedClient(t, 2, srv.URL).Job(ctxT(t), "j")
		var re *client.RetryError
		if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &re) || re.Attempts != 2 {
			t.Errorf("%s: read ended %v; want unavailable after 2 attempts", name, err)
		}
		var ae *client.APIError
		if strings.HasSuffix(name, "page") && (!errors.As(err, &ae) || !ae.Retryable || ae.Code != wire.Code(fmt.Sprintf("http_%d", ae.Status))) {
			t.Errorf("%s: last answer %+v, want the page's status as a retryable http_ code", name, ae)
		}
	}
}

// TestGatewayAnswersLeaveMutationOpen: a proxy's 502 or 504 page may
// follow a request the member applied, so a mutation answered only so
// ends with its outcome unknown; a 503 page, or the API's own coded answer
// (502 unavailable: the member did not take it), is a known failure.
func TestGatewayAnswersLeaveMutationOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       http.HandlerFunc
		unknown bool
	}{
		{"502 page", func(w http.ResponseWriter, r *http.Request) { page(w, http.StatusBadGateway) }, true},
		{"504 page", func(w http.ResponseWriter, r *http.Request) { page(w, http.StatusGatewayTimeout) }, true},
		{"503 page", func(w http.ResponseWriter, r *http.Request) { page(w, http.StatusServiceUnavailable) }, false},
		{"502 unavailable", func(w http.ResponseWriter, r *http.Request) {
			refuse(w, http.StatusBadGateway, wire.CodeUnavailable, true)
		}, false},
	} {
		var n atomic.Int32
		srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { n.Add(1); tc.h(w, r) })
		_, err := proxiedClient(t, 2, srv.URL).PutJob(ctxT(t), "j", wire.JobConfig{})
		if errors.Is(err, client.ErrOutcomeUnknown) != tc.unknown || errors.Is(err, client.ErrUnavailable) == tc.unknown || n.Load() != 2 {
			t.Errorf("%s: %v after %d attempts; want 2 attempts, outcome unknown %v", tc.name, err, n.Load(), tc.unknown)
		}
		var ae *client.APIError
		if !tc.unknown && (!errors.As(err, &ae) || !ae.Retryable) {
			t.Errorf("%s: the last answer %+v is not in the error as retryable", tc.name, ae)
		}
	}
}

// TestFailuresToConnectAreKnown: a mutation that never reached a member
// (the connection was refused, no route, no such host) has a known
// outcome, whichever form the dialer's error takes.
func TestFailuresToConnectAreKnown(t *testing.T) {
	for name, dialErr := range map[string]error{
		"refused":      syscall.ECONNREFUSED,
		"no route":     &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)},
		"no such host": &net.DNSError{Err: "no such host", Name: "member.invalid", IsNotFound: true},
	} {
		var dials atomic.Int32
		hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, dialErr
		}}}
		c, err := client.New(client.Config{Endpoints: []string{"http://member.invalid:7000"}, HTTPClient: hc, MaxAttempts: 2,
			BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, DisableDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.PutJob(ctxT(t), "j", wire.JobConfig{})
		if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) || dials.Load() != 2 {
			t.Errorf("%s: %v after %d dials; want unavailable (nothing was sent) after 2", name, err, dials.Load())
		}
	}
}

// TestRetryableAnswersAreRetried: an answer the member marks retryable is
// retried whatever its status (a full disk's 507), one it does not mark so
// is final (an internal error's 500).
func TestRetryableAnswersAreRetried(t *testing.T) {
	for _, tc := range []struct {
		status    int
		code      wire.Code
		retryable bool
	}{
		{http.StatusInsufficientStorage, wire.CodeInsufficientStorage, true},
		{http.StatusInternalServerError, wire.CodeInternal, false},
	} {
		var n atomic.Int32
		srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				refuse(w, tc.status, tc.code, tc.retryable)
				return
			}
			answer(w, http.StatusOK, wire.Job{ID: "j"})
		})
		_, err := proxiedClient(t, 3, srv.URL).PutJob(ctxT(t), "j", wire.JobConfig{})
		if tc.retryable && (err != nil || n.Load() != 2) {
			t.Errorf("%s, retryable: %v after %d requests; want success after 2", tc.code, err, n.Load())
		}
		var ae *client.APIError
		if !tc.retryable && (!errors.As(err, &ae) || ae.Code != tc.code || n.Load() != 1) {
			t.Errorf("%s, not retryable: %v after %d requests; want that answer after 1", tc.code, err, n.Load())
		}
	}
}

// TestCreateTokenRetriedWhileNothingLanded: a token creation is repeated
// while no attempt can have landed (refused 503, or never sent), and only
// then.
func TestCreateTokenRetriedWhileNothingLanded(t *testing.T) {
	var n atomic.Int32
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			refuse(w, http.StatusServiceUnavailable, wire.CodeNoLeader, true)
			return
		}
		answer(w, http.StatusOK, client.Token{Accessor: "acc", Secret: "mst_s"})
	})
	l, dead := freeAddr(t)
	l.Close()
	c := proxiedClient(t, 4, "http://"+dead, srv.URL)
	tok, err := c.CreateToken(ctxT(t), client.TokenRequest{Role: wire.RoleOperator})
	if err != nil || tok.Accessor != "acc" || n.Load() != 2 {
		t.Fatalf("CreateToken past a dead endpoint and a 503: %+v %v after %d requests; want the token after 2", tok, err, n.Load())
	}
}

// signalLog is a slog handler that closes ch at the first record whose
// message contains what: a test's hook into the client's progress.
type signalLog struct {
	what string
	once *sync.Once
	ch   chan struct{}
}

func (h signalLog) Enabled(context.Context, slog.Level) bool { return true }
func (h signalLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.what) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalLog) WithGroup(string) slog.Handler      { return h }

// TestCallerGivesUpDuringBackoff: the caller's context ends while the
// client waits to repeat a mutation whose answer was lost: its outcome is
// unknown; a read's is not.
func TestCallerGivesUpDuringBackoff(t *testing.T) {
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { hangUp(t, w, r) })
	for _, mutation := range []bool{true, false} {
		retrying := make(chan struct{})
		c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: time.Hour,
			DisableDiscovery: true, Logger: slog.New(signalLog{what: "retrying", once: &sync.Once{}, ch: retrying})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctxT(t))
		go func() {
			<-retrying // the client is about to wait its backoff
			cancel()
		}()
		if mutation {
			_, err = c.PutJob(ctx, "j", wire.JobConfig{})
		} else {
			_, err = c.Job(ctx, "j")
		}
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("mutation %v: %v does not say the context was cancelled", mutation, err)
		}
		if errors.Is(err, client.ErrOutcomeUnknown) != mutation || errors.Is(err, client.ErrUnavailable) {
			t.Errorf("mutation %v, cancelled in the backoff after a lost answer: %v; want outcome unknown for a mutation only", mutation, err)
		}
	}
}

// TestNoTokenNoAuthorization: a client without a token sends no
// Authorization header; one with a token sends it as a bearer token.
func TestNoTokenNoAuthorization(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, strings.Join(r.Header.Values("Authorization"), "|"))
		mu.Unlock()
		answer(w, http.StatusOK, wire.Job{ID: "j"})
	})
	for _, token := range []string{"", "mst_secret"} {
		c, err := client.New(client.Config{Endpoints: []string{srv.URL}, Token: token, DisableDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Job(ctxT(t), "j"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "" || got[1] != "Bearer mst_secret" {
		t.Fatalf("Authorization headers %q, want none, then the bearer token", got)
	}
}
