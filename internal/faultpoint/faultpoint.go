// Package faultpoint is the fault-injection switchboard of metastore test
// builds: named points in the code (Hit) whose behaviour a test sets at run
// time, from outside the process, to pause or crash the process exactly
// there. It lives under internal/ because the core packages (fsm, gc, node)
// carry the points; the consistency suite (jepsen/) sets them through
// Client.
//
// # Production builds pay nothing
//
// Only files built with the tag faultinject import this package. The
// packages that carry points (gc, node) declare, in an untagged-off file
// (//go:build !faultinject),
//
//	const faultInject = false
//
// and guard every call with it (if faultInject { faultAfterMark(keys) }), so
// the compiler removes the call and the linker never sees this package: a
// default build contains none of its symbols (jepsen/cluster's
// TestDefaultBuildHasNoFaultPoints checks the binary).
//
// # Points
//
//	gc.after-mark          in the GC leader task, after the CmdBlobsDeleting
//	                       mark committed and before the object-store delete
//	                       (detail: the marked keys)
//	node.snapshot-persist  inside raft's snapshot persist, after the FSM
//	                       wrote the snapshot and before sink.Close makes it
//	                       durable and visible
//	fsm.restore-written    inside the state machine's restore (a snapshot
//	                       installed from the leader, restored at start or
//	                       from a backup): the restored file is written and
//	                       synced beside the current one, not yet renamed
//	                       over it (detail: the path)
//	fsm.restore-renamed    the restored file has been renamed over the
//	                       state machine's path and the directory synced;
//	                       the process still uses the old file
//
// # Actions
//
//	off          nothing happens (the default)
//	crash        write "faultpoint: crash at NAME ..." to standard error and
//	             os.Exit(137), the status of a SIGKILL
//	pause        block the calling goroutine until the action changes or
//	             Release is called
//	delay=DUR    sleep DUR, then go on
//
// A point can be armed for a number of hits (count, 0 means every hit) and
// to let the first skip hits pass untouched. Every hit is counted, armed or
// not.
//
// # Control
//
// In a faultinject build the package reads, at init,
//
//	FAULTPOINTS="name=action[,name=action...]"  actions armed from the start
//	FAULTPOINT_ADDR="host:port"                  serve the control API there
//
// The control API (served only when FAULTPOINT_ADDR is set):
//
//	GET  /debug/fault                  every point: action, hits, paused
//	GET  /debug/fault/{name}           one point
//	PUT  /debug/fault/{name}?action=crash|pause|off|delay&delay=1s&count=N&skip=N
//	POST /debug/fault/{name}/release   release the goroutines paused there
//	GET  /debug/fault/{name}/wait?hits=N&paused=N&timeout=10s
//	                                   block until the point has been hit N
//	                                   times, or N goroutines wait there
//
// Client is the test side of that API.
package faultpoint

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names of the points compiled into the metastore's faultinject build.
const (
	// GCAfterMark is hit by the garbage collector between the Raft commit
	// of a deleting mark and the object-store delete of the marked keys.
	GCAfterMark = "gc.after-mark"
	// SnapshotPersist is hit inside raft's snapshot persist, after the
	// state machine wrote the snapshot and before the sink is closed.
	SnapshotPersist = "node.snapshot-persist"
	// RestoreWritten is hit inside the state machine's restore, after the
	// restored file is written and synced and before it is renamed over
	// the current one.
	RestoreWritten = "fsm.restore-written"
	// RestoreRenamed is hit after that rename (and the directory sync),
	// before the restored file is opened and swapped in.
	RestoreRenamed = "fsm.restore-renamed"
)

// Environment variables read at init by a faultinject build.
const (
	EnvPoints = "FAULTPOINTS"
	EnvAddr   = "FAULTPOINT_ADDR"
)

// CrashExitCode is the exit status of a crash action: the one a SIGKILL'd
// process reports to a shell.
const CrashExitCode = 137

// Action is what a point does when hit.
type Action string

// Actions.
const (
	Off   Action = "off"
	Crash Action = "crash"
	Pause Action = "pause"
	Delay Action = "delay"
)

