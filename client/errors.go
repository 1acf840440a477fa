package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/metastore/metastore/wire"
)

// Sentinel errors. Every error the API answers is an *APIError, which
// matches (errors.Is) the sentinel of its code; see APIError.Is for the
// table. The codes themselves stay available: errors.Is(err,
// wire.ErrEpochNotIncreasing) also works, for every state-machine code.
var (
	// ErrFenced: the write carries the generation of an attempt that a newer
	// attempt superseded (or an attempt id that was superseded). The worker
	// is a zombie and must stop.
	ErrFenced = errors.New("metastore: fenced by a newer attempt")
	// ErrJobDeleted: the job was deleted (job_deleted, 410). The worker
	// belongs to it and must stop; the error also matches ErrFenced.
	ErrJobDeleted = errors.New("metastore: job deleted")
	// ErrConflict: the request disagrees with the stored state: a different
	// ack for a task and epoch that already has one, an attempt id reused
	// with another task set, an epoch that is not above the last one, too
	// many pending epochs, no attempt yet, an epoch that is not completed.
	ErrConflict = errors.New("metastore: conflict with the stored state")
	// ErrNotFound: the job, epoch, attempt, savepoint or blob does not exist
	// (or is no longer remembered).
	ErrNotFound = errors.New("metastore: not found")
	// ErrEpochNotPending: the epoch was aborted or completed before this ack
	// or abort, or belongs to another generation.
	ErrEpochNotPending = errors.New("metastore: epoch is not pending")
	// ErrBlobDeleting: a manifest references a blob that cannot be referenced
	// any more: the garbage collector is deleting it (blob_deleting) or has
	// deleted it (blob_gone), or its upload intent expired before it was
	// committed (blob_expired). Upload the data again under a new key.
	ErrBlobDeleting = errors.New("metastore: blob is being deleted or gone")
	// ErrInvalid: the request is malformed or breaks a rule on its own terms:
	// invalid_argument, invalid_json, unknown_field, payload_too_large,
	// body_too_large, manifest_mismatch, capability_missing,
	// task_not_in_attempt, task_not_expected, blob_unknown,
	// method_not_allowed. Repeating it cannot succeed.
	ErrInvalid = errors.New("metastore: invalid request")
	// ErrUnavailable: the store could not take the request, and it did not
	// take effect: no leader, leadership moving, a member shutting down or
	// unreachable, until the client's attempts ran out. Retrying later is
	// safe.
	ErrUnavailable = errors.New("metastore: unavailable")
	// ErrOutcomeUnknown: a mutation may or may not have been applied (the
	// leader crashed or the connection broke after the request was sent),
	// and the client's attempts ran out before an answer settled it. Every
	// mutation is idempotent by content: repeat the same call (same
	// arguments) to learn the outcome. Never assume it failed.
	ErrOutcomeUnknown = errors.New("metastore: outcome unknown")

	// ErrUnauthenticated: the cluster requires a token and the request had
	// none, or one it does not know (never created, or revoked). Not
	// retried.
	ErrUnauthenticated = errors.New("metastore: unauthenticated")
	// ErrForbidden: the token (or signed URL) does not grant the request:
	// a worker token used outside its job scope or on an operator route.
	// Not retried.
	ErrForbidden = errors.New("metastore: forbidden")

	// ErrEpochAborted: AwaitEpoch saw the epoch aborted; the error is an
	// *EpochAbortedError with the reason.
	ErrEpochAborted = errors.New("metastore: epoch aborted")
	// ErrNothingToRecover: Restore.OpenState of a task that had no state
	// capability in the checkpoint. No request was made.
	ErrNothingToRecover = errors.New("metastore: nothing to recover")
	// ErrNoPriorState: Restore.OpenState of a task the checkpoint does not
	// know (new after a topology change), or of a job without a completed
	// checkpoint. No request was made.
	ErrNoPriorState = errors.New("metastore: no prior state")
	// ErrChecksum: the bytes of a range read back (Restore.OpenState,
	// ReadRange) did not match the CRC32C its worker declared in the ack,
	// in every one of the client's attempts; the error is a
	// *ChecksumError naming the range.
	ErrChecksum = errors.New("metastore: checksum mismatch")
)

// ChecksumError is a range whose bytes did not match its declared CRC32C
// in any of Attempts reads.
type ChecksumError struct {
	Key            string
	Offset, Length uint64
	// Want is the declared CRC32C, Got that of the last read's bytes.
	Want, Got string
	Attempts  int
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("metastore: blob %s offset %d length %d: crc32c mismatch: want %s, got %s (%d reads)", e.Key, e.Offset, e.Length, e.Want, e.Got, e.Attempts)
}

// Unwrap makes the error match ErrChecksum.
func (e *ChecksumError) Unwrap() error { return ErrChecksum }

