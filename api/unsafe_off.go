//go:build !faultinject

package api

import (
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// The positive controls of the consistency suite (see unsafe_on.go) are
// constants in production builds, so the compiler removes what they guard.
const (
	unsafeStaleReads = false
	unsafeDropAcks   = false
)

func (s *Server) unsafeDropAck(*fsm.TaskAck) (*wire.AckResult, uint64, bool) { return nil, 0, false }
