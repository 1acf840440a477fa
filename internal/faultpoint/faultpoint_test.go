package faultpoint

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestActionsThroughTheControlAPI(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	c := &Client{Addr: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	name := "test.pause"

	// Unarmed: hits are counted, nothing happens.
	Hit(name, "a")
	st, err := c.Get(ctx, name)
	if err != nil || st.Hits != 1 || st.Action != Off || st.LastDetail != "a" {
		t.Fatalf("state %+v %v", st, err)
	}

	// Pause: the hit blocks until released.
	if _, err := c.Set(ctx, name, Arm{Action: Pause, Count: 1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		Hit(name, "b")
		close(done)
	}()
	st, err = c.Wait(ctx, name, 2, 1, 5*time.Second)
	if err != nil || st.Paused != 1 {
		t.Fatalf("wait for pause: %+v %v", st, err)
	}
	select {
	case <-done:
		t.Fatal("hit returned while paused")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := c.Release(ctx, name); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Count 1: the point disarmed itself.
	Hit(name, "c")
	if st, _ := c.Get(ctx, name); st.Action != Off || st.Hits != 3 || st.Paused != 0 {
		t.Fatalf("after release: %+v", st)
	}

	// Wait times out with ErrWaitTimeout.
	if _, err := c.Wait(ctx, name, 100, 0, 50*time.Millisecond); err != ErrWaitTimeout {
		t.Fatalf("wait: %v", err)
	}
}

func TestCrashSkipAndEnv(t *testing.T) {
	var code int
	exit = func(c int) { code = c }
	defer func() { exit = os.Exit }()
	env := map[string]string{EnvPoints: "test.crash=crash, test.delay=delay=1ms"}
	if err := ConfigureFromEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	Hit("test.crash", "keys")
	if code != CrashExitCode {
		t.Fatalf("exit code %d", code)
	}
	Set("test.crash", Arm{Action: Crash, Skip: 2})
	code = 0
	Hit("test.crash", "")
	Hit("test.crash", "")
	if code != 0 {
		t.Fatal("crashed on a skipped hit")
	}
	Hit("test.crash", "")
	if code != CrashExitCode {
		t.Fatal("did not crash after the skipped hits")
	}
	start := time.Now()
	Hit("test.delay", "")
	if time.Since(start) < time.Millisecond {
		t.Fatal("delay did not delay")
	}
	for _, bad := range []string{"x", "x=boom", "x=crash=1", "x=delay=forever"} {
		env[EnvPoints] = bad
		if err := ConfigureFromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
