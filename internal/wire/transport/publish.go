package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher stores messages in streams and reads their acknowledgements
// on an inbox. On the call path it is lighter than nats.go's JetStream
// publish: no future per message and no JSON decoding of a successful
// acknowledgement. A Publisher is safe for concurrent use.
type Publisher struct {
	nc    *nats.Conn
	inbox *Inbox
}

// NewPublisher returns a publisher on the connection whose
// acknowledgements arrive on inbox. The publisher does not own the inbox:
// closing the inbox ends the waits of its publishes.
func NewPublisher(nc *nats.Conn, inbox *Inbox) *Publisher {
	return &Publisher{nc: nc, inbox: inbox}
}

// AckFunc receives the outcome of a publish: the stored message's sequence
// and whether the stream had it already (a duplicate message ID), or why
// the stream did not store it.
type AckFunc func(seq uint64, duplicate bool, err error)

// DefaultAckWait bounds PublishWait when its context has no deadline.
const DefaultAckWait = 30 * time.Second

// PublishThen sends msg to a stream and hands the outcome to then once the
// stream acknowledges it, on the inbox's goroutine: then must not block.
// PublishThen does not wait, so it takes no context: timeout bounds the
// wait for the acknowledgement, give or take a second, and no
// acknowledgement within it is an error wrapping context.DeadlineExceeded.
// It publishes a copy of msg with its own reply subject and leaves msg as
// it is, so that a message can be sent again (a retry after a timeout)
// while its earlier send is still in hand. If PublishThen returns an
// error, then is not called; otherwise then is called exactly once.
//
// A stream's refusal is a *jetstream.APIError (ErrWrongLastSequence for a
// failed expected-last-sequence condition, ErrWriteInProcess for one a
// replicated stream could not check yet); a subject no stream stores is
// ErrNoResponders.
func (p *Publisher) PublishThen(msg *nats.Msg, timeout time.Duration, then AckFunc) error {
	subject := msg.Subject
	reply, cancel, err := p.inbox.Expect(timeout, func(ack *nats.Msg) {
		if ack == nil {
			then(0, false, fmt.Errorf("publish to %s: no acknowledgement within %v: %w", subject, timeout, context.DeadlineExceeded))
			return
		}
		then(parsePubAck(ack))
	})
	if err != nil {
		return err
	}
	sent := *msg
	sent.Reply = reply
	if err := p.nc.PublishMsg(&sent); err != nil {
		cancel()
		return err
	}
	return nil
}

// PublishWait is PublishThen for a caller that waits: it returns the
// stored message's sequence and whether the stream had it already (a
// duplicate message ID), with the errors PublishThen describes. The wait
// ends with ctx, returning ctx.Err(); without a deadline, after
// DefaultAckWait. A publish whose wait ended may still be stored.
func (p *Publisher) PublishWait(ctx context.Context, msg *nats.Msg) (seq uint64, duplicate bool, err error) {
	type ack struct {
		seq       uint64
		duplicate bool
		err       error
	}
	timeout := DefaultAckWait
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	acks := make(chan ack, 1)
	if err := p.PublishThen(msg, timeout, func(seq uint64, duplicate bool, err error) { acks <- ack{seq, duplicate, err} }); err != nil {
		return 0, false, err
	}
	select {
	case a := <-acks:
		return a.seq, a.duplicate, a.err
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

var (
	seqField       = []byte(`"seq":`)
	errorField     = []byte(`"error"`)
	duplicateField = []byte(`"duplicate"`)
)

// parsePubAck reads {"stream":"S","seq":N} with optional "domain" and
// "duplicate": true, or {"error":{...}}.
func parsePubAck(msg *nats.Msg) (uint64, bool, error) {
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return 0, false, fmt.Errorf("publish to %s: %w", msg.Subject, ErrNoResponders)
	}
	data := msg.Data
	if bytes.Contains(data, errorField) {
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return 0, false, fmt.Errorf("unreadable JetStream acknowledgement %q", data)
		}
		if r.Error != nil {
			return 0, false, apiError(r.Error)
		}
	}
	i := bytes.Index(data, seqField)
	if i < 0 {
		return 0, false, fmt.Errorf("unreadable JetStream acknowledgement %q", data)
	}
	rest := bytes.TrimLeft(data[i+len(seqField):], " ")
	end := 0
	for end < len(rest) && '0' <= rest[end] && rest[end] <= '9' {
		end++
	}
	seq, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	if err != nil {
		return 0, false, errors.Join(fmt.Errorf("unreadable JetStream acknowledgement %q", data), err)
	}
	duplicate := false
	if j := bytes.Index(data, duplicateField); j >= 0 {
		duplicate = bytes.HasPrefix(bytes.TrimLeft(data[j+len(duplicateField):], ": "), []byte("true"))
	}
	return seq, duplicate, nil
}

// WritePolicy is the policy of the ledger's writes: attempts of at most
// 5s where a second attempt is safe, pauses from 50ms to 1s between them,
// for as long as the caller's context allows.
var WritePolicy = RetryPolicy{Attempt: 5 * time.Second, Initial: 50 * time.Millisecond, Max: time.Second}

// PublishRetrying is PublishWait made again, after p's pause, while ctx
// allows, when a second attempt cannot store the message twice: after a
// failure that stored nothing (no stream answered, ErrNoResponders, as
// while a stream elects a leader; JetStream refused with status 503; or a
// conditional write met another in process, ErrWriteInProcess),
// and, for a message with a Nats-Msg-Id header, after an attempt that got
// no acknowledgement within p.Attempt, since the stream drops a second
// copy within its duplicate window (duplicate is then true). A message
// without an ID is not sent again after no acknowledgement, as it may have
// been stored: its attempt is bounded by ctx only, and the error wraps
// context.DeadlineExceeded. Without a deadline in ctx, all attempts end
// after DefaultAckWait.
func (p *Publisher) PublishRetrying(ctx context.Context, policy RetryPolicy, msg *nats.Msg) (seq uint64, duplicate bool, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultAckWait)
		defer cancel()
	}
	hasID := msg.Header.Get(jetstream.MsgIDHeader) != ""
	if !hasID {
		policy.Attempt = 0
	}
	policy.Retryable = func(err error) bool {
		var api *jetstream.APIError
		switch {
		case errors.Is(err, ErrNoResponders), errors.Is(err, ErrWriteInProcess):
			return true
		case errors.As(err, &api):
			return api.Code == 503
		case errors.Is(err, context.DeadlineExceeded):
			return hasID
		}
		return false
	}
	err = Retry(ctx, policy, func(ctx context.Context) error {
		seq, duplicate, err = p.PublishWait(ctx, msg)
		return err
	})
	return seq, duplicate, err
}
