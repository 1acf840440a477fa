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

var handlers = map[CommandType]handler{}

// register adds a command type to the dispatch table. Registering a type
// twice is a programming error.
func register(t CommandType, name string, version uint8, apply func(tx *txn, c Command) (any, error)) {
	if t == CmdUnknown {
		panic("fsm: cannot register the unknown command type")
	}
	if _, dup := handlers[t]; dup {
		panic(fmt.Sprintf("fsm: command type %d registered twice", t))
	}
	handlers[t] = handler{name: name, version: version, apply: apply}
}

// binaryFrom records that the payloads of type t are MessagePack from
// version v on (payloads.go).
func binaryFrom(t CommandType, v uint8) {
	h := handlers[t]
	h.binaryFrom = v
	handlers[t] = h
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