// Arm is the setting of one point.
type Arm struct {
	Action Action        `json:"action"`
	Delay  time.Duration `json:"delay,omitempty"`
	// Count is how many hits the action applies to (0: all). After them
	// the point is off again.
	Count int `json:"count,omitempty"`
	// Skip lets this many hits pass before the action applies.
	Skip int `json:"skip,omitempty"`
}

// State is the view of one point the control API answers.
type State struct {
	Name string `json:"name"`
	Arm
	// Hits counts every hit since the process started.
	Hits int64 `json:"hits"`
	// Fired counts hits the action applied to since it was armed.
	Fired int `json:"fired"`
	// Paused is the number of goroutines waiting at the point now.
	Paused int `json:"paused"`
	// LastDetail is the detail of the latest hit.
	LastDetail string `json:"last_detail,omitempty"`
}

type point struct {
	arm     Arm
	hits    int64
	skipped int
	fired   int
	paused  int
	detail  string
	// release is closed to wake every paused goroutine.
	release chan struct{}
}

var reg = struct {
	mu     sync.Mutex
	points map[string]*point
	// changed is closed and replaced on every change, to wake waiters.
	changed chan struct{}
}{points: map[string]*point{}, changed: make(chan struct{})}

// exit is os.Exit, replaced by tests.
var exit = os.Exit

func get(name string) *point {
	p := reg.points[name]
	if p == nil {
		p = &point{arm: Arm{Action: Off}, release: make(chan struct{})}
		reg.points[name] = p
	}
	return p
}

func notifyLocked() {
	close(reg.changed)
	reg.changed = make(chan struct{})
}

// Hit is called by instrumented code at the point name. detail (for
// example the keys involved) is logged with a crash and shown by the
// control API.
func Hit(name string, detail string) {
	reg.mu.Lock()
	p := get(name)
	p.hits++
	p.detail = detail
	arm := p.arm
	apply := false
	if arm.Action != Off {
		if p.skipped < arm.Skip {
			p.skipped++
		} else {
			apply = true
			p.fired++
			if arm.Count > 0 && p.fired >= arm.Count {
				// The last hit the action applies to; a pause still
				// waits for a release below.
				p.arm = Arm{Action: Off}
			}
		}
	}
	hits := p.hits
	release := p.release
	if apply && arm.Action == Pause {
		p.paused++
	}
	notifyLocked()
	reg.mu.Unlock()
	if !apply {
		return
	}
	switch arm.Action {
	case Crash:
		fmt.Fprintf(os.Stderr, "faultpoint: crash at %s (hit %d) %s\n", name, hits, truncate(detail, 512))
		exit(CrashExitCode)
	case Delay:
		time.Sleep(arm.Delay)
	case Pause:
		fmt.Fprintf(os.Stderr, "faultpoint: paused at %s (hit %d) %s\n", name, hits, truncate(detail, 512))
		<-release
		reg.mu.Lock()
		p.paused--
		notifyLocked()
		reg.mu.Unlock()
		fmt.Fprintf(os.Stderr, "faultpoint: released at %s\n", name)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Set arms (or, with Off, disarms) a point. Changing the action of a point
// releases the goroutines paused there.
func Set(name string, a Arm) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	p := get(name)
	if a.Action == "" {
		a.Action = Off
	}
	p.arm = a
	p.skipped, p.fired = 0, 0
	close(p.release)
	p.release = make(chan struct{})
	notifyLocked()
}

// Release wakes the goroutines paused at name; the point stays armed.
func Release(name string) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	p := get(name)
	close(p.release)
	p.release = make(chan struct{})
	notifyLocked()
}

// Get returns the state of one point.
func Get(name string) State {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return stateLocked(name, get(name))
}

func stateLocked(name string, p *point) State {
	return State{Name: name, Arm: p.arm, Hits: p.hits, Fired: p.fired, Paused: p.paused, LastDetail: truncate(p.detail, 4096)}
}

