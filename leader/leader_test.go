package leader_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/leader"
	"github.com/metastore/metastore/wire"
)

// proposer applies commands to a state machine directly, stamped with its
// own clock, as node.Node.Propose does on a leader.
type proposer struct {
	t     *testing.T
	f     *fsm.FSM
	mu    sync.Mutex
	index uint64
	now   time.Time
}

func newProposer(t *testing.T) *proposer {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// A day ahead of the wall clock: a task that read the wall clock
	// instead of its proposer's would find nothing due.
	return &proposer{t: t, f: f, now: time.Now().Add(24 * time.Hour).UTC()}
}

func (p *proposer) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *proposer) advance(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = p.now.Add(d)
}

func (p *proposer) proposed() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.index
}

func (p *proposer) Propose(ctx context.Context, typ fsm.CommandType, payload any) (any, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd, err := fsm.Encode(typ, p.now, payload)
	if err != nil {
		return nil, 0, err
	}
	p.index++
	res, ok := p.f.Apply(&raft.Log{Index: p.index, Term: 1, Type: raft.LogCommand, Data: cmd}).(*fsm.Result)
	if !ok {
		p.t.Fatalf("apply %s: no result", typ)
	}
	if res.Err != nil {
		return nil, res.Index, res.Err
	}
	return res.Value, res.Index, nil
}

func (p *proposer) must(typ fsm.CommandType, payload any) {
	p.t.Helper()
	if _, _, err := p.Propose(context.Background(), typ, payload); err != nil {
		p.t.Fatalf("%s: %v", typ, err)
	}
}

func (p *proposer) epochState(job string, n uint64) wire.EpochState {
	p.t.Helper()
	e, _, err := p.f.Epoch(job, n)
	if err != nil {
		p.t.Fatal(err)
	}
	return e.State
}

// TestEpochTimeouts: the task aborts, by its proposer's clock, the epochs
// whose ack timeout has passed and only those, and counts them.
func TestEpochTimeouts(t *testing.T) {
	p := newProposer(t)
	caps, err := wire.ParseCaps([]string{"state"})
	if err != nil {
		t.Fatal(err)
	}
	for job, timeout := range map[string]time.Duration{"short": time.Minute, "long": time.Hour} {
		p.must(fsm.CmdJobPut, fsm.JobPut{Job: job, Config: wire.JobConfig{Retained: 1, AckTimeout: fsm.Duration(timeout), History: 10}})
		p.must(fsm.CmdAttemptStart, fsm.AttemptStart{Job: job, AttemptID: "a1", Tasks: []wire.Task{{ID: "t1", Caps: caps}}})
		p.must(fsm.CmdEpochBegin, fsm.EpochBegin{Job: job, Generation: 1, Epoch: 1})
	}
	p.advance(2 * time.Minute)
	before := counterValue(t, leader.EpochsTimedOut)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader.EpochTimeouts(p, p.f, nil)(ctx)
	}()
	deadline := time.After(10 * time.Second)
	for p.epochState("short", 1) != wire.EpochAborted {
		wait, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
		p.f.WaitChange(wait)
		stop()
		select {
		case <-deadline:
			t.Fatal("the timed-out epoch was not aborted")
		default:
		}
	}
	cancel()
	<-done
	if got := p.epochState("long", 1); got != wire.EpochPending {
		t.Fatalf("epoch within its timeout is %s, want pending", got)
	}
	if got := counterValue(t, leader.EpochsTimedOut) - before; got != 1 {
		t.Fatalf("counted %v timed-out epochs, want 1", got)
	}
}

// TestAuthBootstrap: the task sets the signing key and creates the
// bootstrap operator token once; run again, it proposes nothing.
func TestAuthBootstrap(t *testing.T) {
	p := newProposer(t)
	leader.AuthBootstrap(p, p.f, nil, "boot-secret")(context.Background())
	key, err := p.f.URLKey()
	if err != nil || len(key) != fsm.URLKeyLen {
		t.Fatalf("signing key %x, %v", key, err)
	}
	toks, _, err := p.f.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 1 || toks[0].Role != wire.RoleOperator {
		t.Fatalf("tokens after bootstrap: %+v", toks)
	}
	if tok, err := p.f.TokenByHash(wire.TokenHash("boot-secret")); err != nil || tok == nil || tok.Accessor != toks[0].Accessor {
		t.Fatalf("the bootstrap secret finds %+v, %v; want token %s", tok, err, toks[0].Accessor)
	}
	n := p.proposed()
	leader.AuthBootstrap(p, p.f, nil, "other-secret")(context.Background())
	if p.proposed() != n {
		t.Fatalf("a second bootstrap proposed %d commands", p.proposed()-n)
	}
	if again, _ := p.f.URLKey(); string(again) != string(key) {
		t.Fatal("a second bootstrap changed the signing key")
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestSlotKey: the task sets the key signing upload slots once; a later
// run (another term) proposes nothing and keeps it.
func TestSlotKey(t *testing.T) {
	p := newProposer(t)
	leader.SlotKey(p, p.f, nil)(context.Background())
	key, err := p.f.SlotKey()
	if err != nil || len(key) != fsm.SlotKeyLen {
		t.Fatalf("slot key %x, %v", key, err)
	}
	n := p.proposed()
	leader.SlotKey(p, p.f, nil)(context.Background())
	if p.proposed() != n {
		t.Fatalf("a second run proposed %d commands", p.proposed()-n)
	}
	if again, _ := p.f.SlotKey(); string(again) != string(key) {
		t.Fatal("a second run changed the slot key")
	}
}
