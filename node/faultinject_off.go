//go:build !faultinject

package node

import (
	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
)

// faultInject is false in production builds, so the compiler removes every
// call it guards and the binary holds no fault-injection code. The
// faultinject build (faultinject_on.go) sets it and routes the hooks to
// internal/faultpoint.
const faultInject = false

// faultFSM returns the state machine Raft is given; the faultinject build
// wraps it so that snapshot persist passes a fault point.
func faultFSM(f *fsm.FSM) raft.FSM { return f }
