package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// StartOnce records that an attempt of a call of namespace ns starts, and
// waits until the stream has it: only if no attempt of the call recorded a
// start before (the event's subject has no message), else it returns
// ErrChanged. It is the record an at-most-once tool needs before it runs.
// The write carries the message ID <call>.started.<attempt>, so that it is
// sent again after an unanswered attempt; a copy the stream already
// stored may then be answered ErrChanged rather than as a duplicate,
// which the caller tells apart by reading the stored event's attempt and
// worker.
func (l *Ledger) StartOnce(ctx context.Context, bucket, ns string, ev *messages.CallEvent) error {
	ev.Kind = messages.EventStarted
	h := make(nats.Header, 5)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	h.Set(jetstream.MsgIDHeader, ev.CallID+".started."+strconv.Itoa(ev.Attempt))
	msg, err := l.w.eventMsg(bucket, ns, ev, h)
	if err != nil {
		return err
	}
	if _, err := l.w.store(ctx, msg); err != nil {
		if errors.Is(err, transport.ErrWrongLastSequence) {
			return ErrChanged
		}
		return fmt.Errorf("store start of call %s: %w", ev.CallID, err)
	}
	return nil
}
