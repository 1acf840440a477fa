package leader_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/leader"
	"github.com/metastore/metastore/wire"
)

// Tests written by a mutation audit of the leader tasks.

// hooked wraps the test proposer: it counts the tasks' calls to Now and
// Propose by command type, can fail the first proposals of a type (as a
// member that lost leadership does), and can run a command of its own
// just before forwarding one of a type (another member's or a client's
// command that won the race).
type hooked struct {
	*proposer
	mu     sync.Mutex
	nows   int
	nowCh  chan struct{}
	calls  map[fsm.CommandType]int
	failN  map[fsm.CommandType]int
	before map[fsm.CommandType]func()
	// hang makes proposals of a type wait for their context, as a
	// proposal does that is never committed (the term ended); entered is
	// signalled when one starts waiting.
	hang    map[fsm.CommandType]bool
	entered chan struct{}
}

func newHooked(t *testing.T) *hooked {
	return &hooked{proposer: newProposer(t), nowCh: make(chan struct{}, 1),
		calls: map[fsm.CommandType]int{}, failN: map[fsm.CommandType]int{}, before: map[fsm.CommandType]func(){},
		hang: map[fsm.CommandType]bool{}, entered: make(chan struct{}, 1)}
}

var errLostLeadership = errors.New("not the leader (test)")

func (h *hooked) Now() time.Time {
	h.mu.Lock()
	h.nows++
	h.mu.Unlock()
	select {
	case h.nowCh <- struct{}{}:
	default:
	}
	return h.proposer.Now()
}

func (h *hooked) Propose(ctx context.Context, typ fsm.CommandType, payload any) (any, uint64, error) {
	h.mu.Lock()
	h.calls[typ]++
	fail := h.failN[typ] > 0
	if fail {
		h.failN[typ]--
	}
	before := h.before[typ]
	delete(h.before, typ)
	hang := h.hang[typ]
	h.mu.Unlock()
	if hang {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, 0, ctx.Err()
	}
	if fail {
		return nil, 0, errLostLeadership
	}
	if before != nil {
		before()
	}
	return h.proposer.Propose(ctx, typ, payload)
}

func (h *hooked) count(typ fsm.CommandType) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[typ]
}

func (h *hooked) nowCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nows
}

// waitNows waits until the task has read its clock n times in all.
func (h *hooked) waitNows(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for h.nowCalls() < n {
		select {
		case <-h.nowCh:
		case <-deadline:
			t.Fatalf("the task read its clock %d times, want %d", h.nowCalls(), n)
		}
	}
}

// waitState waits until the epoch is in state want.
func (p *proposer) waitState(t *testing.T, job string, n uint64, want wire.EpochState) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for p.epochState(job, n) != want {
		wait, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
		p.f.WaitChange(wait)
		stop()
		select {
		case <-deadline:
			t.Fatalf("epoch %s/%d is %s, want %s", job, n, p.epochState(job, n), want)
		default:
		}
	}
}

func (p *proposer) pendingEpoch(t *testing.T, job string, timeout time.Duration) {
	t.Helper()
	caps, err := wire.ParseCaps([]string{"state"})
	if err != nil {
		t.Fatal(err)
	}
	p.must(fsm.CmdJobPut, fsm.JobPut{Job: job, Config: wire.JobConfig{Retained: 1, AckTimeout: fsm.Duration(timeout), History: 10}})
	p.must(fsm.CmdAttemptStart, fsm.AttemptStart{Job: job, AttemptID: "a1", Tasks: []wire.Task{{ID: "t1", Caps: caps}}})
	p.must(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: 1, Epoch: 1})
}

func runTask(task func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		task(ctx)
	}()
	return func() { cancel(); <-done }
}

