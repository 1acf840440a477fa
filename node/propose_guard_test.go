package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// memberApplied reports whether n's state machine holds a member record id.
func memberApplied(t *testing.T, n *Node, id string) bool {
	t.Helper()
	ms, err := n.fsm.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

func memberUpsert(id string) fsm.MemberUpsert {
	return fsm.MemberUpsert{ID: id, RaftAddr: id + ".example:1", HTTPAddr: id + ".example:2"}
}

// pollUntil polls cond every millisecond until it holds, or fails the test
// after timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
}

// TestAbandonedCommandIsNeverProposed: a caller whose deadline passes while
// its command waits for an in-flight slot is told ctx's error (nothing
// proposed), and the proposer, when it gets the slot, drops the command
// instead of proposing it, frees the slot, and goes on with the next
// command.
func TestAbandonedCommandIsNeverProposed(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyInflight = 1 })
	n.inflight <- struct{}{} // an entry in flight
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("gone"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("a command still waiting for a slot when its caller gave up: %v, want context.DeadlineExceeded alone", err)
	}
	<-n.inflight // the entry in flight is answered; the proposer takes the slot
	// The proposer finds its only command abandoned: it frees the slot.
	pollUntil(t, 5*time.Second, "the in-flight slot freed after an abandoned command", func() bool { return len(n.inflight) == 0 })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, _, err := n.Propose(ctx2, fsm.CmdMemberUpsert, memberUpsert("after")); err != nil {
		t.Fatalf("the command after an abandoned one: %v", err)
	}
	if memberApplied(t, n, "gone") {
		t.Fatal("a command whose caller was told nothing was proposed was applied")
	}
}

// TestBatchesBoundedByApplyBatch: the commands queued while an entry is in
// flight go in entries of at most cfg.ApplyBatch commands each.
func TestBatchesBoundedByApplyBatch(t *testing.T) {
	const batch, count = 4, 10
	n := startLeader(t, func(c *config.Config) { c.ApplyBatch, c.ApplyInflight = batch, 1 })
	n.inflight <- struct{}{} // an entry in flight
	var (
		idx  []uint64
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		idx, errs = proposeMembers(n, "q", count)
	}()
	pollUntil(t, 10*time.Second, "the commands queued", func() bool { return len(n.proposals) >= count-1 })
	<-n.inflight
	<-done
	per := map[uint64]int{}
	for i := range count {
		if errs[i] != nil {
			t.Fatalf("command %d: %v", i, errs[i])
		}
		per[idx[i]]++
	}
	for index, k := range per {
		if k > batch {
			t.Fatalf("entry %d carried %d commands, more than --apply-batch %d (indexes %v)", index, k, batch, idx)
		}
	}
}

// TestBatchesBoundedInBytes: commands queued while an entry is in flight go
// in entries of at most maxBatchBytes of commands; the command that does not
// fit goes in the next entry, and every caller gets its own answer.
func TestBatchesBoundedInBytes(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyInflight = 1 })
	n.inflight <- struct{}{} // an entry in flight
	const count = 3
	big := strings.Repeat("x", 1536<<10) // three do not fit in maxBatchBytes, two do
	idx, errs := make([]uint64, count), make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// An id this long is a rule violation: answered with the index
			// of its entry.
			_, idx[i], errs[i] = n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: fmt.Sprintf("%d%s", i, big), RaftAddr: "x.example:1", HTTPAddr: "x.example:2"})
		})
	}
	pollUntil(t, 10*time.Second, "the commands queued", func() bool { return len(n.proposals) >= count-1 })
	<-n.inflight
	wg.Wait()
	per := map[uint64]int{}
	for i := range count {
		var rule *wire.RuleError
		if !errors.As(errs[i], &rule) || idx[i] == 0 {
			t.Fatalf("command %d: %v at index %d, want its own rule violation", i, errs[i], idx[i])
		}
		per[idx[i]]++
	}
	for index, k := range per {
		if k*len(big) > maxBatchBytes {
			t.Fatalf("entry %d carried %d commands of %d bytes, more than maxBatchBytes (indexes %v)", index, k, len(big), idx)
		}
	}
}

// TestGiveUpWhileTheQueueIsFull: a caller whose command cannot even be
// queued (the queue is full while an entry is in flight) gives up at its
// deadline with ctx's error, and its command is never proposed.
func TestGiveUpWhileTheQueueIsFull(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyBatch, c.ApplyInflight = 2, 1 })
	n.inflight <- struct{}{}       // an entry in flight
	queued := cap(n.proposals) + 1 // the proposer holds one, waiting for the slot
	var (
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		_, errs = proposeMembers(n, "f", queued)
	}()
	pollUntil(t, 10*time.Second, "the queue full", func() bool { return len(n.proposals) == cap(n.proposals) })

	wait, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	err := within(t, wait, "Propose with a full queue", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("late"))
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("a command that could not be queued: %v, want context.DeadlineExceeded alone", err)
	}
	<-n.inflight
	<-done
	for i, err := range errs {
		if err != nil {
			t.Fatalf("queued command %d: %v", i, err)
		}
	}
	if memberApplied(t, n, "late") {
		t.Fatal("a command whose caller was told nothing was proposed was applied")
	}
}

