package transport

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrNoResponders reports that nothing answered a request: no stream
	// stores the subject of a publish, or the stream read from does not
	// exist or has no leader at the moment. errors.Is matches it also with
	// nats.ErrNoResponders and jetstream.ErrNoStreamResponse, the forms
	// nats.go gives the same condition.
	ErrNoResponders error = noResponders{}

	// ErrNotFound reports that a direct get found no message. errors.Is
	// matches it also with jetstream.ErrMsgNotFound.
	ErrNotFound error = notFound{}

	// ErrWrongLastSequence reports that a publish carrying an
	// expected-last-sequence header was refused because the stream's
	// leader holds another message where the condition expected none (or
	// an older one). The error is also a *jetstream.APIError, with code
	// JSErrCodeStreamWrongLastSequence (10071).
	ErrWrongLastSequence = errors.New("wrong last sequence")

	// ErrWriteInProcess reports that a replicated stream refused a
	// conditional publish because another conditional write on the same
	// subject (or on the subject its condition names) is being replicated
	// at that moment, proposed but not yet stored: the leader cannot check
	// the condition until it is. Nothing was stored, and nothing says the
	// condition failed: the publish may be made again a moment later. The
	// error is also a *jetstream.APIError with code
	// JSErrCodeStreamWrongLastSequenceConstant (10164), whose description
	// the server words as "wrong last sequence"; it does not match
	// ErrWrongLastSequence. Transient accepts it.
	ErrWriteInProcess = errors.New("another conditional write on the subject is in process")
)

type noResponders struct{}

func (noResponders) Error() string { return "no responders: no stream answered" }

func (noResponders) Is(target error) bool {
	return target == nats.ErrNoResponders || target == jetstream.ErrNoStreamResponse
}

type notFound struct{}

func (notFound) Error() string { return "message not found" }

func (notFound) Is(target error) bool { return target == jetstream.ErrMsgNotFound }

// StatusError is a status JetStream answered a request with, other than
// those that have an error of their own (ErrNotFound, ErrNoResponders).
type StatusError struct {
	// Status is the status code, e.g. "408".
	Status string
	// Description is the server's explanation, possibly empty.
	Description string
}

func (e *StatusError) Error() string { return "status " + e.Status + " " + e.Description }

// refusal is a JetStream API error of a publish that failed its
// expected-last-sequence condition: it unwraps to the *jetstream.APIError
// and matches ErrWrongLastSequence.
type refusal struct{ *jetstream.APIError }

func (r refusal) Unwrap() error { return r.APIError }

func (r refusal) Is(target error) bool { return target == ErrWrongLastSequence }

// inProcess is a JetStream API error of a conditional publish that a
// replicated stream could not check yet: it unwraps to the
// *jetstream.APIError and matches ErrWriteInProcess.
type inProcess struct{ *jetstream.APIError }

func (r inProcess) Unwrap() error { return r.APIError }

func (r inProcess) Is(target error) bool { return target == ErrWriteInProcess }

// apiError returns e, made to match ErrWrongLastSequence or
// ErrWriteInProcess if it is one of those refusals.
func apiError(e *jetstream.APIError) error {
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence:
		return refusal{e}
	case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return inProcess{e}
	}
	return e
}

// errCodeDuplicateInProcess is JetStream's answer to a publish whose
// Nats-Msg-Id another publish is storing at that moment
// (JSStreamDuplicateMessageConflict).
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

// DuplicateInProcess reports whether err is JetStream refusing a publish
// because another publish of the same message ID is being stored: a
// duplicate, not a failure.
func DuplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDuplicateInProcess
}

// stored reads the headers of a direct-get reply. A reply without data
// but with a status is the end of a batch (204), no message (404), no
// stream (503) or a failure; end reports whether it ends the request, and
// err is nil for the end of a batch. Otherwise the reply is a message:
// seq is its sequence in the stream, and msg.Subject is set to the
// subject it was stored on (the reply came on the requester's inbox).
func stored(msg *nats.Msg) (seq uint64, end bool, err error) {
	if status := msg.Header.Get("Status"); status != "" && len(msg.Data) == 0 {
		switch status {
		case "204":
			return 0, true, nil
		case "404":
			return 0, true, ErrNotFound
		case "503":
			return 0, true, ErrNoResponders
		default:
			return 0, true, &StatusError{Status: status, Description: msg.Header.Get("Description")}
		}
	}
	seq, err = strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("direct-get reply on %s without a sequence", msg.Subject)
	}
	msg.Subject = msg.Header.Get(jetstream.SubjectHeader)
	return seq, false, nil
}

// TooLarge reports whether err is a stream refusing a message for its
// size (the stream's max_msg_size, or the server's max_payload): a refusal
// that no retry of the same message overcomes.
func TooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}
