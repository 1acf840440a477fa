package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
)

// TestPutObjectCallerGivesUpDuringBackoff: an upload whose answer was lost
// may have landed; a caller who gives up while PutObject waits to send it
// again is told the outcome is unknown, as Client.do and PutObject's own
// context check tell it, never a bare context error.
func TestPutObjectCallerGivesUpDuringBackoff(t *testing.T) {
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { hangUp(t, w, r) })
	retrying := make(chan struct{})
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, BackoffBase: time.Hour, BackoffMax: time.Hour,
		DisableDiscovery: true, Logger: slog.New(signalLog{what: "retrying upload", once: &sync.Once{}, ch: retrying})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go func() { <-retrying; cancel() }()
	data := []byte("blob bytes")
	err = c.PutObject(ctx, client.UploadSlot{Key: "j/t/k", URL: srv.URL + "/b/j/t/k"}, bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("upload whose answer was lost, cancelled in the backoff: %v; want outcome unknown (context cancelled)", err)
	}
}

// onlyReader hides every method of its reader but Read: PutObject cannot
// rewind it to send it again.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestPutObjectThatCannotResendIsUnknown: an upload whose answer was lost
// and whose body cannot be sent again (read, and no Seek) ends with the
// outcome unknown, not the bare transport error, and is not sent twice.
func TestPutObjectThatCannotResendIsUnknown(t *testing.T) {
	var puts atomic.Int32
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		puts.Add(1)
		hangUp(t, w, r)
	})
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("blob bytes")
	err = c.PutObject(ctxT(t), client.UploadSlot{Key: "j/t/k", URL: srv.URL + "/b/j/t/k"}, onlyReader{bytes.NewReader(data)}, int64(len(data)))
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("upload whose answer was lost and whose body cannot be sent again: %v; want outcome unknown", err)
	}
	if n := puts.Load(); n != 1 {
		t.Fatalf("the upload was sent %d times, want 1", n)
	}
}

// TestPutObjectRefusedAfterALostAnswerIsUnknown: an upload whose first
// answer was lost (the object may exist) and whose repeat is refused (an
// expired URL's 403) has an unknown outcome; a refusal of a malformed
// request stays definite (it could not have landed the first time either).
func TestPutObjectRefusedAfterALostAnswerIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		body        string
		wantUnknown bool
	}{
		{"expired URL", http.StatusForbidden, `<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`, true},
		{"malformed", http.StatusBadRequest, `{"error":{"code":"invalid_argument","message":"bad key"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var puts atomic.Int32
			srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
				if puts.Add(1) == 1 {
					hangUp(t, w, r)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, DisableDiscovery: true})
			if err != nil {
				t.Fatal(err)
			}
			data := []byte("blob bytes")
			err = c.PutObject(ctxT(t), client.UploadSlot{Key: "j/t/k", URL: srv.URL + "/b/j/t/k"}, bytes.NewReader(data), int64(len(data)))
			if n := puts.Load(); n != 2 {
				t.Fatalf("%d PUTs, want 2", n)
			}
			if got := errors.Is(err, client.ErrOutcomeUnknown); got != tc.wantUnknown || err == nil {
				t.Fatalf("refused after a lost answer: %v; outcome unknown %v, want %v", err, got, tc.wantUnknown)
			}
		})
	}
}

// TestPutObjectGivenUpBeforeSendingUploadsNothing: a caller whose context
// is done before the upload starts sends nothing and gets the context's
// error with a known outcome.
func TestPutObjectGivenUpBeforeSendingUploadsNothing(t *testing.T) {
	var puts atomic.Int32
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { puts.Add(1) })
	c, err := client.New(client.Config{Endpoints: []string{srv.URL}, MaxAttempts: 3, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	data := []byte("blob bytes")
	err = c.PutObject(ctx, client.UploadSlot{Key: "j/t/k", URL: srv.URL + "/b/j/t/k"}, bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrOutcomeUnknown) || puts.Load() != 0 {
		t.Fatalf("upload given up before sending: %v, %d PUTs; want the context's error, outcome known, none sent", err, puts.Load())
	}
}