// TestEpochTimeoutsLaterDeadline: while no deadline has passed the task
// proposes nothing, and it keeps watching: an epoch whose deadline passes
// after the task started is aborted.
func TestEpochTimeoutsLaterDeadline(t *testing.T) {
	h := newHooked(t)
	h.pendingEpoch(t, "j", time.Minute)
	stop := runTask(leader.EpochTimeouts(h, h.f, nil))
	defer stop()
	// The second clock read starts the second round: the first, with
	// nothing due, is over.
	h.waitNows(t, 2)
	if n := h.count(fsm.CmdEpochsTimeout); n != 0 {
		t.Fatalf("with nothing due the task proposed %d timeouts", n)
	}
	if got := h.epochState("j", 1); got != wire.EpochPending {
		t.Fatalf("epoch within its timeout is %s", got)
	}
	h.advance(2 * time.Minute)
	h.waitState(t, "j", 1, wire.EpochAborted)
}

// TestEpochTimeoutsCountsOnlyAborted: the counter counts the epochs the
// state machine aborted, not those the task asked it to: an epoch aborted
// by a client between the task's read and its proposal is not counted.
func TestEpochTimeoutsCountsOnlyAborted(t *testing.T) {
	h := newHooked(t)
	h.pendingEpoch(t, "a", time.Minute)
	h.pendingEpoch(t, "b", time.Minute)
	h.advance(2 * time.Minute)
	h.before[fsm.CmdEpochsTimeout] = func() {
		h.must(fsm.CmdEpochAbort, fsm.EpochAbort{Job: "b", Generation: 1, Epoch: 1, Reason: "client"})
	}
	before := counterValue(t, leader.EpochsTimedOut)
	stop := runTask(leader.EpochTimeouts(h, h.f, nil))
	h.waitState(t, "a", 1, wire.EpochAborted)
	stop()
	if got := h.epochState("b", 1); got != wire.EpochAborted {
		t.Fatalf("b is %s", got)
	}
	if got := counterValue(t, leader.EpochsTimedOut) - before; got != 1 {
		t.Fatalf("counted %v timed-out epochs, want 1 (b was aborted by the client)", got)
	}
}

// TestAuthBootstrapWithoutToken: with no bootstrap token the task sets the
// signing key and creates no token (not one for the empty secret).
func TestAuthBootstrapWithoutToken(t *testing.T) {
	h := newHooked(t)
	leader.AuthBootstrap(h, h.f, nil, "")(context.Background())
	if key, err := h.f.URLKey(); err != nil || len(key) != fsm.URLKeyLen {
		t.Fatalf("signing key %x, %v", key, err)
	}
	toks, _, err := h.f.Tokens()
	if err != nil || len(toks) != 0 || h.count(fsm.CmdTokenCreate) != 0 {
		t.Fatalf("tokens %+v (%d proposed), %v; want none", toks, h.count(fsm.CmdTokenCreate), err)
	}
}

// TestKeysAreRandom: the signing keys are random: two clusters get
// different ones, and no key is all zeros.
func TestKeysAreRandom(t *testing.T) {
	var urlKeys, slotKeys [][]byte
	for i := 0; i < 2; i++ {
		p := newProposer(t)
		leader.AuthBootstrap(p, p.f, nil, "")(context.Background())
		leader.SlotKey(p, p.f, nil)(context.Background())
		u, err := p.f.URLKey()
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.f.SlotKey()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range [][]byte{u, s} {
			if len(k) == 0 || bytes.Count(k, []byte{0}) == len(k) {
				t.Fatalf("key %x", k)
			}
		}
		urlKeys, slotKeys = append(urlKeys, u), append(slotKeys, s)
	}
	if bytes.Equal(urlKeys[0], urlKeys[1]) || bytes.Equal(slotKeys[0], slotKeys[1]) || bytes.Equal(urlKeys[0], slotKeys[0]) {
		t.Fatalf("keys repeat: url %x, slot %x", urlKeys, slotKeys)
	}
}

