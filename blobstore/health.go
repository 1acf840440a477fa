package blobstore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Health follows the outcome of a store's calls: feed it every call as an
// Observer (Observe), read it with Snapshot. A call is a success when the
// object store answered it, a missing object included; it is a failure
// when the store could not be reached or refused the request (timeouts,
// refused connections, 403s, 5xx answers). Calls that never reach the
// store (an invalid key or range, a body of the wrong size, a presign) and
// calls whose caller gave up (context.Canceled) change nothing.
type Health struct {
	mu   sync.Mutex
	now  func() time.Time
	snap HealthSnapshot
}

// HealthSnapshot is what Health knows at one moment.
type HealthSnapshot struct {
	// Calls counts the calls that reached the store or failed to, Failures
	// those that failed.
	Calls    uint64
	Failures uint64
	// ConsecutiveFailures counts the failures since the last success.
	ConsecutiveFailures uint64
	// LastSuccess is when the last successful call ended, LastSuccessOp
	// its operation (zero: none yet).
	LastSuccess   time.Time
	LastSuccessOp string
	// LastError is the last failure's error, LastErrorAt when it ended,
	// LastErrorOp its operation (empty: none yet).
	LastError   string
	LastErrorAt time.Time
	LastErrorOp string
}

// NewHealth returns a Health that has seen no call.
func NewHealth() *Health { return &Health{now: time.Now} }

// Observe records one call; its signature is that of an Observer.
func (h *Health) Observe(op string, _ int, err error, _ time.Duration) {
	if op == OpPresign || !reachesStore(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.snap.Calls++
	if err == nil || errors.Is(err, ErrNotFound) {
		h.snap.ConsecutiveFailures = 0
		h.snap.LastSuccess, h.snap.LastSuccessOp = now, op
		return
	}
	h.snap.Failures++
	h.snap.ConsecutiveFailures++
	h.snap.LastError, h.snap.LastErrorAt, h.snap.LastErrorOp = err.Error(), now, op
}

// reachesStore reports whether a call that ended with err says anything
// about the object store.
func reachesStore(err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidRange), errors.Is(err, ErrSizeMismatch), errors.Is(err, ErrPresignUnsupported):
		return false
	case errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// Snapshot returns what h knows now.
func (h *Health) Snapshot() HealthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap
}

// Observers returns an Observer that calls each of obs (nil ones skipped)
// in turn.
func Observers(obs ...Observer) Observer {
	return func(op string, n int, err error, d time.Duration) {
		for _, o := range obs {
			if o != nil {
				o(op, n, err, d)
			}
		}
	}
}
