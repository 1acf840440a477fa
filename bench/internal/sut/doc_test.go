package sut

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	n := 0
	if err := WaitFor(context.Background(), time.Millisecond, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("WaitFor: %v after %d calls, want nil after 3", err, n)
	}
	boom := errors.New("boom")
	if err := WaitFor(context.Background(), time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("WaitFor: %v, want the condition's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitFor(ctx, time.Millisecond, func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitFor on a done context: %v", err)
	}
}
