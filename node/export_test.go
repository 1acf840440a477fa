package node

// CutOff closes n's Raft transport only (for tests): Raft, its stores and
// the state machine go on running, but the member neither receives nor
// answers Raft's RPCs once its open connections have carried their next
// one. Shutdown closes the transport again harmlessly.
func CutOff(n *Node) error { return n.trans.NetworkTransport.Close() }
