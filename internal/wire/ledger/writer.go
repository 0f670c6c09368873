package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// writer stores events: each encoded as the message whose subject names
// its call, bucket, kind and namespace, published with the write policy's
// retries, or with a condition on the last sequence of its call's
// subjects, and noted in acks once the stream acknowledged it.
type writer struct {
	nc    *nats.Conn
	names messages.Names
	pub   *transport.Publisher
	acks  *lastAck
}

func (w *writer) eventMsg(bucket, ns string, ev *messages.CallEvent, h nats.Header) (*nats.Msg, error) {
	var subject string
	var err error
	if ev.Kind == messages.EventQueued {
		// The queued event's subject names the call's turn too: the
		// turn's index.
		if ev.Request == nil {
			return nil, fmt.Errorf("queued event of call %s without its request", ev.CallID)
		}
		subject, err = w.names.Events().Queued(ev.CallID, ev.Request.Turn, ns)
	} else {
		subject, err = w.names.Events().Subject(bucket, ev.CallID, ev.Kind, ns)
	}
	if err != nil {
		return nil, err
	}
	data, err := messages.Msgpack.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", ev.Kind, err)
	}
	if h == nil {
		h = make(nats.Header, 4)
	}
	messages.Msgpack.SetHeaders(h)
	return &nats.Msg{Subject: subject, Header: h, Data: data}, nil
}

// conditionalMsg is ev's message, to be stored only if the last sequence
// among the subjects matching filter is lastSeq (0: none of them has a
// message yet). An empty filter is the event's own subject.
func (w *writer) conditionalMsg(bucket, ns string, ev *messages.CallEvent, filter string, lastSeq uint64) (*nats.Msg, error) {
	h := make(nats.Header, 3)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(lastSeq, 10))
	msg, err := w.eventMsg(bucket, ns, ev, h)
	if err != nil {
		return nil, err
	}
	if filter != "" && filter != msg.Subject {
		// Without it the condition is on the event's own subject, and the
		// stored event (and its republished copy) is a header shorter.
		h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
	}
	if ev.Kind == messages.EventResult && ev.Result != nil && ev.Result.Status == messages.StateCancelled {
		h.Set(messages.HeaderMsgID, messages.CancelledMsgID(ev.CallID))
	}
	return msg, nil
}

// lostToADuplicate reports whether a conditional write was refused or
// dropped because a message of the same ID was stored, or is being
// stored, first: a cancelled result that another writer's won (see
// messages.CancelledMsgID).
func lostToADuplicate(duplicate bool, err error) bool {
	return (err == nil && duplicate) || transport.DuplicateInProcess(err)
}

// conditional stores ev only if the last sequence among the subjects
// matching filter is lastSeq (see conditionalMsg).
func (w *writer) conditional(ctx context.Context, bucket, ns string, ev *messages.CallEvent, filter string, lastSeq uint64) (uint64, error) {
	msg, err := w.conditionalMsg(bucket, ns, ev, filter, lastSeq)
	if err != nil {
		return 0, err
	}
	seq, duplicate, err := w.storeOnce(ctx, msg)
	if lostToADuplicate(duplicate, err) {
		return 0, ErrChanged
	}
	if err == nil {
		return seq, nil
	}
	if errors.Is(err, transport.ErrWrongLastSequence) {
		return 0, ErrChanged
	}
	return 0, fmt.Errorf("store %s event of call %s: %w", ev.Kind, ev.CallID, err)
}

// store publishes msg and waits until the stream has it, sending it again
// after a failure that stored nothing (see transport.WritePolicy).
func (w *writer) store(ctx context.Context, msg *nats.Msg) (uint64, error) {
	seq, _, err := w.storeOnce(ctx, msg)
	return seq, err
}

// storeOnce is store, telling also whether the stream answered that it
// had a message of msg's ID already.
func (w *writer) storeOnce(ctx context.Context, msg *nats.Msg) (uint64, bool, error) {
	seq, duplicate, err := w.pub.PublishRetrying(ctx, transport.WritePolicy, msg)
	if err == nil && !duplicate {
		w.acks.note(msg.Subject, seq)
	}
	return seq, duplicate, err
}

func (w *writer) commit(ctx context.Context, bucket, ns string, res *messages.CallResult, filter string, lastSeq uint64, notify string) error {
	ev := resultEvent(res)
	if _, err := w.conditional(ctx, bucket, ns, ev, filter, lastSeq); err != nil {
		return err
	}
	w.sendCopy(bucket, ns, ev, notify)
	return nil
}

// sendCopy sends a stored result to the caller's notify subject, if any:
// a copy, as the stored event is the record.
func (w *writer) sendCopy(bucket, ns string, ev *messages.CallEvent, notify string) {
	if notify != "" && messages.ValidateNotify(notify) == nil {
		if msg, err := w.eventMsg(bucket, ns, ev, nil); err == nil {
			msg.Subject = notify
			_ = w.nc.PublishMsg(msg)
		}
	}
}

// lastAck is the events stream's latest answer to one of the ledger's
// writes, or its last sequence as last read from its state: Turns.LastSeq's
// answer while it is recent.
type lastAck struct {
	// eventsPrefix starts the subjects of the events stream.
	eventsPrefix string
	// seq is the sequence at which the events stream last acknowledged
	// one of the ledger's writes (or the last sequence read), and at (Unix
	// nanoseconds) when that answer came.
	seq atomic.Uint64
	at  atomic.Int64
}

// note notes that the stream acknowledged a write to subject at seq (see
// Turns.LastSeq); a duplicate's answer, an earlier write's sequence, is not
// noted. The latest answer is kept, not the highest sequence: answers to
// writes in flight together come in any order, and each is a sequence the
// stream has reached; a stream made anew starts its sequences again.
func (a *lastAck) note(subject string, seq uint64) {
	if seq == 0 || !strings.HasPrefix(subject, a.eventsPrefix) {
		return
	}
	a.noteRead(seq)
}

// noteRead notes the stream's last sequence as read from its state (or
// acknowledged).
func (a *lastAck) noteRead(seq uint64) {
	a.seq.Store(seq)
	a.at.Store(time.Now().UnixNano())
}

// recent returns the acknowledged sequence if its answer came within
// fresh.
func (a *lastAck) recent(fresh time.Duration) (uint64, bool) {
	if at := a.at.Load(); at != 0 && time.Since(time.Unix(0, at)) < fresh {
		return a.seq.Load(), true
	}
	return 0, false
}
