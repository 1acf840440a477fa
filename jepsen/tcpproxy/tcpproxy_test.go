package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string { return recordingServer(t, nil) }

// proxied starts a proxy in front of target and dials it.
func proxied(t *testing.T, target string) (*Proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != msg+"\n" {
		t.Fatalf("echo %q, want %q", line, msg)
	}
	return time.Since(start), nil
}

func TestForwardDelayBlackholeReset(t *testing.T) {
	p, c, r := proxied(t, echoServer(t))
	if _, err := roundTrip(t, c, r, "plain"); err != nil {
		t.Fatal(err)
	}

	// Delay applies in both directions of an open connection.
	p.SetSource("127.0.0.1", Link{Delay: 100 * time.Millisecond})
	if d, err := roundTrip(t, c, r, "slow"); err != nil || d < 200*time.Millisecond {
		t.Fatalf("delayed round trip took %s (%v), want >= 200ms", d, err)
	}
	// Another source's setting does not apply.
	p.Clear()
	p.SetSource("10.0.0.9", Link{Delay: time.Second})
	if d, err := roundTrip(t, c, r, "fast"); err != nil || d > 500*time.Millisecond {
		t.Fatalf("round trip took %s (%v)", d, err)
	}

	// A blackhole holds data until lifted; then it arrives.
	p.SetDefault(Link{Blackhole: true})
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("data passed a blackhole")
	}
	_ = c.SetReadDeadline(time.Time{})
	p.SetDefault(Link{})
	// The read above timed out; a new reader picks up the held line.
	r = bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("after the blackhole: %q %v", line, err)
	}

	// ResetProb 1 resets the connection at the next chunk.
	p.SetDefault(Link{ResetProb: 1})
	if _, err := roundTrip(t, c, r, "boom"); err == nil {
		t.Fatal("connection survived ResetProb 1")
	}
	if st := p.Stats(); st.Resets == 0 {
		t.Fatalf("stats %+v", st)
	}

	// RefuseProb 1 closes new connections at once.
	p.SetDefault(Link{RefuseProb: 1})
	// The proxy closes the connection as soon as it accepts it: the dial
	// itself may see the reset, or the first round trip fails.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c2.Close()
		if _, err := roundTrip(t, c2, bufio.NewReader(c2), "refused"); err == nil {
			t.Fatal("refused connection answered")
		}
	}
	p.Clear()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3), "healed"); err != nil {
		t.Fatal(err)
	}
}

// recordingServer echoes every line and, unless got is nil, sends what it
// received on got.
func recordingServer(t *testing.T, got chan<- string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if got != nil {
						got <- line
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A hold of FromTarget lets the source's data through and keeps the
// target's answers, on open and new connections, apart from the link
// faults; Release delivers them.
func TestHoldOneDirection(t *testing.T) {
	got := make(chan string, 16)
	p, c, r := proxied(t, recordingServer(t, got))
	if _, err := roundTrip(t, c, r, "before"); err != nil {
		t.Fatal(err)
	}
	<-got

	p.Hold("10.0.0.9", FromTarget) // another source: no effect
	if _, err := roundTrip(t, c, r, "other"); err != nil {
		t.Fatal(err)
	}
	<-got

	p.Hold("127.0.0.1", FromTarget)
	p.Clear() // clears link faults only
	if p.Held("127.0.0.1") != FromTarget {
		t.Fatalf("held %v after Clear", p.Held("127.0.0.1"))
	}
	if _, err := c.Write([]byte("one-way\n")); err != nil {
		t.Fatal(err)
	}
	if line := <-got; line != "one-way\n" {
		t.Fatalf("target got %q", line)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the target's answer %q passed a hold of FromTarget", line)
	}
	_ = c.SetReadDeadline(time.Time{})

	p.Release()
	r = bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "one-way\n" {
		t.Fatalf("after the release: %q %v", line, err)
	}
}
