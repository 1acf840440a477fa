package fsm

import (
	"errors"
	"fmt"
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

// Code is the stable, machine-readable name of a rule violation. Codes are
// part of the HTTP API: never rename one.
type Code string

const (
	CodeInvalid            Code = "invalid_argument"
	CodeNotFound           Code = "not_found"
	CodeConflict           Code = "conflict"
	CodeFenced             Code = "fenced"
	CodeEpochNotIncreasing Code = "epoch_not_increasing"
	CodeEpochNotPending    Code = "epoch_not_pending"
	CodeEpochNotCompleted  Code = "epoch_not_completed"
	CodeTaskNotInAttempt   Code = "task_not_in_attempt"
	CodeTaskNotExpected    Code = "task_not_expected"
	CodeCapabilityMissing  Code = "capability_missing"
	CodePayloadTooLarge    Code = "payload_too_large"
	CodeNoAttempt          Code = "no_attempt"
	CodeTooManyPending     Code = "too_many_pending"
	CodeManifestMismatch   Code = "manifest_mismatch"
	CodeBlobUnknown        Code = "blob_unknown"
	CodeBlobDeleting       Code = "blob_deleting"
	CodeBlobGone           Code = "blob_gone"
	CodeBlobExpired        Code = "blob_expired"
)

// Sentinel rule errors, for errors.Is. A *RuleError matches the sentinel of
// its code.
var (
	ErrInvalid            = &RuleError{Code: CodeInvalid}
	ErrNotFound           = &RuleError{Code: CodeNotFound}
	ErrConflict           = &RuleError{Code: CodeConflict}
	ErrFenced             = &RuleError{Code: CodeFenced}
	ErrEpochNotIncreasing = &RuleError{Code: CodeEpochNotIncreasing}
	ErrEpochNotPending    = &RuleError{Code: CodeEpochNotPending}
	ErrEpochNotCompleted  = &RuleError{Code: CodeEpochNotCompleted}
	ErrTaskNotInAttempt   = &RuleError{Code: CodeTaskNotInAttempt}
	ErrTaskNotExpected    = &RuleError{Code: CodeTaskNotExpected}
	ErrCapabilityMissing  = &RuleError{Code: CodeCapabilityMissing}
	ErrPayloadTooLarge    = &RuleError{Code: CodePayloadTooLarge}
	ErrNoAttempt          = &RuleError{Code: CodeNoAttempt}
	ErrTooManyPending     = &RuleError{Code: CodeTooManyPending}
	ErrManifestMismatch   = &RuleError{Code: CodeManifestMismatch}
	ErrBlobUnknown        = &RuleError{Code: CodeBlobUnknown}
	ErrBlobDeleting       = &RuleError{Code: CodeBlobDeleting}
	ErrBlobGone           = &RuleError{Code: CodeBlobGone}
	ErrBlobExpired        = &RuleError{Code: CodeBlobExpired}
)

// RuleError is a rule violation found while applying a command (or while
// validating a request before it is proposed). It is an ordinary result,
// identical on every member, and changes nothing.
type RuleError struct {
	Code Code `json:"code"`
	// Field names the offending request field, when there is one.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *RuleError) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrFenced) true for any *RuleError with that code.
func (e *RuleError) Is(target error) bool {
	t, ok := target.(*RuleError)
	return ok && t.Code == e.Code
}

func ruleErr(code Code, field, format string, args ...any) *RuleError {
	return &RuleError{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Result is what Apply returns for every command: the index it was applied
// at, and either a value or a rule violation.
type Result struct {
	Index uint64
	Value any
	Err   error
}
