package etcdsut

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The batched lean design ("etcd-batched", NewBatched) is the lean one
// with its acks sent the way the metastore's client sends them: at most
// maxAckRequests ack transactions in flight, and the acks made while that
// many are in flight wait and go together in one transaction when one is
// answered. etcd (3.3 and later) nests transactions: the batch's
// transaction holds one transaction per ack (clientv3.OpTxn), each with
// its own guard and its own outcome, so an ack fenced or refused refuses
// nothing else, as in the metastore's POST /v1/acks. An ack with nothing
// waiting ahead of it goes alone at once.

// Bounds of the batched design: requests in flight, and acks in one
// transaction (each nests at most 1 + segments puts and 3 gets, far below
// --max-txn-ops per level).
const (
	maxAckRequests = 4
	maxBatchAcks   = 64
	batchTimeout   = 10 * time.Second
)

// ackBatcher sends the acks of the batched design.
type ackBatcher struct {
	limit int
	// batches counts the batches sent (tests).
	batches atomic.Int64
	// gate, when set (tests), holds every ack sent alone until closed.
	gate chan struct{}

	mu       sync.Mutex
	queue    []*queuedAck
	inflight int
}

// queuedAck is one ack's transaction, waiting or sent in a batch.
type queuedAck struct {
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
	done      chan struct{}
	resp      *clientv3.TxnResponse
	err       error
}

// commit commits one ack's transaction (cmps, then, els): alone when a
// request slot is free and nothing waits, else in the next batch.
func (b *ackBatcher) commit(ctx context.Context, cli *clientv3.Client, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	b.mu.Lock()
	if len(b.queue) == 0 && b.inflight < b.limit {
		b.inflight++
		gate := b.gate
		b.mu.Unlock()
		defer b.release(cli)
		if gate != nil {
			<-gate
		}
		return cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	}
	a := &queuedAck{cmps: cmps, then: then, els: els, done: make(chan struct{})}
	b.queue = append(b.queue, a)
	b.startLocked(cli)
	b.mu.Unlock()
	select {
	case <-a.done:
		return a.resp, a.err
	case <-ctx.Done():
		// The batch goes on without the caller; its outcome for this ack
		// is unknown to it, as a cancelled transaction's is.
		return nil, ctx.Err()
	}
}

func (b *ackBatcher) release(cli *clientv3.Client) {
	b.mu.Lock()
	b.inflight--
	b.startLocked(cli)
	b.mu.Unlock()
}

// startLocked sends what waits as one batch when a request slot is free;
// the caller holds b.mu.
func (b *ackBatcher) startLocked(cli *clientv3.Client) {
	if len(b.queue) == 0 || b.inflight >= b.limit {
		return
	}
	n := min(len(b.queue), maxBatchAcks)
	batch := make([]*queuedAck, n)
	copy(batch, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.inflight++
	b.batches.Add(1)
	go b.send(cli, batch)
}

// send commits a batch: one transaction of one nested transaction per ack.
func (b *ackBatcher) send(cli *clientv3.Client, batch []*queuedAck) {
	defer b.release(cli)
	ops := make([]clientv3.Op, len(batch))
	for i, a := range batch {
		ops[i] = clientv3.OpTxn(a.cmps, a.then, a.els)
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	r, err := cli.Txn(ctx).Then(ops...).Commit()
	cancel()
	for i, a := range batch {
		if err != nil {
			a.err = err
		} else {
			a.resp = (*clientv3.TxnResponse)(r.Responses[i].GetResponseTxn())
		}
		close(a.done)
	}
}
