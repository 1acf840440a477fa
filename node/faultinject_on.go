//go:build faultinject

package node

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/faultpoint"
)

// faultInject enables the fault points of this package (see
// faultinject_off.go for the production build).
const faultInject = true

func init() { faultpoint.EnableFromEnv() }

// faultFSM wraps the state machine so that every snapshot Raft persists
// passes faultpoint.SnapshotPersist after the state machine has written it
// and before the sink is closed (the snapshot made durable and visible).
// Everything else, ApplyBatch and Restore included, is the embedded
// *fsm.FSM's own.
func faultFSM(f *fsm.FSM) raft.FSM { return faultingFSM{f} }

type faultingFSM struct{ *fsm.FSM }

func (f faultingFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	return faultingSnapshot{s}, nil
}

type faultingSnapshot struct{ raft.FSMSnapshot }

func (s faultingSnapshot) Persist(sink raft.SnapshotSink) error {
	return s.FSMSnapshot.Persist(faultingSink{sink})
}

type faultingSink struct{ raft.SnapshotSink }

func (k faultingSink) Close() error {
	faultpoint.Hit(faultpoint.SnapshotPersist, fmt.Sprintf("snapshot %s", k.ID()))
	return k.SnapshotSink.Close()
}
