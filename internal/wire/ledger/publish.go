package ledger

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/transport"
)

// Inbox is transport.Inbox, kept under this name for the ledger's callers.
type Inbox = transport.Inbox

// NewInbox returns an inbox on the connection (see transport.NewInbox).
func NewInbox(nc *nats.Conn) *Inbox { return transport.NewInbox(nc) }

// PublishThen sends msg to a stream and hands the outcome to then once the
// stream acknowledges it, on the ledger's inbox goroutine: then must not
// block. See transport.Publisher.PublishThen for the errors.
func (l *Ledger) PublishThen(msg *nats.Msg, timeout time.Duration, then func(seq uint64, duplicate bool, err error)) error {
	subject := msg.Subject
	return l.pub.PublishThen(msg, timeout, func(seq uint64, duplicate bool, err error) {
		if err == nil && !duplicate {
			l.acks.note(subject, seq)
		}
		then(seq, duplicate, err)
	})
}

// Sleep waits for d or until ctx ends (see transport.Sleep).
func Sleep(ctx context.Context, d time.Duration) error { return transport.Sleep(ctx, d) }
