package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"

	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// Error is the JSON error every failed request answers with:
// {"error": {"code": ..., "field": ..., "message": ...}}.
type Error struct {
	Status  int       `json:"-"`
	Code    wire.Code `json:"code"`
	Field   string    `json:"field,omitempty"`
	Message string    `json:"message"`
	// Retryable tells the client the request did not take effect, or that
	// repeating it is safe, and that it may succeed later. It travels as
	// "retryable" in the JSON body, with a Retry-After header.
	Retryable bool `json:"retryable"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// body is the error as the API sends it.
func (e *Error) body() wire.ErrorResponse {
	return wire.ErrorResponse{Error: wire.Error{Code: e.Code, Field: e.Field, Message: e.Message, Retryable: e.Retryable}}
}

func apiErr(status int, code wire.Code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// toAPIError turns any error into the answer the client gets.
func toAPIError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var re *wire.RuleError
	if errors.As(err, &re) {
		return &Error{Status: wire.RuleStatus(re.Code), Code: re.Code, Field: re.Field, Message: re.Message}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apiErr(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "", "request body is larger than %d bytes", mbe.Limit)
	}
	var dfe *node.DiskFullError
	if errors.As(err, &dfe) {
		return &Error{Status: http.StatusInsufficientStorage, Code: wire.CodeInsufficientStorage, Retryable: true,
			Message: dfe.Error() + "; nothing was applied; reads are still served"}
	}
	switch {
	case errors.Is(err, node.ErrUnknownOutcome):
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeOutcomeUnknown, Retryable: true,
			Message: "the write may or may not have been applied (" + err.Error() + "); repeating it is safe: every mutation is idempotent by content"}
	case errors.Is(err, node.ErrNotLeader):
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotLeader, Retryable: true, Message: "this member lost leadership; retry"}
	case errors.Is(err, node.ErrNoLeader):
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNoLeader, Retryable: true, Message: "the cluster has no leader at the moment; retry"}
	case errors.Is(err, node.ErrShutdown):
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, Retryable: true, Message: "this member is shutting down; retry on another"}
	case errors.Is(err, node.ErrTryAgain):
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, Retryable: true, Message: err.Error()}
	case errors.Is(err, node.ErrQuorumAtRisk):
		return apiErr(http.StatusConflict, wire.CodeQuorumAtRisk, "", "%v", err)
	case errors.Is(err, node.ErrMemberConflict):
		return apiErr(http.StatusConflict, wire.CodeConflict, "id", "%v", err)
	case errors.Is(err, node.ErrBadBackup):
		return apiErr(http.StatusBadRequest, wire.CodeBadBackup, "", "%v", err)
	case errors.Is(err, node.ErrUnknownMember):
		return apiErr(http.StatusNotFound, wire.CodeNotFound, "id", "%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Code: wire.CodeTimeout, Retryable: true, Message: "the request timed out"}
	case errors.Is(err, context.Canceled):
		return &Error{Status: 499, Code: wire.CodeTimeout, Retryable: true, Message: "the client went away"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: wire.CodeInternal, Message: err.Error()}
}

// decodeBody reads a JSON body strictly: one value, valid UTF-8, no
// unknown fields, no key twice in an object, nested at most maxJSONDepth
// deep. An empty body leaves v as it is when allowEmpty.
func decodeBody(r *http.Request, v any, allowEmpty bool) error {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return jsonError(err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if allowEmpty {
			return nil
		}
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body is empty; a JSON object is required")
	}
	if !utf8.Valid(raw) {
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body is not valid UTF-8")
	}
	if err := checkJSONShape(raw); err != nil {
		return err
	}
	return decodeJSON(raw, v)
}

// decodeJSON decodes the one JSON value of raw into v as encoding/json
// does with unknown fields disallowed. github.com/segmentio/encoding's
// decoder, made to be encoding/json's drop-in, decodes it first (an ack
// batch in a third of the time: decoding the ack batches with encoding/json
// was the largest cost of the leader's HTTP server); encoding/json decodes
// whatever it does not take whole, so encoding/json words every error and
// decides every body the faster one refuses. TestDecodeJSONAgrees and
// FuzzDecodeJSON hold the two to the same answers.
func decodeJSON(raw []byte, v any) error {
	rv := reflect.ValueOf(v)
	var saved reflect.Value
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		saved = reflect.New(rv.Elem().Type()).Elem()
		saved.Set(rv.Elem())
	}
	rest, err := segjson.Parse(raw, v, segjson.DisallowUnknownFields)
	if err == nil && len(rest) == 0 {
		return nil
	}
	if saved.IsValid() {
		rv.Elem().Set(saved) // what v held before, as encoding/json would find it
	}
	return decodeStd(raw, v)
}

// decodeStd is decodeJSON with encoding/json alone.
func decodeStd(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body holds more than one JSON value")
	}
	return nil
}

// maxJSONDepth bounds the nesting of a request body: no request nests
// deeper than a few levels.
const maxJSONDepth = 32

// checkJSONShape refuses a first JSON value of raw nested deeper than
// maxJSONDepth or with a key twice in one object (decoders disagree on
// which of the two wins; the API takes neither). The byte scanner of
// jsonshape.go passes the bodies clients send without allocating; what it
// does not pass (a syntax error, a refused shape, an escaped key, a very
// wide object) is walked again by walkJSONShape, which names the problem.
func checkJSONShape(raw []byte) error {
	if shapeOK(raw) {
		return nil
	}
	return walkJSONShape(raw)
}

// walkJSONShape is checkJSONShape with encoding/json's tokenizer: slower
// (a value per token), and the one that words the errors.
func walkJSONShape(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object  bool
		wantKey bool
		keys    map[string]bool
		key     string // the key whose value is being read
		path    string
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
			} else {
				key, _ := tok.(string)
				if top.keys[key] {
					field := strings.TrimPrefix(top.path+"."+key, ".")
					return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, field, "key %q appears twice in one object", key)
				}
				top.keys[key] = true
				top.key = key
				top.wantKey = false
				continue
			}
		} else if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
			if len(stack) >= maxJSONDepth {
				return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body is nested deeper than %d levels", maxJSONDepth)
			}
			path := ""
			if top != nil {
				path = top.path
				if top.object {
					path = strings.TrimPrefix(path+"."+top.key, ".")
				} else {
					path += "[]"
				}
			}
			stack = append(stack, &frame{object: d == '{', wantKey: d == '{', keys: map[string]bool{}, path: path})
			continue
		} else if ok && d == ']' {
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object wants its next key.
		if len(stack) == 0 {
			return nil
		}
		if t := stack[len(stack)-1]; t.object {
			t.wantKey = true
		}
	}
}

// jsonKind names what a Go type accepts in JSON, for error messages that
// speak JSON rather than Go ("an object", not "api.memberBody").
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "a JSON array"
	case reflect.String:
		return "a JSON string"
	case reflect.Bool:
		return "true or false"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer from 0 to %d", ^uint64(0)>>(64-t.Bits()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer from %d to %d", int64(-1)<<(t.Bits()-1), int64(^uint64(0)>>(65-t.Bits())))
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a JSON value"
}

func jsonError(err error) error {
	var ae *Error // the body's reader refused it (limits.go)
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.As(err, &syn):
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body must be %s, not a JSON %s", jsonKind(typ.Type), typ.Value)
		}
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, typ.Field, "field %q: expected %s, got JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "request body ends in the middle of a JSON value")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return apiErr(http.StatusBadRequest, wire.CodeUnknownField, name, "unknown field %q", name)
	}
	return apiErr(http.StatusBadRequest, wire.CodeInvalidJSON, "", "%s", strings.TrimPrefix(msg, "json: "))
}
