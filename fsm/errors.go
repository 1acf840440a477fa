package fsm

import (
	"errors"

	"github.com/metastore/metastore/wire"
)

// Fatal errors: the entry cannot be applied on any member. Apply stops the
// node rather than let members diverge.
var (
	// ErrUnknownCommand is a log entry of a type or version this build
	// does not know.
	ErrUnknownCommand = errors.New("unknown command")
	// ErrCorruptCommand is a log entry that cannot be decoded.
	ErrCorruptCommand = errors.New("corrupt command")
)

// Rule violations are *wire.RuleError values: the codes, their meaning and
// their sentinels are part of the API and declared once, in package wire.
func ruleErr(code wire.Code, field, format string, args ...any) *wire.RuleError {
	return wire.Errorf(code, field, format, args...)
}

// Result is what Apply returns for every command: the index it was applied
// at, and either a value or a rule violation. A value that shows a record
// or an answer of the API has its type in package wire (views.go).
type Result struct {
	Index uint64
	Value any
	Err   error
}