// TestApplyTimeoutBoundsTheWait: a caller without a deadline waits for at
// most cfg.ApplyTimeout; a command still queued then was never proposed
// and is answered with the deadline's error alone.
func TestApplyTimeoutBoundsTheWait(t *testing.T) {
	n := startLeader(t, func(c *config.Config) { c.ApplyTimeout, c.ApplyInflight = 300*time.Millisecond, 1 })
	n.inflight <- struct{}{} // an entry in flight that is not answered in time
	defer func() { <-n.inflight }()
	wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := within(t, wait, "Propose without a deadline", func() error {
		_, _, err := n.Propose(context.Background(), fsm.CmdMemberUpsert, memberUpsert("slow"))
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("a command queued past cfg.ApplyTimeout: %v, want context.DeadlineExceeded alone", err)
	}
}

// blockMainGoroutine starts a backup restore whose reader delivers nothing
// until the returned release is called: Raft's main goroutine copies the
// snapshot and takes no entry meanwhile. Release is also registered as a
// cleanup (it runs before the node's shutdown).
func blockMainGoroutine(t *testing.T, n *Node) (release func(), restored <-chan error) {
	return blockMainGoroutineWith(t, n, nil)
}

// blockMainGoroutineWith is blockMainGoroutine whose backup, once
// released, fails to read with fail (nil: it is read whole).
func blockMainGoroutineWith(t *testing.T, n *Node, fail error) (release func(), restored <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta, prepared := preparedBackup(ctx, t, n)
	gate := &gatedReader{r: prepared, reading: make(chan struct{}), release: make(chan struct{}), fail: fail}
	var once sync.Once
	release = func() { once.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	ch := make(chan error, 1)
	go func() { ch <- n.raft.Restore(meta, gate, time.Minute) }()
	select {
	case <-gate.reading:
	case <-ctx.Done():
		t.Fatal("Raft never read the backup")
	}
	return release, ch
}

// TestGivingUpOnAHandedOverCommandIsUnknownOutcome: once the proposer has
// taken a command to hand it to Raft, a caller that gives up is told the
// outcome is unknown, never ctx's error alone (which says nothing was
// proposed): here Raft takes the entry after the caller gave up.
func TestGivingUpOnAHandedOverCommandIsUnknownOutcome(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	release, restored := blockMainGoroutine(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("pending"))
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("gave up on a command handed to Raft: %v, want ErrUnknownOutcome wrapping context.DeadlineExceeded", err)
	}
	release()
	if err := <-restored; err != nil {
		t.Fatalf("restore: %v", err)
	}
}

// TestShutdownDoesNotDisownAHandedOverCommand: a command being handed to
// Raft when the member shuts down is answered ErrUnknownOutcome (Raft does
// not say whether it took it), never ErrShutdown alone (nothing proposed)
// nor Raft's own error; a command
// still queued behind it (the proposer busy handing the first to Raft) is
// answered ErrShutdown by its caller, and never proposed.
func TestShutdownDoesNotDisownAHandedOverCommand(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	// The backup fails to read once released: a restore that went on past
	// the shutdown would reach hashicorp/raft's FSM step, which panics when
	// it finds Raft shut down.
	release, _ := blockMainGoroutineWith(t, n, errors.New("backup read refused after the shutdown"))
	propose := func(id string) <-chan error {
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert(id))
			res <- err
		}()
		return res
	}
	handed := propose("handed")
	// The proposer took the command (its entry's in-flight slot) and waits
	// for Raft's main goroutine to take the entry.
	pollUntil(t, 5*time.Second, "the command handed to Raft", func() bool { return len(n.inflight) == 1 && len(n.proposals) == 0 })
	queued := propose("queued")
	pollUntil(t, 5*time.Second, "the second command queued", func() bool { return len(n.proposals) == 1 })
	go func() {
		// The proposer, blocked handing the first command to Raft, does
		// not stop within this: Raft is then shut down, which fails the
		// hand-over.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	}()
	<-n.ctx.Done() // shutting down
	wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWait()
	select {
	case err := <-queued:
		if !errors.Is(err, ErrShutdown) || errors.Is(err, ErrUnknownOutcome) {
			t.Fatalf("a command still queued at shutdown: %v, want ErrShutdown alone", err)
		}
	case <-wait.Done():
		t.Fatal("the queued command was not answered")
	}
	select {
	case err := <-handed:
		if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrShutdown) {
			t.Fatalf("a command handed to Raft when it shut down: %v, want ErrUnknownOutcome wrapping ErrShutdown", err)
		}
	case <-wait.Done():
		t.Fatal("the handed-over command was not answered")
	}
	release() // Raft's shutdown waits for its main goroutine
	if memberApplied(t, n, "queued") {
		t.Fatal("a command whose caller was told nothing was proposed was applied")
	}
}

// TestRefusedWhileShuttingDown: once Shutdown has begun (a leader may still
// be handing leadership over), writes, reads and membership changes are
// refused with ErrShutdown and nothing is proposed.
func TestRefusedWhileShuttingDown(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	before := n.raft.LastIndex()
	n.closing.Store(true) // what Shutdown sets first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("late")); !errors.Is(err, ErrShutdown) || errors.Is(err, ErrUnknownOutcome) {
		t.Errorf("Propose while shutting down: %v, want ErrShutdown alone", err)
	}
	if _, err := n.LinearizableRead(ctx); !errors.Is(err, ErrShutdown) {
		t.Errorf("LinearizableRead while shutting down: %v, want ErrShutdown", err)
	}
	if err := n.AddVoter(ctx, "n2", n.cfg.RaftAddr, "n2.example:2"); !errors.Is(err, ErrShutdown) {
		t.Errorf("AddVoter while shutting down: %v, want ErrShutdown", err)
	}
	if err := n.RemoveServer(ctx, "n1"); !errors.Is(err, ErrShutdown) {
		t.Errorf("RemoveServer while shutting down: %v, want ErrShutdown", err)
	}
	if after := n.raft.LastIndex(); after != before {
		t.Errorf("last log index %d -> %d: something was proposed while shutting down", before, after)
	}
}
