package wire

import (
	"fmt"
	"net/http"
)

// Code is the stable, machine-readable name of an error the API answers
// with. Codes are part of the HTTP API (the ErrorCode enum of
// docs/openapi.json): never rename or reuse one.
type Code string

// Rule codes: a request that breaks a rule of the state machine, or whose
// shape is wrong. The state machine answers them identically on every
// member; a request refused by one changed nothing.
const (
	// CodeInvalid (400): a field is malformed or out of range.
	CodeInvalid Code = "invalid_argument"
	// CodeNotFound (404): the job, epoch, attempt, pin, blob, member or
	// manifest does not exist (or is no longer remembered).
	CodeNotFound Code = "not_found"
	// CodeConflict (409): the request disagrees with the stored state (a
	// different ack for a slot that has one, an attempt id reused with
	// another task set, a token accessor taken).
	CodeConflict Code = "conflict"
	// CodeFenced (409): the generation is not the job's current one: a
	// newer attempt superseded the writer.
	CodeFenced Code = "fenced"
	// CodeEpochNotIncreasing (409): the epoch is not above every epoch
	// the job began before.
	CodeEpochNotIncreasing Code = "epoch_not_increasing"
	// CodeEpochNotPending (409): the epoch completed or was aborted, or
	// belongs to another generation.
	CodeEpochNotPending Code = "epoch_not_pending"
	// CodeEpochNotCompleted (409): a pin, restore or manifest base names an
	// epoch that is not completed and retained.
	CodeEpochNotCompleted Code = "epoch_not_completed"
	// CodeTaskNotInAttempt (409): the task is not in the attempt's task set.
	CodeTaskNotInAttempt Code = "task_not_in_attempt"
	// CodeTaskNotExpected (409): the task checkpoints nothing, so no epoch
	// waits for its ack.
	CodeTaskNotExpected Code = "task_not_expected"
	// CodeCapabilityMissing (409): a payload or manifest of a kind the task
	// did not declare.
	CodeCapabilityMissing Code = "capability_missing"
	// CodePayloadTooLarge (413): an inline payload above MaxInlinePayload.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeNoAttempt (409): the job has no attempt yet.
	CodeNoAttempt Code = "no_attempt"
	// CodeTooManyPending (409): the job has MaxPendingEpochs epochs pending.
	CodeTooManyPending Code = "too_many_pending"
	// CodeManifestMismatch (409): a manifest delta does not apply to the
	// stored manifest (a segment added twice, one removed that is absent,
	// a base and a segment left at one reference).
	CodeManifestMismatch Code = "manifest_mismatch"
	// CodeBlobUnknown (409): a manifest references a key with no upload
	// intent and no record.
	CodeBlobUnknown Code = "blob_unknown"
	// CodeBlobDeleting (409): a manifest references a blob the collector
	// is deleting.
	CodeBlobDeleting Code = "blob_deleting"
	// CodeBlobGone (409): a manifest references a blob the collector
	// deleted.
	CodeBlobGone Code = "blob_gone"
	// CodeBlobExpired (409): a manifest commits an upload whose intent
	// expired before it was committed.
	CodeBlobExpired Code = "blob_expired"
	// CodeJobPinned (409): a job delete without force while the job has
	// pinned savepoints; the message names them.
	CodeJobPinned Code = "job_pinned"
	// CodeJobDeleted (410): a write for a job that was deleted (a zombie
	// worker of one of its attempts); nothing was changed. A job created
	// again under the name answers fenced to the old generations instead.
	CodeJobDeleted Code = "job_deleted"
)

