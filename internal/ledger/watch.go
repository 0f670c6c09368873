package ledger

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// watchInactiveThreshold removes the consumer of a watcher that vanished
// without ending its watch.
const watchInactiveThreshold = 30 * time.Second

// Watch yields the call's events in the order they were stored, from the
// first, then follows new ones live, until the result or until ctx ends.
// It reads the stream directly, so it keeps going across restarts of
// coordinators and workers, and a watcher that reconnects replays from the
// start. ns is the call's namespace if the caller knows it; empty, it is
// the namespace of the call's queued event, its first. The call's bucket
// is the one of its first event only the coordinator writes, under ns.
// Events written under another namespace or bucket are skipped, as are
// events other than the coordinator's before the bucket is known.
func (l *Ledger) Watch(ctx context.Context, ns, callID string) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		var bucket string
		filter, err := l.names.CallEventsFilter(callID)
		if err != nil {
			yield(nil, err)
			return
		}
		cons, err := l.js.OrderedConsumer(ctx, l.names.EventsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects:    []string{filter},
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: watchInactiveThreshold,
		})
		if err != nil {
			yield(nil, fmt.Errorf("watch call %s: %w", callID, err))
			return
		}
		// A watch holds a consumer on the server; it is removed as soon as
		// the watch ends rather than when it times out.
		defer func() {
			if info := cons.CachedInfo(); info != nil {
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = l.js.DeleteConsumer(dctx, l.names.EventsStream(), info.Name)
				cancel()
			}
		}()
		msgs, err := cons.Messages()
		if err != nil {
			yield(nil, fmt.Errorf("watch call %s: %w", callID, err))
			return
		}
		defer msgs.Stop()
		stop := context.AfterFunc(ctx, msgs.Stop)
		defer stop()
		for {
			msg, err := msgs.Next()
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(nil, fmt.Errorf("watch call %s: %w", callID, err))
				return
			}
			meta, err := msg.Metadata()
			if err != nil {
				yield(nil, err)
				return
			}
			ev := &Event{Seq: meta.Sequence.Stream, Namespace: l.names.EventNamespace(msg.Subject()), Bucket: l.names.EventBucket(msg.Subject())}
			if bucket == "" && (ns == "" || ns == ev.Namespace) && coordinatorKind(l.eventKind(msg.Subject())) {
				ns, bucket = ev.Namespace, ev.Bucket
			}
			if ev.Namespace != ns || ev.Bucket != bucket || bucket == "" {
				continue
			}
			if _, err := messages.Decode(msg.Headers(), msg.Data(), &ev.CallEvent); err != nil {
				if !yield(nil, fmt.Errorf("event %d of call %s: %w", ev.Seq, callID, err)) {
					return
				}
				continue
			}
			if !yield(ev, nil) {
				return
			}
			if ev.Kind == messages.EventResult {
				return
			}
		}
	}
}

// eventKind returns the kind token of an event subject.
func (l *Ledger) eventKind(subject string) messages.EventKind {
	_, kind, _, _ := l.names.ParseEventSubject(subject)
	return kind
}
