package fsm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// CommandType numbers a kind of Raft command. Values are written out, never
// renumbered and never reused: a type that is retired keeps its number. New
// types go at the end. The zero value means "unknown" and is never valid.
type CommandType uint8

const (
	CmdUnknown       CommandType = 0
	CmdMemberUpsert  CommandType = 1
	CmdMemberRemove  CommandType = 2
	CmdJobPut        CommandType = 3
	CmdAttemptStart  CommandType = 4
	CmdEpochBegin    CommandType = 5
	CmdTaskAck       CommandType = 6
	CmdEpochAbort    CommandType = 7
	CmdEpochPin      CommandType = 8
	CmdEpochUnpin    CommandType = 9
	CmdEpochsTimeout CommandType = 10
	CmdIntentCreate  CommandType = 11
	CmdIntentsExpire CommandType = 12
	CmdBlobsDeleting CommandType = 13
	CmdBlobsGone     CommandType = 14
	CmdBlobsPurge    CommandType = 15
	// 16 is CmdBatch (batch.go).

	// Authentication (auth.go).
	CmdTokenCreate CommandType = 17
	CmdTokenRevoke CommandType = 18
	CmdURLKeyInit  CommandType = 19

	// What the object store reported for new blobs (observe.go).
	CmdBlobsObserved CommandType = 20

	// Deleting a job (jobdelete.go).
	CmdJobDelete CommandType = 21

	// Signed upload slots (upload_slots.go).
	CmdSlotKeyInit CommandType = 22
	CmdSlotCutoff  CommandType = 23
)

