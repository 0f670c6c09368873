package ledger

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

// PublishThen sends msg to a stream and hands the outcome to then once
// the stream acknowledges it, on the ledger's inbox goroutine: then must
// not block. The acknowledgement is read on the ledger's inbox, which on
// the call path is lighter than nats.go's JetStream publish: no future per
// message and no JSON decoding of a successful acknowledgement. No acknowledgement within timeout is an error wrapping
// context.DeadlineExceeded. If PublishThen returns an error, then is not
// called.
func (l *Ledger) PublishThen(msg *nats.Msg, timeout time.Duration, then func(seq uint64, duplicate bool, err error)) error {
	subject := msg.Subject
	reply, cancel, err := l.reads.Expect(timeout, func(ack *nats.Msg) {
		if ack == nil {
			then(0, false, fmt.Errorf("publish to %s: no acknowledgement within %v: %w", subject, timeout, context.DeadlineExceeded))
			return
		}
		then(parsePubAck(ack))
	})
	if err != nil {
		return err
	}
	msg.Reply = reply
	if err := l.nc.PublishMsg(msg); err != nil {
		cancel()
		return err
	}
	return nil
}

// PublishWait is PublishThen for a caller that waits: it returns the
// stored message's sequence and whether JetStream had it already (a
// duplicate message ID). A refusal comes back as *jetstream.APIError, as
// from nats.go. The wait ends with ctx; without a deadline, after
// defaultAckWait.
func (l *Ledger) PublishWait(ctx context.Context, msg *nats.Msg) (seq uint64, duplicate bool, err error) {
	type ack struct {
		seq       uint64
		duplicate bool
		err       error
	}
	timeout := defaultAckWait
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	acks := make(chan ack, 1)
	if err := l.PublishThen(msg, timeout, func(seq uint64, duplicate bool, err error) { acks <- ack{seq, duplicate, err} }); err != nil {
		return 0, false, err
	}
	select {
	case a := <-acks:
		return a.seq, a.duplicate, a.err
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

// defaultAckWait bounds PublishWait when its context has no deadline.
const defaultAckWait = 30 * time.Second

var (
	seqField       = []byte(`"seq":`)
	errorField     = []byte(`"error"`)
	duplicateField = []byte(`"duplicate"`)
)

// parsePubAck reads {"stream":"S","seq":N} with optional "domain" and
// "duplicate": true, or {"error":{...}}.
func parsePubAck(msg *nats.Msg) (uint64, bool, error) {
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return 0, false, fmt.Errorf("publish to %s: %w", msg.Subject, jetstream.ErrNoStreamResponse)
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
			return 0, false, r.Error
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
