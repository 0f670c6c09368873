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

// Watcher follows calls live through the events stream, each watch with an
// ordered consumer of its own: what a client that reads JetStream watches
// a call with. It keeps no state between watches; any number run at once.
type Watcher struct {
	js    jetstream.JetStream
	names messages.Names
}

// NewWatcher returns a watcher of the events stream that names names.
func NewWatcher(js jetstream.JetStream, names messages.Names) *Watcher {
	return &Watcher{js: js, names: names}
}

// Watch yields the call's events in the order they were stored, from the
// first, then follows new ones live, until the result or until ctx ends.
// It reads the stream directly, so it keeps going across restarts of
// coordinators and workers, and a watcher that reconnects replays from the
// start. ns is the call's namespace if the caller knows it; empty, it is
// the namespace of the call's queued event, its first. The call's bucket
// is the one of its first event only the coordinator writes, under ns.
// Events written under another namespace or bucket are skipped, as are
// events other than the coordinator's before the bucket is known.
func (wt *Watcher) Watch(ctx context.Context, ns, callID string) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		var bucket string
		filter, err := wt.names.Filters().CallEvents(callID)
		if err != nil {
			yield(nil, err)
			return
		}
		cons, err := wt.js.OrderedConsumer(ctx, wt.names.EventsStream(), jetstream.OrderedConsumerConfig{
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
				_ = wt.js.DeleteConsumer(dctx, wt.names.EventsStream(), info.Name)
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
			ev := &Event{Seq: meta.Sequence.Stream, Namespace: wt.names.Events().Namespace(msg.Subject()), Bucket: wt.names.Events().Bucket(msg.Subject())}
			if bucket == "" && (ns == "" || ns == ev.Namespace) && coordinatorKind(wt.eventKind(msg.Subject())) {
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
func (wt *Watcher) eventKind(subject string) messages.EventKind {
	_, kind, _, _ := wt.names.Events().Parse(subject)
	return kind
}