// codeSentinel maps each API code to its sentinel. Codes not listed
// (internal, bad_backup, unknown future codes) match no sentinel.
var codeSentinel = map[wire.Code]error{
	wire.CodeFenced:     ErrFenced,
	wire.CodeJobDeleted: ErrJobDeleted,

	wire.CodeConflict:           ErrConflict,
	wire.CodeEpochNotIncreasing: ErrConflict,
	wire.CodeEpochNotCompleted:  ErrConflict,
	wire.CodeTooManyPending:     ErrConflict,
	wire.CodeNoAttempt:          ErrConflict,
	wire.CodeJobPinned:          ErrConflict,

	wire.CodeNotFound:      ErrNotFound,
	wire.CodeRouteNotFound: ErrNotFound,

	wire.CodeEpochNotPending: ErrEpochNotPending,

	wire.CodeBlobDeleting: ErrBlobDeleting,
	wire.CodeBlobGone:     ErrBlobDeleting,
	wire.CodeBlobExpired:  ErrBlobDeleting,

	wire.CodeInvalid:           ErrInvalid,
	wire.CodeInvalidJSON:       ErrInvalid,
	wire.CodeUnknownField:      ErrInvalid,
	wire.CodePayloadTooLarge:   ErrInvalid,
	wire.CodeBodyTooLarge:      ErrInvalid,
	wire.CodeManifestMismatch:  ErrInvalid,
	wire.CodeCapabilityMissing: ErrInvalid,
	wire.CodeTaskNotInAttempt:  ErrInvalid,
	wire.CodeTaskNotExpected:   ErrInvalid,
	wire.CodeBlobUnknown:       ErrInvalid,
	wire.CodeMethodNotAllowed:  ErrInvalid,

	wire.CodeNoLeader:    ErrUnavailable,
	wire.CodeNotLeader:   ErrUnavailable,
	wire.CodeUnavailable: ErrUnavailable,
	wire.CodeNotReady:    ErrUnavailable,
	wire.CodeTimeout:     ErrUnavailable,
	wire.CodeRateLimited: ErrUnavailable,

	wire.CodeOutcomeUnknown: ErrOutcomeUnknown,

	wire.CodeUnauthenticated: ErrUnauthenticated,
	wire.CodeForbidden:       ErrForbidden,
}

// APIError is an error answer of the API:
// {"error": {"code", "field", "message", "retryable"}} with its HTTP status.
// An answer that is not such JSON (a proxy's error page) becomes an APIError
// with Code "http_<status>".
type APIError struct {
	Status    int       `json:"-"`
	Code      wire.Code `json:"code"`
	Field     string    `json:"field,omitempty"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
	// RetryAfter is the wait the member asked for (Retry-After), if any.
	RetryAfter time.Duration `json:"-"`
	// Method and Path name the request that failed.
	Method string `json:"-"`
	Path   string `json:"-"`
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("metastore: %s %s: %d %s", e.Method, e.Path, e.Status, e.Code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches the sentinel of the error's code (table in the sentinels'
// docs), and any *wire.RuleError sentinel with the same code, so
// errors.Is(err, wire.ErrTaskNotInAttempt) works too.
func (e *APIError) Is(target error) bool {
	if s, ok := codeSentinel[e.Code]; ok && s == target {
		return true
	}
	if e.Code == wire.CodeJobDeleted && target == ErrFenced {
		return true // a deleted job's worker is fenced too
	}
	var re *wire.RuleError
	if errors.As(target, &re) {
		return re.Code == e.Code
	}
	return false
}

// RetryError is returned when a call ran out of attempts (Config.MaxAttempts)
// on failures that may pass: it matches ErrOutcomeUnknown when a mutation
// may have been applied by one of the attempts, and ErrUnavailable
// otherwise, never both. Last is the last attempt's failure; it is
// unwrapped only when the outcome is known (so an unknown outcome never
// matches ErrUnavailable through it), or when it is the caller's context
// error.
type RetryError struct {
	Method   string
	Path     string
	Attempts int
	// Unknown reports that a mutation may have been applied.
	Unknown bool
	Last    error
}

func (e *RetryError) Error() string {
	what := "unavailable"
	if e.Unknown {
		what = "outcome unknown (the request may have been applied; repeating it is safe)"
	}
	return fmt.Sprintf("metastore: %s %s: %s after %d attempt(s): %v", e.Method, e.Path, what, e.Attempts, e.Last)
}

// Is matches ErrOutcomeUnknown or ErrUnavailable.
func (e *RetryError) Is(target error) bool {
	if e.Unknown {
		return target == ErrOutcomeUnknown
	}
	return target == ErrUnavailable
}

// Unwrap returns the last failure when doing so cannot blur the outcome.
func (e *RetryError) Unwrap() error {
	if !e.Unknown || errors.Is(e.Last, context.Canceled) || errors.Is(e.Last, context.DeadlineExceeded) {
		if e.Unknown {
			// Only the context error, not the API error it may wrap.
			if errors.Is(e.Last, context.Canceled) {
				return context.Canceled
			}
			return context.DeadlineExceeded
		}
		return e.Last
	}
	return nil
}

// EpochAbortedError is AwaitEpoch's answer for an aborted epoch.
type EpochAbortedError struct {
	Job    string
	Epoch  uint64
	Reason string
	// Detail is the epoch as last read.
	Detail *wire.EpochDetail
}

func (e *EpochAbortedError) Error() string {
	return fmt.Sprintf("metastore: epoch %d of job %q was aborted: %s", e.Epoch, e.Job, e.Reason)
}

// Is matches ErrEpochAborted.
func (e *EpochAbortedError) Is(target error) bool { return target == ErrEpochAborted }