// syncBuffer is a log destination the tasks may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretsNeverLogged: the tasks log that they set the keys and created
// the bootstrap token, never the keys or the secret, in any encoding.
func TestSecretsNeverLogged(t *testing.T) {
	p := newProposer(t)
	var out syncBuffer
	logger := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const secret = "bootstrap-secret-1234"
	leader.AuthBootstrap(p, p.f, logger, secret)(context.Background())
	leader.SlotKey(p, p.f, logger)(context.Background())
	logged := out.String()
	for _, msg := range []string{"object-URL signing key set", "bootstrap operator token created", "upload-slot signing key set"} {
		if !bytes.Contains([]byte(logged), []byte(msg)) {
			t.Fatalf("no %q in the log:\n%s", msg, logged)
		}
	}
	u, _ := p.f.URLKey()
	s, _ := p.f.SlotKey()
	forbidden := []string{secret, wire.TokenHash(secret)}
	for _, k := range [][]byte{u, s} {
		forbidden = append(forbidden, hex.EncodeToString(k), base64.StdEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k), string(k))
	}
	for _, f := range forbidden {
		if bytes.Contains([]byte(logged), []byte(f)) {
			t.Fatalf("the log holds a secret (%q):\n%s", f, logged)
		}
	}
}

// TestTasksRetryFailedProposals: a proposal that fails (the member is not,
// or no longer, the leader) is retried until it succeeds, whichever of the
// tasks' commands failed.
func TestTasksRetryFailedProposals(t *testing.T) {
	for _, failing := range []fsm.CommandType{fsm.CmdURLKeyInit, fsm.CmdTokenCreate, fsm.CmdSlotKeyInit} {
		h := newHooked(t)
		h.failN[failing] = 1
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		leader.AuthBootstrap(h, h.f, nil, "boot-secret")(ctx)
		leader.SlotKey(h, h.f, nil)(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s failing: the tasks did not finish", failing)
		}
		cancel()
		if key, _ := h.f.URLKey(); len(key) != fsm.URLKeyLen {
			t.Errorf("%s failing: signing key %x", failing, key)
		}
		if key, _ := h.f.SlotKey(); len(key) != fsm.SlotKeyLen {
			t.Errorf("%s failing: slot key %x", failing, key)
		}
		if tok, err := h.f.TokenByHash(wire.TokenHash("boot-secret")); err != nil || tok == nil || tok.Role != wire.RoleOperator {
			t.Errorf("%s failing: bootstrap token %+v, %v", failing, tok, err)
		}
		if n := h.count(failing); n != 2 {
			t.Errorf("%s proposed %d times, want 2 (one failure, one success)", failing, n)
		}
	}
}

// TestAuthBootstrapLosesRace: when another member's bootstrap token is
// created between the task's read of the tokens and its proposal, the
// task's command is conditional and creates nothing: the cluster keeps one
// bootstrap token.
func TestAuthBootstrapLosesRace(t *testing.T) {
	h := newHooked(t)
	h.before[fsm.CmdTokenCreate] = func() {
		h.must(fsm.CmdTokenCreate, &fsm.TokenCreate{Accessor: fsm.NewAccessor(), Hash: wire.TokenHash("other-member"),
			Role: wire.RoleOperator, Description: "bootstrap", Bootstrap: true})
	}
	leader.AuthBootstrap(h, h.f, nil, "boot-secret")(context.Background())
	toks, _, err := h.f.Tokens()
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens %+v, %v; want only the other member's", toks, err)
	}
	if tok, _ := h.f.TokenByHash(wire.TokenHash("boot-secret")); tok != nil {
		t.Fatalf("the losing bootstrap created %+v", tok)
	}
}

