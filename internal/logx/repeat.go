// Package logx holds slog handlers the binary puts in front of its log
// output.
package logx

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Repeats is a slog.Handler that logs a warning (or error) once per window
// for each kind of message and counts the repeats it drops; when the window
// ends it logs one "N similar messages suppressed" record for them. A
// connection flood that makes the HTTP server report a TLS handshake
// error per connection, or a client refused a thousand times a second,
// fills the log with one line and a count, not with megabytes.
//
// The kind of a message is its text with every run of digits made one
// '#' (so "TLS handshake error from 10.0.0.7:51234: EOF" is one kind
// whatever the client's address), plus the logger's own attributes (its
// component) and the record's "code" attribute, if any. Records below
// slog.LevelWarn always pass: the access and audit logs are never sampled.
type Repeats struct {
	next   slog.Handler
	prefix string // the attributes and groups added with WithAttrs / WithGroup
	st     *repeatState
}

type repeatState struct {
	window time.Duration
	now    func() time.Time
	mu     sync.Mutex
	kinds  map[string]*repeatKind
}

type repeatKind struct {
	until      time.Time
	suppressed int
	first      slog.Record
	handler    slog.Handler
	timer      *time.Timer
}

// NewRepeats wraps next; window 0 returns next itself.
func NewRepeats(next slog.Handler, window time.Duration) slog.Handler {
	if window <= 0 {
		return next
	}
	return &Repeats{next: next, st: &repeatState{window: window, now: time.Now, kinds: map[string]*repeatKind{}}}
}

// Enabled reports whether next handles level.
func (h *Repeats) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// WithAttrs returns a handler whose records are kinds of their own.
func (h *Repeats) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		b.WriteString(a.String())
		b.WriteByte(' ')
	}
	return &Repeats{next: h.next.WithAttrs(as), prefix: b.String(), st: h.st}
}

// WithGroup returns a handler for the group.
func (h *Repeats) WithGroup(name string) slog.Handler {
	return &Repeats{next: h.next.WithGroup(name), prefix: h.prefix + name + ".", st: h.st}
}

// Handle logs r, or counts it when its kind was logged within the window.
func (h *Repeats) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	key := h.prefix + "|" + kindOf(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "code" {
			key += "|" + a.Value.String()
		}
		return true
	})
	st := h.st
	now := st.now()
	st.mu.Lock()
	k := st.kinds[key]
	if k != nil && now.Before(k.until) {
		k.suppressed++
		if k.timer == nil {
			k.timer = time.AfterFunc(k.until.Sub(now), func() { st.flush(key, k) })
		}
		st.mu.Unlock()
		return nil
	}
	if k != nil {
		// The window ended and the timer has not reported it yet.
		st.reportLocked(key, k)
	}
	st.kinds[key] = &repeatKind{until: now.Add(st.window), first: r.Clone(), handler: h.next}
	st.mu.Unlock()
	return h.next.Handle(ctx, r)
}

// flush reports what k suppressed, when k is still the kind's window.
func (st *repeatState) flush(key string, k *repeatKind) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.kinds[key] == k {
		st.reportLocked(key, k)
		delete(st.kinds, key)
	}
}

func (st *repeatState) reportLocked(_ string, k *repeatKind) {
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	if k.suppressed == 0 {
		return
	}
	r := slog.NewRecord(st.now(), k.first.Level, strconv.Itoa(k.suppressed)+" similar messages suppressed", 0)
	r.AddAttrs(slog.Int("suppressed", k.suppressed), slog.String("message", k.first.Message), slog.Duration("window", st.window))
	k.suppressed = 0
	_ = k.handler.Handle(context.Background(), r)
}

// Flush reports every count not reported yet (at shutdown).
func (h *Repeats) Flush() {
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for key, k := range st.kinds {
		st.reportLocked(key, k)
		delete(st.kinds, key)
	}
}

// kindOf is msg with every run of digits replaced by one '#'.
func kindOf(msg string) string {
	var b strings.Builder
	digits := false
	for _, c := range msg {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
}