func (t CommandType) String() string {
	if h, ok := handlers[t]; ok {
		return h.name
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// envelopeHeader is the fixed prefix of every command:
// type (1 byte), payload version (1 byte), proposer time in Unix nanoseconds
// (8 bytes, big endian). The payload follows: JSON, or MessagePack for
// the versions a type registered as binary (binaryFrom).
const envelopeHeader = 10

// Command is a decoded Raft log entry.
type Command struct {
	Type    CommandType
	Version uint8
	// Time is the proposer's clock when it proposed the command. Apply uses it
	// and never reads its own clock, so every member computes the same state.
	Time    time.Time
	Payload []byte
}

// Encode builds a command envelope for payload, stamped with now. The payload
// version is the current version registered for the type.
func Encode(t CommandType, now time.Time, payload any) ([]byte, error) {
	h, ok := handlers[t]
	if !ok {
		return nil, fmt.Errorf("fsm: encode: %w: %d", ErrUnknownCommand, t)
	}
	return encodeVersion(t, h.version, now, payload)
}

// encodeVersion builds a command envelope of payload version v: JSON, or
// MessagePack from the type's binaryFrom version on.
func encodeVersion(t CommandType, v uint8, now time.Time, payload any) ([]byte, error) {
	h := handlers[t]
	var body []byte
	var err error
	if h.binaryFrom != 0 && v >= h.binaryFrom {
		bp, ok := payload.(binaryPayload)
		if !ok {
			return nil, fmt.Errorf("fsm: encode %s: a %T has no binary form", h.name, payload)
		}
		body, err = bp.marshalPayload()
	} else {
		body, err = json.Marshal(payload)
	}
	if err != nil {
		return nil, fmt.Errorf("fsm: encode %s: %w", h.name, err)
	}
	buf := make([]byte, envelopeHeader, envelopeHeader+len(body))
	buf[0] = byte(t)
	buf[1] = v
	binary.BigEndian.PutUint64(buf[2:10], uint64(now.UnixNano()))
	return append(buf, body...), nil
}

// Decode parses a command envelope. It does not decode the payload.
func Decode(data []byte) (Command, error) {
	if len(data) < envelopeHeader {
		return Command{}, fmt.Errorf("%w: %d bytes is shorter than the envelope", ErrCorruptCommand, len(data))
	}
	c := Command{
		Type:    CommandType(data[0]),
		Version: data[1],
		Time:    time.Unix(0, int64(binary.BigEndian.Uint64(data[2:10]))).UTC(),
		Payload: data[envelopeHeader:],
	}
	h, ok := handlers[c.Type]
	if !ok {
		return Command{}, fmt.Errorf("%w: type %d", ErrUnknownCommand, data[0])
	}
	if c.Version == 0 || c.Version > h.version {
		return Command{}, fmt.Errorf("%w: %s version %d (this build reads up to %d)", ErrUnknownCommand, h.name, c.Version, h.version)
	}
	return c, nil
}

// handler applies one command type inside the batch's write transaction.
// It returns the command's value, or a *wire.RuleError for a rule violation;
// any other error is fatal (the node stops rather than diverge).
type handler struct {
	name    string
	version uint8
	// binaryFrom is the first payload version in MessagePack (payloads.go;
	// 0: every version is JSON).
	binaryFrom uint8
	apply      func(tx *txn, c Command) (any, error)
}

// handlers is the command table, built once by init below.
var handlers map[CommandType]handler

// The command table: every command type with its name (logs, metrics),
// its current payload version, the first version whose payload is
// MessagePack (0: JSON only), and the state operation it applies. Each
// handler but the batch's is handle's: decode the payload, check its
// shape, make that one call. A type's versions are never taken back: an
// entry is applied by the rules of the version it was written at.
func init() {
	handlers = map[CommandType]handler{
		// Version 2 checks the form of the addresses (CheckMemberAddr);
		// entries of version 1 replay under the length check they were
		// applied with.
		CmdMemberUpsert: handle("member-upsert", 2, 0, applyMemberUpsert),
		CmdMemberRemove: handle("member-remove", 1, 0, applyMemberRemove),
		CmdJobPut:       handle("job-put", 1, 0, applyJobPut),
		// Version 3 releases the task manifests (lineages) the new attempt
		// does not extend as they are: see releaseHeads. Entries of
		// versions 1 and 2 are applied as they were written, without it.
		CmdAttemptStart: handle("attempt-start", 3, 0, applyAttemptStart),
		CmdJobDelete:    handle("job-delete", 1, 0, applyJobDelete),

		// Version 2 refuses epochs above wire.MaxEpoch; entries of version
		// 1 were accepted up to 2^64-1 and replay as they were applied.
		CmdEpochBegin: handle("epoch-begin", 2, 0, applyEpochBegin),
		// Version 2 adds the cross-job and upload-slot rules (crossjob.go);
		// entries of version 1 are applied by the rules they were written
		// under. Version 3 is version 2 in MessagePack (payloads.go).
		// Version 4 refuses a manifest change that leaves a base and a
		// segment at one reference (manifests.Plan); entries of versions 1
		// to 3 replay without that rule (manifests.PlanSharingRefs).
		CmdTaskAck:       handle("task-ack", 4, 3, ackTask),
		CmdEpochAbort:    handle("epoch-abort", 1, 0, applyEpochAbort),
		CmdEpochPin:      handle("epoch-pin", 1, 0, applyEpochPin),
		CmdEpochUnpin:    handle("epoch-unpin", 1, 0, applyEpochUnpin),
		CmdEpochsTimeout: handle("epochs-timeout", 1, 0, applyEpochsTimeout),

		// Version 2 records the attempt generation in each intent. Version
		// 3 is version 2 in MessagePack (payloads.go). Version 4 may record
		// one upload batch (upload_batches.go) instead of a record per key:
		// the payload names the batch and its size, not the keys (the
		// API's requests do; a payload naming keys is applied as before).
		CmdIntentCreate:  handle("intent-create", 4, 3, applyIntentCreate),
		CmdIntentsExpire: handle("intents-expire", 1, 0, applyIntentsExpire),
		CmdBlobsDeleting: handle("blobs-deleting", 1, 0, applyBlobsDeleting),
		CmdBlobsGone:     handle("blobs-gone", 1, 0, applyBlobsGone),
		CmdBlobsPurge:    handle("blobs-purge", 1, 0, applyBlobsPurge),
		// Version 2 is version 1 in MessagePack (payloads.go).
		CmdBlobsObserved: handle("blobs-observed", 2, 2, applyBlobsObserved),

		CmdBatch: {name: "batch", version: 1, apply: applyBatchCommand},

		CmdTokenCreate: handle("token-create", 1, 0, applyTokenCreate),
		CmdTokenRevoke: handle("token-revoke", 1, 0, applyTokenRevoke),
		CmdURLKeyInit:  handle("url-key-init", 1, 0, applyURLKeyInit),
		CmdSlotKeyInit: handle("slot-key-init", 1, 0, applySlotKeyInit),
		CmdSlotCutoff:  handle("slot-cutoff", 1, 0, applySlotCutoff),
	}
}

// handle is the handler of a command whose payload is a P: it decodes the
// payload, checks its shape (checkShape) and hands it to op, the state
// operation, whose answer it returns (none with an error).
func handle[P any, PP interface{ *P }, R any](name string, version, binaryFrom uint8, op func(t *txn, c Command, p PP) (R, error)) handler {
	apply := func(t *txn, c Command) (any, error) {
		p := PP(new(P))
		if err := decodePayload(c, p); err != nil {
			return nil, err
		}
		if err := checkShape(p, c.Version); err != nil {
			return nil, err
		}
		v, err := op(t, c, p)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	return handler{name: name, version: version, binaryFrom: binaryFrom, apply: apply}
}

// checkShape runs the checks of a payload that need no state: checkAt for
// a payload whose checks changed between versions (an entry is checked as
// its version was), Validate for the others (the API and the proposers run
// it before proposing). The collector's and leader loops' own commands
// have none.
func checkShape(p any, version uint8) error {
	switch v := p.(type) {
	case interface{ checkAt(version uint8) error }:
		return v.checkAt(version)
	case interface{ Validate() error }:
		return v.Validate()
	}
	return nil
}

// DecodePayload decodes the command's payload into v, a pointer to the
// command type's payload (JSON or MessagePack, by its version).
func (c Command) DecodePayload(v any) error { return decodePayload(c, v) }

// decodePayload decodes a command payload. Payloads are written by this
// build's Encode at the version Decode checked, so a payload that does not
// decode is a corrupt entry.
func decodePayload(c Command, v any) error {
	if h := handlers[c.Type]; h.binaryFrom != 0 && c.Version >= h.binaryFrom {
		bp, ok := v.(binaryTarget)
		if !ok {
			return fmt.Errorf("fsm: %s payload version %d is binary and a %T has no binary form", c.Type, c.Version, v)
		}
		if err := bp.unmarshalPayload(c.Payload); err != nil {
			return fmt.Errorf("%w: %s payload: %v", ErrCorruptCommand, c.Type, err)
		}
		return nil
	}
	if err := json.Unmarshal(c.Payload, v); err != nil {
		return fmt.Errorf("%w: %s payload: %v", ErrCorruptCommand, c.Type, err)
	}
	return nil
}