// TestEpochTimeoutsBatches: more expired epochs than one command carries
// (256) are aborted in as few commands as fit them, each counted once.
func TestEpochTimeoutsBatches(t *testing.T) {
	h := newHooked(t)
	caps, err := wire.ParseCaps([]string{"state"})
	if err != nil {
		t.Fatal(err)
	}
	const jobs, perJob = 5, 60 // 300 epochs: two commands
	for j := 0; j < jobs; j++ {
		job := string(rune('a' + j))
		h.must(fsm.CmdJobPut, fsm.JobPut{Job: job, Config: wire.JobConfig{Retained: 1, AckTimeout: fsm.Duration(time.Minute), History: 1000}})
		h.must(fsm.CmdAttemptStart, fsm.AttemptStart{Job: job, AttemptID: "a1", Tasks: []wire.Task{{ID: "t1", Caps: caps}}})
		for e := uint64(1); e <= perJob; e++ {
			h.must(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: 1, Epoch: e})
		}
	}
	h.advance(2 * time.Minute)
	before := counterValue(t, leader.EpochsTimedOut)
	stop := runTask(leader.EpochTimeouts(h, h.f, nil))
	for j := 0; j < jobs; j++ {
		for e := uint64(1); e <= perJob; e++ {
			h.waitState(t, string(rune('a'+j)), e, wire.EpochAborted)
		}
	}
	stop()
	if n := h.count(fsm.CmdEpochsTimeout); n != 2 {
		t.Errorf("%d epochs aborted in %d commands, want 2", jobs*perJob, n)
	}
	if got := counterValue(t, leader.EpochsTimedOut) - before; got != jobs*perJob {
		t.Errorf("counted %v timed-out epochs, want %d", got, jobs*perJob)
	}
}

// retryLog is a log destination that reports each retry the tasks log.
type retryLog struct {
	syncBuffer
	retries chan struct{}
}

func (r *retryLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("retrying")) {
		select {
		case r.retries <- struct{}{}:
		default:
		}
	}
	return r.syncBuffer.Write(p)
}

// TestUnreadableStateProposesNothing: a member that cannot read its state
// machine retries the read and proposes no key and no token meanwhile
// (it cannot know whether one is set).
func TestUnreadableStateProposesNothing(t *testing.T) {
	h := newHooked(t)
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	// A proposal is counted, then refused before it reaches the closed
	// store.
	for _, typ := range []fsm.CommandType{fsm.CmdURLKeyInit, fsm.CmdTokenCreate, fsm.CmdSlotKeyInit} {
		h.failN[typ] = 1 << 30
	}
	for _, task := range []struct {
		name string
		run  func(*slog.Logger) func(context.Context)
	}{
		{"auth bootstrap", func(l *slog.Logger) func(context.Context) { return leader.AuthBootstrap(h, h.f, l, "boot-secret") }},
		{"slot key", func(l *slog.Logger) func(context.Context) { return leader.SlotKey(h, h.f, l) }},
	} {
		out := &retryLog{retries: make(chan struct{}, 1)}
		stop := runTask(task.run(slog.New(slog.NewTextHandler(out, nil))))
		// Two failed rounds, each logged before its back-off.
		deadline := time.After(10 * time.Second)
		for seen := 0; seen < 2; {
			select {
			case <-out.retries:
				seen = bytes.Count([]byte(out.String()), []byte("retrying"))
			case <-deadline:
				t.Fatalf("%s: no retries logged:\n%s", task.name, out.String())
			}
		}
		stop()
		for _, typ := range []fsm.CommandType{fsm.CmdURLKeyInit, fsm.CmdTokenCreate, fsm.CmdSlotKeyInit} {
			if n := h.count(typ); n != 0 {
				t.Errorf("%s: %s proposed %d times on an unreadable state", task.name, typ, n)
			}
		}
	}
}

// TestEpochTimeoutsStopWhileProposing: the task's proposal carries the
// task's context, so cancelling the task (the term ended) ends a proposal
// that will never be committed and the task with it.
func TestEpochTimeoutsStopWhileProposing(t *testing.T) {
	h := newHooked(t)
	h.pendingEpoch(t, "j", time.Minute)
	h.advance(2 * time.Minute)
	h.hang[fsm.CmdEpochsTimeout] = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader.EpochTimeouts(h, h.f, nil)(ctx)
	}()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the task proposed no timeout")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not stop with its proposal pending")
	}
	if got := h.epochState("j", 1); got != wire.EpochPending {
		t.Fatalf("epoch is %s, the proposal was never committed", got)
	}
}