// Codes of the HTTP layer: what happens before or around the state machine.
const (
	// CodeInvalidJSON (400): the body is not one valid JSON value of the
	// expected shape.
	CodeInvalidJSON Code = "invalid_json"
	// CodeUnknownField (400): the body has a field the request does not
	// know.
	CodeUnknownField Code = "unknown_field"
	// CodeBodyTooLarge (413): the body is above --max-body-bytes.
	CodeBodyTooLarge Code = "body_too_large"
	// CodeNotLeader (503, retryable): the member lost leadership, or a
	// forwarded request reached a member that is not the leader.
	CodeNotLeader Code = "not_leader"
	// CodeNoLeader (503, retryable): the cluster has no leader.
	CodeNoLeader Code = "no_leader"
	// CodeUnavailable (503, retryable): the member cannot take the request
	// now (shutting down, leader unreachable, leadership moving).
	CodeUnavailable Code = "unavailable"
	// CodeOutcomeUnknown (503, retryable): a write may or may not have been
	// applied; repeating it is safe.
	CodeOutcomeUnknown Code = "outcome_unknown"
	// CodeTimeout (504, retryable): the request timed out.
	CodeTimeout Code = "timeout"
	// CodeNotReady (503, retryable): the member is not ready to serve.
	CodeNotReady Code = "not_ready"
	// CodeMethodNotAllowed (405): the route does not take the method.
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeRouteNotFound (404): no route has the path.
	CodeRouteNotFound Code = "route_not_found"
	// CodeInternal (500): a failure of the member itself.
	CodeInternal Code = "internal"
	// CodeBadBackup (400): the upload is not a backup this build can
	// restore; nothing was changed.
	CodeBadBackup Code = "bad_backup"
	// CodeHeaderTooLarge (431): the request line and headers are above
	// --http-max-header-bytes.
	CodeHeaderTooLarge Code = "header_too_large"
	// CodeQuorumAtRisk (409): a membership change after which the voters
	// the leader can reach would not be a quorum.
	CodeQuorumAtRisk Code = "quorum_at_risk"
	// CodeUnauthenticated (401): no token, or one the cluster does not know
	// (never created, or revoked).
	CodeUnauthenticated Code = "unauthenticated"
	// CodeForbidden (403): the token, signed URL or member signature does
	// not grant the request.
	CodeForbidden Code = "forbidden"
	// CodeInsufficientStorage (507, retryable): the member's data directory
	// is (nearly) full; the write was not applied.
	CodeInsufficientStorage Code = "insufficient_storage"
	// CodeRateLimited (429, retryable, with Retry-After): the client is over
	// its request rate or its requests in flight.
	CodeRateLimited Code = "rate_limited"
	// CodeRequestTimeout (408): the body did not arrive within the body
	// timeout.
	CodeRequestTimeout Code = "request_timeout"
	// CodeHostNotAllowed (421): the Host header names a host this member
	// does not answer to (--allowed-hosts).
	CodeHostNotAllowed Code = "host_not_allowed"
	// CodeCrossOrigin (403): a browser sent the request from a page of
	// another origin (--allowed-origins).
	CodeCrossOrigin Code = "cross_origin_refused"
	// CodeUnsupportedMediaType (415): a JSON body without
	// Content-Type: application/json.
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	// CodeQuotaExceeded (507): a job holds as many open uploads or live
	// bytes as its quota allows; the request was not applied.
	CodeQuotaExceeded Code = "quota_exceeded"
)

// ruleStatus is the HTTP status of each rule code.
var ruleStatus = map[Code]int{
	CodeInvalid:            http.StatusBadRequest,
	CodeNotFound:           http.StatusNotFound,
	CodeConflict:           http.StatusConflict,
	CodeFenced:             http.StatusConflict,
	CodeEpochNotIncreasing: http.StatusConflict,
	CodeEpochNotPending:    http.StatusConflict,
	CodeEpochNotCompleted:  http.StatusConflict,
	CodeTaskNotInAttempt:   http.StatusConflict,
	CodeTaskNotExpected:    http.StatusConflict,
	CodeCapabilityMissing:  http.StatusConflict,
	CodePayloadTooLarge:    http.StatusRequestEntityTooLarge,
	CodeNoAttempt:          http.StatusConflict,
	CodeTooManyPending:     http.StatusConflict,
	CodeManifestMismatch:   http.StatusConflict,
	CodeBlobUnknown:        http.StatusConflict,
	CodeBlobDeleting:       http.StatusConflict,
	CodeBlobGone:           http.StatusConflict,
	CodeBlobExpired:        http.StatusConflict,
	CodeJobPinned:          http.StatusConflict,
	CodeJobDeleted:         http.StatusGone,
}

// RuleStatus is the HTTP status a rule violation with code c answers with;
// 409 for a code that is not a rule code.
func RuleStatus(c Code) int {
	if s, ok := ruleStatus[c]; ok {
		return s
	}
	return http.StatusConflict
}

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
	ErrJobPinned          = &RuleError{Code: CodeJobPinned}
	ErrJobDeleted         = &RuleError{Code: CodeJobDeleted}
)

// RuleError is a rule violation: a request whose shape is wrong (found by
// a Validate or Check function of this package before anything is
// proposed) or that breaks a rule of the state machine when applied. It is
// an ordinary result, identical on every member, and changes nothing.
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

// Errorf builds a *RuleError with a formatted message.
func Errorf(code Code, field, format string, args ...any) *RuleError {
	return &RuleError{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Error is the body of every failed request:
// {"error": {"code", "field", "message", "retryable"}}.
type Error struct {
	Code Code `json:"code"`
	// Field names the offending request field, when there is one.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Retryable tells the client the request did not take effect, or that
	// repeating it is safe, and that it may succeed later (with a
	// Retry-After header).
	Retryable bool `json:"retryable"`
}

// ErrorResponse wraps an Error as the API sends it.
type ErrorResponse struct {
	Error Error `json:"error"`
}
