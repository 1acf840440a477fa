package node

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/metastore/metastore/fsm"
)

// Group commit. Commands proposed while the leader is busy with the
// previous entry wait in a queue; the proposer takes everything queued
// (up to cfg.ApplyBatch commands and maxBatchBytes) and proposes it as ONE
// Raft entry (fsm.CmdBatch), so a burst of acks costs one log append, one
// replication round and one state-machine transaction instead of one each.
// Under no load a command is proposed alone, as itself, at once: grouping
// adds no latency, it only forms while Raft is busy.
//
// "Busy" is bounded by cfg.ApplyInflight: the proposer keeps at most that
// many entries proposed and not yet applied (default 1). While they are in
// flight, new commands queue, and the next entry takes all of them. Raft
// would otherwise take a new entry as soon as its leader loop is free,
// well before the previous one commits, so under load the leader proposed
// many small entries, each with its own log append, replication messages,
// follower append and state-machine batch on every member; with one in
// flight, the entries carry about four times more commands each (64
// acking workers: 18 commands an entry against 4.7, 7% more acks per
// second for 9% less CPU per ack, docs/benchmarks.md). A lone command
// still goes at once: nothing is in flight to wait for.

// maxBatchBytes bounds the commands of one batch entry, in bytes; a single
// larger command is proposed alone.
const maxBatchBytes = 4 << 20

// Proposal states: a queued proposal can still be abandoned by its caller
// (nothing was proposed); once taken it belongs to Raft.
const (
	proposalQueued int32 = iota
	proposalTaken
	proposalAbandoned
)

type proposal struct {
	cmd   []byte
	state atomic.Int32
	done  chan proposalDone // buffered: the proposer never blocks on it
}

type proposalDone struct {
	res *fsm.Result
	err error
}

// propose hands cmd to the proposer and waits for its result. ctx bounds
// the wait; see Propose for the errors.
func (n *Node) propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	p := &proposal{cmd: cmd, done: make(chan proposalDone, 1)}
	select {
	case n.proposals <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.ctx.Done():
		return nil, ErrShutdown
	}
	select {
	case d := <-p.done:
		return d.res, d.err
	case <-n.ctx.Done():
		// Shutting down: the proposer may be gone, answer for it.
		if p.state.CompareAndSwap(proposalQueued, proposalAbandoned) {
			return nil, ErrShutdown // never proposed
		}
		select {
		case d := <-p.done:
			return d.res, d.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: gave up waiting: %w", ErrUnknownOutcome, ctx.Err())
		}
	case <-ctx.Done():
		if p.state.CompareAndSwap(proposalQueued, proposalAbandoned) {
			return nil, ctx.Err() // never proposed
		}
		select {
		case d := <-p.done:
			return d.res, d.err
		default:
		}
		return nil, fmt.Errorf("%w: gave up waiting: %w", ErrUnknownOutcome, ctx.Err())
	}
}

// runProposer takes queued proposals and hands them to Raft, grouped. It
// runs until the node shuts down; proposals still queued then are answered
// ErrShutdown (they were never proposed).
func (n *Node) runProposer() {
	defer n.wg.Done()
	var carry *proposal // taken from the queue but left for the next entry
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-n.proposals:
			case <-n.ctx.Done():
				n.drainProposals()
				return
			}
		}
		// Wait for an in-flight slot: the commands proposed meanwhile stay
		// queued and join this one in the next entry. first is still
		// queued too: its caller can give up on it.
		if n.inflight != nil {
			select {
			case n.inflight <- struct{}{}:
			case <-n.ctx.Done():
				if first.state.CompareAndSwap(proposalQueued, proposalTaken) {
					first.done <- proposalDone{err: ErrShutdown} // never proposed
				}
				n.drainProposals()
				return
			}
		}
		batch := make([]*proposal, 0, 16)
		size := 0
		add := func(p *proposal) {
			if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
				batch = append(batch, p)
				size += len(p.cmd)
			}
		}
		add(first)
	fill:
		for len(batch) < n.cfg.ApplyBatch && size < maxBatchBytes {
			select {
			case p := <-n.proposals:
				if size+len(p.cmd) > maxBatchBytes && len(batch) > 0 {
					carry = p
					break fill
				}
				add(p)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			n.release()
			continue
		}
		n.proposeBatch(batch)
	}
}

// proposeBatch hands batch to Raft as one entry and answers every proposal
// when the entry is applied (in a goroutine of its own: the proposer goes on
// gathering the next entry meanwhile).
// It frees the entry's in-flight slot (cfg.ApplyInflight) once the entry is
// answered.
func (n *Node) proposeBatch(batch []*proposal) {
	data := batch[0].cmd
	if len(batch) > 1 {
		cmds := make([][]byte, len(batch))
		for i, p := range batch {
			cmds[i] = p.cmd
		}
		var err error
		if data, err = fsm.EncodeBatch(n.Now(), cmds); err != nil {
			n.release()
			failAll(batch, fmt.Errorf("node: %w", err))
			return
		}
	}
	n.metrics.observeBatch(len(batch))
	// The enqueue timeout bounds only the wait for the leader loop to take
	// the entry (it blocks while Raft writes the previous one). With no
	// in-flight bound, that wait is when the queue fills for the next.
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	go func() {
		err := f.Error() // waits for the entry's apply, or its failure
		n.release()
		if err != nil {
			// A leader whose log append failed answers the entry with
			// the store's error and steps down: nothing was appended.
			failAll(batch, n.mapRaftError(err))
			return
		}
		switch r := f.Response().(type) {
		case *fsm.Result:
			if len(batch) == 1 {
				batch[0].done <- proposalDone{res: r}
				return
			}
			results, ok := r.Value.(fsm.BatchResults)
			if r.Err != nil || !ok || len(results) != len(batch) {
				failAll(batch, fmt.Errorf("node: batch entry %d answered %T (%v) for %d commands", f.Index(), r.Value, r.Err, len(batch)))
				return
			}
			for i, p := range batch {
				p.done <- proposalDone{res: results[i]}
			}
		case error:
			failAll(batch, fmt.Errorf("node: state machine failed to apply entry %d: %w", f.Index(), r))
		default:
			failAll(batch, fmt.Errorf("node: state machine returned %T for entry %d, want *fsm.Result", r, f.Index()))
		}
	}()
}

// release frees an in-flight slot the proposer took.
func (n *Node) release() {
	if n.inflight != nil {
		<-n.inflight
	}
}

func failAll(batch []*proposal, err error) {
	for _, p := range batch {
		p.done <- proposalDone{err: err}
	}
}

// drainProposals answers the proposals still queued at shutdown.
func (n *Node) drainProposals() {
	for {
		select {
		case p := <-n.proposals:
			if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
				p.done <- proposalDone{err: ErrShutdown}
			}
		default:
			return
		}
	}
}
