package messages

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrorCode is a stable, machine-readable reason for a failed request.
type ErrorCode string

// The error codes of the API. They never change meaning; new ones may be added.
const (
	CodeBadRequest          ErrorCode = "bad_request"
	CodeMalformed           ErrorCode = "malformed"
	CodeUnsupportedVersion  ErrorCode = "unsupported_version"
	CodeInvalidName         ErrorCode = "invalid_name"
	CodeInvalidArguments    ErrorCode = "invalid_arguments"
	CodePayloadTooLarge     ErrorCode = "payload_too_large"
	CodeToolNotFound        ErrorCode = "tool_not_found"
	CodeCallNotFound        ErrorCode = "call_not_found"
	CodeTurnNotFound        ErrorCode = "turn_not_found"
	CodeApprovalNotFound    ErrorCode = "approval_not_found"
	CodeToolUnavailable     ErrorCode = "tool_unavailable"
	CodeToolDisabled        ErrorCode = "tool_disabled"
	CodeDenied              ErrorCode = "denied"
	CodeNotAdmitted         ErrorCode = "not_admitted"
	CodeIdempotencyConflict ErrorCode = "idempotency_conflict"
	CodeConflict            ErrorCode = "conflict"
	// CodeApprovalNotPending: a decision on an approval that is no longer
	// pending (decided, withdrawn by its call's cancel, or expired); its
	// message says which, and by whom.
	CodeApprovalNotPending ErrorCode = "approval_not_pending"
	CodeUnavailable        ErrorCode = "unavailable"
	// CodeNoResponders is never sent by a coordinator: a client reports it
	// when no coordinator answers on the API subject (NATS's "no
	// responders"), so nothing received the request and it is safe to send
	// again.
	CodeNoResponders ErrorCode = "no_responders"
	// CodeTimeout: the request could not be answered in time, and what
	// became of it is unknown; for a submit, the call may have been
	// queued. A coordinator sends it when JetStream did not answer in time;
	// a client reports it when an attempt of a request that is not safe to
	// send twice went unanswered.
	CodeTimeout  ErrorCode = "timeout"
	CodeInternal ErrorCode = "internal"
	// CodeForbidden: the authenticated caller may not act as the agent
	// (or by) the request names, or the endpoint is for operators.
	CodeForbidden ErrorCode = "forbidden"
	// CodeTooManyRequests: the caller's user already holds as many long
	// waits (submits with wait, calls.get and calls.events with wait_ms)
	// as the coordinator allows one user; it is refused at once, and may
	// be sent again once one of its waits has ended.
	CodeTooManyRequests ErrorCode = "too_many_requests"
)

// Status returns the HTTP-style status that goes in the Nats-Service-Error-Code header.
func (c ErrorCode) Status() int {
	switch c {
	case CodeBadRequest, CodeMalformed, CodeUnsupportedVersion, CodeInvalidName:
		return 400
	case CodeDenied, CodeNotAdmitted, CodeForbidden:
		return 403
	case CodeToolNotFound, CodeCallNotFound, CodeTurnNotFound, CodeApprovalNotFound:
		return 404
	case CodeIdempotencyConflict, CodeConflict, CodeApprovalNotPending:
		return 409
	case CodePayloadTooLarge:
		return 413
	case CodeInvalidArguments:
		return 422
	case CodeTooManyRequests:
		return 429
	case CodeToolUnavailable, CodeToolDisabled, CodeUnavailable, CodeNoResponders:
		return 503
	case CodeTimeout:
		return 504
	}
	return 500
}

// StatusText is Status as the header's decimal string.
func (c ErrorCode) StatusText() string { return strconv.Itoa(c.Status()) }

// Error is the body of every failed API reply, and the Go error that carries
// it. Two Errors match under errors.Is when their codes are equal, so callers
// write errors.Is(err, messages.ErrToolNotFound).
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// Details lists individual problems, e.g. each schema violation of the arguments.
	Details []string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// AsError returns err as an *Error for a reply body: itself when it is one,
// CodeInvalidName for a NameError, and CodeInternal with err's text otherwise.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, or CodeInternal.
func CodeOf(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var n *NameError
	if errors.As(err, &n) {
		return CodeInvalidName
	}
	return CodeInternal
}

// Sentinels for errors.Is.
var (
	ErrToolNotFound        = &Error{Code: CodeToolNotFound}
	ErrCallNotFound        = &Error{Code: CodeCallNotFound}
	ErrTurnNotFound        = &Error{Code: CodeTurnNotFound}
	ErrInvalidArguments    = &Error{Code: CodeInvalidArguments}
	ErrPayloadTooLarge     = &Error{Code: CodePayloadTooLarge}
	ErrMalformed           = &Error{Code: CodeMalformed}
	ErrToolUnavailable     = &Error{Code: CodeToolUnavailable}
	ErrDenied              = &Error{Code: CodeDenied}
	ErrIdempotencyConflict = &Error{Code: CodeIdempotencyConflict}
	ErrApprovalNotFound    = &Error{Code: CodeApprovalNotFound}
	ErrNotAdmitted         = &Error{Code: CodeNotAdmitted}
	ErrToolDisabled        = &Error{Code: CodeToolDisabled}
	ErrConflict            = &Error{Code: CodeConflict}
	ErrApprovalNotPending  = &Error{Code: CodeApprovalNotPending}
	ErrUnavailable         = &Error{Code: CodeUnavailable}
	ErrNoResponders        = &Error{Code: CodeNoResponders}
	ErrTimeout             = &Error{Code: CodeTimeout}
	ErrForbidden           = &Error{Code: CodeForbidden}
	ErrTooManyRequests     = &Error{Code: CodeTooManyRequests}
	ErrBadRequest          = &Error{Code: CodeBadRequest}
	ErrUnsupportedVersion  = &Error{Code: CodeUnsupportedVersion}
	ErrInternal            = &Error{Code: CodeInternal}
)
