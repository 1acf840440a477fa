//go:build faultinject

package api

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// unsafeStaleReads is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_STALE_READS=1 every read is
// served as a stale one, by the member asked, from its own state, without
// forwarding to the leader or confirming leadership. The suite's
// linearizability checker must then report a violation.
var unsafeStaleReads = os.Getenv("METASTORE_UNSAFE_STALE_READS") == "1"

// unsafeDropAcks is a positive control of the consistency suite, only in
// faultinject builds: with METASTORE_UNSAFE_DROP_ACKS=1 the leader answers
// one ack in unsafeDropEvery "ok" without proposing it, so an
// acknowledged ack is lost. The epoch is then left one ack short (pending
// until it is aborted), the case in which a lost ack cannot be seen in a
// completed checkpoint: the suite's acks checker must report it from the
// epoch's ack records.
var unsafeDropAcks = os.Getenv("METASTORE_UNSAFE_DROP_ACKS") == "1"

const unsafeDropEvery = 20

var unsafeAcksSeen atomic.Int64

// unsafeDropAck answers ack p without applying it when the control is on
// and p is the next ack to drop: a new ack (not a retry of a stored one)
// of the current generation for a pending epoch, which would otherwise
// be stored.
func (s *Server) unsafeDropAck(p *fsm.TaskAck) (*wire.AckResult, uint64, bool) {
	if !unsafeDropAcks {
		return nil, 0, false
	}
	e, idx, err := s.fsm.Epoch(p.Job, p.Epoch)
	if err != nil || e.State != wire.EpochPending || e.Generation != p.Generation || e.Acked+1 >= e.Expected {
		return nil, 0, false
	}
	for _, a := range e.Acks {
		if a.Task == p.Task {
			return nil, 0, false
		}
	}
	if unsafeAcksSeen.Add(1)%unsafeDropEvery != 0 {
		return nil, 0, false
	}
	now := time.Now()
	s.logger.Warn("METASTORE_UNSAFE_DROP_ACKS: ack answered ok and not applied", "job", p.Job, "epoch", p.Epoch, "task", p.Task)
	return &wire.AckResult{
		Ack:   &wire.Ack{Task: p.Task, At: now, Delay: wire.Duration(now.Sub(e.BeganAt)), Sizes: map[wire.Kind]int{}, ContentHash: "dropped-by-unsafe-switch", Index: idx},
		Epoch: &e.Epoch,
	}, idx, true
}
