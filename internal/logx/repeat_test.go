package logx

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// wrote, when set, is signalled after every write.
	wrote chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		defer func() {
			select {
			case l.wrote <- struct{}{}:
			default:
			}
		}()
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestRepeatsFoldsAFlood: a thousand handshake errors from a thousand
// clients are one line, then one count when the window has passed; other
// kinds, other components and records below warn are not folded.
func TestRepeatsFoldsAFlood(t *testing.T) {
	var out lockedBuffer
	now := time.Unix(1_000_000, 0)
	h := NewRepeats(slog.NewTextHandler(&out, nil), time.Hour).(*Repeats)
	h.st.now = func() time.Time { return now }
	log := slog.New(h)
	httpLog := log.With("component", "http")
	for i := range 1000 {
		httpLog.Warn(fmt.Sprintf("http: TLS handshake error from 10.0.%d.%d:%d: EOF", i/250, i%250, 40000+i))
		log.Info("request", "n", i)
	}
	log.With("component", "raft").Warn("http: TLS handshake error from 10.9.9.9:1: EOF")
	log.Warn("request refused", "code", "host_not_allowed")
	log.Warn("request refused", "code", "cross_origin_refused")
	log.Warn("request refused", "code", "cross_origin_refused")

	count := func(sub string) int {
		n := 0
		for _, l := range out.lines() {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	if got := count("TLS handshake error"); got != 2 {
		t.Fatalf("%d handshake lines, want 2 (one per component):\n%s", got, strings.Join(out.lines(), "\n"))
	}
	if got := count("msg=request "); got != 1000 {
		t.Fatalf("%d info lines, want 1000", got)
	}
	if got := count("request refused"); got != 2 {
		t.Fatalf("%d refusal lines, want 2 (one per code)", got)
	}

	// The window ends: the next one reports the count first.
	now = now.Add(time.Hour + time.Second)
	httpLog.Warn("http: TLS handshake error from 10.1.1.1:2: EOF")
	if got := count("999 similar messages suppressed"); got != 1 {
		t.Fatalf("no count of the 999 suppressed:\n%s", strings.Join(out.lines()[len(out.lines())-3:], "\n"))
	}
	if got := count(`msg="http: TLS handshake error`); got != 3 {
		t.Fatalf("%d handshake lines after the window, want 3", got)
	}
	// Flush reports what is left (one refusal suppressed).
	h.Flush()
	if got := count("1 similar messages suppressed"); got != 1 {
		t.Fatalf("Flush did not report the suppressed refusal:\n%s", strings.Join(out.lines(), "\n"))
	}
}

// TestRepeatsReportsWhenTheFloodStops: the count is logged when the
// window ends even if no message of the kind comes after it.
func TestRepeatsReportsWhenTheFloodStops(t *testing.T) {
	out := lockedBuffer{wrote: make(chan struct{}, 1)}
	log := slog.New(NewRepeats(slog.NewTextHandler(&out, nil), 50*time.Millisecond))
	for range 10 {
		log.Warn("refused")
	}
	timeout := time.After(10 * time.Second)
	for !strings.Contains(strings.Join(out.lines(), "\n"), "9 similar messages suppressed") {
		select {
		case <-out.wrote:
		case <-timeout:
			t.Fatalf("no count reported:\n%s", strings.Join(out.lines(), "\n"))
		}
	}
}
