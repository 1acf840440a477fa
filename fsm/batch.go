package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// CmdBatch carries several commands in one Raft entry: the leader groups
// the commands proposed while the previous entry was being written, so one
// entry, one log write and one state-machine transaction serve them all.
// Each command keeps its own envelope (type, version, proposer time) and
// gets its own result; a rule violation of one changes nothing and does not
// affect the others, exactly as if each had its own entry.
const CmdBatch CommandType = 16

// MaxBatchCommands bounds the commands of one batch entry.
const MaxBatchCommands = 4096

// EncodeBatch builds a batch entry of cmds, each an envelope from Encode.
// The payload is binary: the count, then each command's length and bytes
// (unsigned varints). now stamps the batch envelope; the commands keep
// their own times.
func EncodeBatch(now time.Time, cmds [][]byte) ([]byte, error) {
	if len(cmds) == 0 || len(cmds) > MaxBatchCommands {
		return nil, fmt.Errorf("fsm: encode batch: %d commands (want 1..%d)", len(cmds), MaxBatchCommands)
	}
	size := envelopeHeader + binary.MaxVarintLen64
	for _, c := range cmds {
		if len(c) >= 1 && CommandType(c[0]) == CmdBatch {
			return nil, fmt.Errorf("fsm: encode batch: a batch cannot contain a batch")
		}
		size += binary.MaxVarintLen64 + len(c)
	}
	buf := make([]byte, envelopeHeader, size)
	buf[0] = byte(CmdBatch)
	buf[1] = handlers[CmdBatch].version
	binary.BigEndian.PutUint64(buf[2:10], uint64(now.UnixNano()))
	buf = binary.AppendUvarint(buf, uint64(len(cmds)))
	for _, c := range cmds {
		buf = binary.AppendUvarint(buf, uint64(len(c)))
		buf = append(buf, c...)
	}
	return buf, nil
}

// DecodeBatch splits a batch command's payload into its commands'
// envelopes (not decoded).
func DecodeBatch(c Command) ([][]byte, error) {
	p := c.Payload
	n, k := binary.Uvarint(p)
	if k <= 0 || n == 0 || n > MaxBatchCommands {
		return nil, fmt.Errorf("%w: batch count", ErrCorruptCommand)
	}
	p = p[k:]
	out := make([][]byte, 0, n)
	for i := range n {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return nil, fmt.Errorf("%w: batch command %d of %d: bad length", ErrCorruptCommand, i+1, n)
		}
		p = p[k:]
		out = append(out, p[:l:l])
		p = p[l:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch's last command", ErrCorruptCommand, len(p))
	}
	return out, nil
}

// BatchResults is the value of a batch command: one result per command, in
// order, each with the batch entry's index.
type BatchResults []*Result

func applyBatchCommand(t *txn, c Command) (any, error) {
	cmds, err := DecodeBatch(c)
	if err != nil {
		return nil, err
	}
	out := make(BatchResults, len(cmds))
	for i, raw := range cmds {
		sub, err := Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i+1, err)
		}
		if sub.Type == CmdBatch {
			return nil, fmt.Errorf("%w: batch command %d is a batch", ErrCorruptCommand, i+1)
		}
		v, err := applyCommand(t, sub)
		r, err := result(t.index, v, err)
		if err != nil {
			return nil, fmt.Errorf("batch command %d (%s): %w", i+1, sub.Type, err)
		}
		out[i] = r
	}
	return out, nil
}