// All returns the state of every point known so far, by name.
func All() []State {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var out []State
	for name, p := range reg.points {
		out = append(out, stateLocked(name, p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Wait blocks until cond holds for the point's state or timeout passes, and
// returns the last state seen and whether cond held.
func Wait(name string, timeout time.Duration, cond func(State) bool) (State, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		reg.mu.Lock()
		st := stateLocked(name, get(name))
		ch := reg.changed
		reg.mu.Unlock()
		if cond(st) {
			return st, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return st, false
		}
	}
}

// ParseArm parses "crash", "pause", "off" or "delay=1s".
func ParseArm(s string) (Arm, error) {
	action, arg, _ := strings.Cut(strings.TrimSpace(s), "=")
	switch Action(action) {
	case Off, Crash, Pause:
		if arg != "" {
			return Arm{}, fmt.Errorf("faultpoint: action %q takes no argument", action)
		}
		return Arm{Action: Action(action)}, nil
	case Delay:
		d, err := time.ParseDuration(arg)
		if err != nil {
			return Arm{}, fmt.Errorf("faultpoint: delay: %w", err)
		}
		return Arm{Action: Delay, Delay: d}, nil
	}
	return Arm{}, fmt.Errorf("faultpoint: unknown action %q (want off, crash, pause or delay=DUR)", action)
}

// ConfigureFromEnv arms the points listed in FAULTPOINTS and, when
// FAULTPOINT_ADDR is set, serves the control API there. A faultinject build
// calls it from an init function (see EnableFromEnv).
func ConfigureFromEnv(getenv func(string) string) error {
	if spec := strings.TrimSpace(getenv(EnvPoints)); spec != "" {
		for part := range strings.SplitSeq(spec, ",") {
			name, action, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || name == "" {
				return fmt.Errorf("faultpoint: %s: %q is not name=action", EnvPoints, part)
			}
			a, err := ParseArm(action)
			if err != nil {
				return err
			}
			Set(name, a)
		}
	}
	if addr := strings.TrimSpace(getenv(EnvAddr)); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("faultpoint: control API on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		fmt.Fprintf(os.Stderr, "faultpoint: control API on http://%s/debug/fault\n", ln.Addr())
	}
	return nil
}

var enableOnce sync.Once

// EnableFromEnv runs ConfigureFromEnv once per process with os.Getenv; a
// configuration error is fatal (exit status 2), because a test that set it
// expects its faults. The faultinject files of gc and node call it from
// init, so the control API runs whichever of them is linked.
func EnableFromEnv() {
	enableOnce.Do(func() {
		if err := ConfigureFromEnv(os.Getenv); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	})
}

// Handler serves the control API under /debug/fault.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/fault", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"points": All()})
	})
	mux.HandleFunc("GET /debug/fault/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Get(r.PathValue("name")))
	})
	mux.HandleFunc("PUT /debug/fault/{name}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		spec := q.Get("action")
		if d := q.Get("delay"); d != "" && spec == string(Delay) {
			spec += "=" + d
		}
		a, err := ParseArm(spec)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		for _, f := range []struct {
			name string
			dst  *int
		}{{"count", &a.Count}, {"skip", &a.Skip}} {
			if v := q.Get(f.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					writeJSON(w, http.StatusBadRequest, map[string]string{"error": f.name + " must be a non-negative integer"})
					return
				}
				*f.dst = n
			}
		}
		name := r.PathValue("name")
		Set(name, a)
		writeJSON(w, http.StatusOK, Get(name))
	})
	mux.HandleFunc("POST /debug/fault/{name}/release", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		Release(name)
		writeJSON(w, http.StatusOK, Get(name))
	})
	mux.HandleFunc("GET /debug/fault/{name}/wait", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		timeout := 10 * time.Second
		if v := q.Get("timeout"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: " + err.Error()})
				return
			}
			timeout = d
		}
		hits, _ := strconv.ParseInt(q.Get("hits"), 10, 64)
		paused, _ := strconv.Atoi(q.Get("paused"))
		st, ok := Wait(r.PathValue("name"), timeout, func(s State) bool {
			return s.Hits >= hits && s.Paused >= paused
		})
		status := http.StatusOK
		if !ok {
			status = http.StatusRequestTimeout
		}
		writeJSON(w, status, st)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
