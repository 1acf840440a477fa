package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// TestEveryCodeMatchesItsSentinel: every code the API answers matches its
// sentinel (errors.go, codeSentinel) and no other; the codes without one
// match none.
func TestEveryCodeMatchesItsSentinel(t *testing.T) {
	sentinels := map[string]error{
		"ErrFenced": client.ErrFenced, "ErrJobDeleted": client.ErrJobDeleted, "ErrConflict": client.ErrConflict,
		"ErrNotFound": client.ErrNotFound, "ErrEpochNotPending": client.ErrEpochNotPending, "ErrBlobDeleting": client.ErrBlobDeleting,
		"ErrInvalid": client.ErrInvalid, "ErrUnavailable": client.ErrUnavailable, "ErrOutcomeUnknown": client.ErrOutcomeUnknown,
		"ErrUnauthenticated": client.ErrUnauthenticated, "ErrForbidden": client.ErrForbidden,
	}
	want := map[wire.Code][]string{
		wire.CodeFenced:     {"ErrFenced"},
		wire.CodeJobDeleted: {"ErrJobDeleted", "ErrFenced"},

		wire.CodeConflict:           {"ErrConflict"},
		wire.CodeEpochNotIncreasing: {"ErrConflict"},
		wire.CodeEpochNotCompleted:  {"ErrConflict"},
		wire.CodeTooManyPending:     {"ErrConflict"},
		wire.CodeNoAttempt:          {"ErrConflict"},
		wire.CodeJobPinned:          {"ErrConflict"},

		wire.CodeNotFound:      {"ErrNotFound"},
		wire.CodeRouteNotFound: {"ErrNotFound"},

		wire.CodeEpochNotPending: {"ErrEpochNotPending"},

		wire.CodeBlobDeleting: {"ErrBlobDeleting"},
		wire.CodeBlobGone:     {"ErrBlobDeleting"},
		wire.CodeBlobExpired:  {"ErrBlobDeleting"},

		wire.CodeInvalid:           {"ErrInvalid"},
		wire.CodeInvalidJSON:       {"ErrInvalid"},
		wire.CodeUnknownField:      {"ErrInvalid"},
		wire.CodePayloadTooLarge:   {"ErrInvalid"},
		wire.CodeBodyTooLarge:      {"ErrInvalid"},
		wire.CodeManifestMismatch:  {"ErrInvalid"},
		wire.CodeCapabilityMissing: {"ErrInvalid"},
		wire.CodeTaskNotInAttempt:  {"ErrInvalid"},
		wire.CodeTaskNotExpected:   {"ErrInvalid"},
		wire.CodeBlobUnknown:       {"ErrInvalid"},
		wire.CodeMethodNotAllowed:  {"ErrInvalid"},

		wire.CodeNoLeader:    {"ErrUnavailable"},
		wire.CodeNotLeader:   {"ErrUnavailable"},
		wire.CodeUnavailable: {"ErrUnavailable"},
		wire.CodeNotReady:    {"ErrUnavailable"},
		wire.CodeTimeout:     {"ErrUnavailable"},
		wire.CodeRateLimited: {"ErrUnavailable"},

		wire.CodeOutcomeUnknown: {"ErrOutcomeUnknown"},

		wire.CodeUnauthenticated: {"ErrUnauthenticated"},
		wire.CodeForbidden:       {"ErrForbidden"},

		wire.CodeInternal:  nil,
		wire.CodeBadBackup: nil,
		"some_future_code": nil,
	}
	for code, names := range want {
		err := error(&client.APIError{Status: 400, Code: code})
		for name, s := range sentinels {
			wanted := false
			for _, n := range names {
				wanted = wanted || n == name
			}
			if errors.Is(err, s) != wanted {
				t.Errorf("code %s: errors.Is(%s) = %v, want %v", code, name, !wanted, wanted)
			}
		}
	}
}

// TestRetryErrorMatches: a RetryError matches ErrOutcomeUnknown or
// ErrUnavailable, never both, and unwraps its last failure only when that
// cannot blur the outcome: always when the outcome is known, and only the
// caller's context error when it is not.
func TestRetryErrorMatches(t *testing.T) {
	fenced := &client.APIError{Status: 409, Code: wire.CodeFenced}
	for _, tc := range []struct {
		err                  *client.RetryError
		unknown, last        bool
		canceled, deadlineEx bool
	}{
		{&client.RetryError{Last: fenced}, false, true, false, false},
		{&client.RetryError{Unknown: true, Last: fenced}, true, false, false, false},
		{&client.RetryError{Unknown: true, Last: context.Canceled}, true, false, true, false},
		{&client.RetryError{Unknown: true, Last: context.DeadlineExceeded}, true, false, false, true},
		{&client.RetryError{Unknown: true, Last: fmt.Errorf("%w after %w", context.Canceled, fenced)}, true, false, true, false},
	} {
		e := tc.err
		if errors.Is(e, client.ErrOutcomeUnknown) != tc.unknown || errors.Is(e, client.ErrUnavailable) == tc.unknown {
			t.Errorf("%v: outcome unknown %v, unavailable %v", e, errors.Is(e, client.ErrOutcomeUnknown), errors.Is(e, client.ErrUnavailable))
		}
		if errors.Is(e, client.ErrFenced) != tc.last {
			t.Errorf("%v: matches its last failure %v, want %v", e, !tc.last, tc.last)
		}
		if errors.Is(e, context.Canceled) != tc.canceled || errors.Is(e, context.DeadlineExceeded) != tc.deadlineEx {
			t.Errorf("%v: canceled %v, deadline %v; want %v, %v", e, errors.Is(e, context.Canceled), errors.Is(e, context.DeadlineExceeded), tc.canceled, tc.deadlineEx)
		}
	}
}
