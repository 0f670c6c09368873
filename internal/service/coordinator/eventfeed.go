package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// The events of watched calls, read once for all their followers.
//
// Nearly every message of the events stream has a subject of its own, so
// to read a call's events after a sequence the server walks every message
// stored since then: a follower waiting on calls.events costs the server a
// walk of the stream's whole traffic between two of its call's events.
// Hundreds of followers of busy calls take the stream's core
// (docs/BENCHMARKS.md, "Watchers of long-running calls"). Past a threshold
// of waits held at once, a coordinator reads every event but the queued
// ones through one consumer of its own, in stream order, and keeps the
// events of the calls asked about; their waits are answered from there.
//
// What is kept of a call is complete from a point on: known is a sequence
// after which every event of the call (queued events aside) is kept. It
// starts at the last sequence the feed had applied when the call was first
// asked about; the first walk for the call, which reads from the
// request's sequence to the stream's end, brings it down to the last event
// that walk found. A request after known (and after the call's queued
// event) is answered from memory; an earlier one walks, as without the
// feed.

// Defaults and bounds of the event feed.
const (
	// DefaultEventFeedThreshold is Config.EventFeedThreshold's default:
	// below it the walks cost the server less than delivering every event
	// of the stream once more.
	DefaultEventFeedThreshold = 32
	// eventFeedCallEvents and eventFeedCallBytes bound what is kept of one
	// call: past them its oldest events go, and requests before them walk.
	eventFeedCallEvents = 256
	eventFeedCallBytes  = 1 << 20
	// eventFeedMaxCalls bounds the calls kept; past it, new calls walk.
	eventFeedMaxCalls = 1 << 16
	// eventFeedMaxBytes bounds what is kept of all calls: past it, a call
	// that is given an event keeps that one alone.
	eventFeedMaxBytes = 64 << 20
	// eventFeedIdle is how long a call is kept after it was last asked
	// about, and how long the feed runs with too few calls asked about.
	eventFeedIdle = time.Minute
	// eventFeedBatch is how many events the consumer sends ahead.
	eventFeedBatch = 1024
	// eventFeedRetry is the pause before following again after a failure.
	eventFeedRetry = 2 * time.Second
)

// eventFeed follows the events stream for the calls whose events are
// asked for, once the waits held at once pass its threshold.
type eventFeed struct {
	stream    jetstream.Stream
	names     messages.Names
	threshold int
	idle      time.Duration
	log       *slog.Logger

	mu sync.Mutex
	// waiting counts the calls.events requests that may wait, now.
	waiting int
	// running is set while a follow loop runs; started once it made its
	// first consumer; through is the last stream sequence it applied.
	running, started bool
	through          uint64
	calls            map[string]*keptCall
	// bytes is the stored size of every event kept.
	bytes  int
	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

// keptCall is what the feed keeps of one call.
type keptCall struct {
	// ns and bucket are the call's: events written under its ID elsewhere
	// are not kept (docs/protocol.md, "Whose events count").
	ns, bucket string
	// since is the feed's position when the call was first asked about.
	since, known uint64
	// dropped is the last sequence dropped to bound what is kept.
	dropped uint64
	events  []keptEvent
	bytes   int
	asked   time.Time
	// changed is closed, and replaced, when an event is kept.
	changed chan struct{}
}

type keptEvent struct {
	ev   *ledger.Event
	size int
}

// newEventFeed follows stream past threshold waits at once (0: the
// default; negative: never).
func newEventFeed(stream jetstream.Stream, names messages.Names, threshold int, log *slog.Logger) *eventFeed {
	if threshold == 0 {
		threshold = DefaultEventFeedThreshold
	}
	return &eventFeed{stream: stream, names: names, threshold: threshold, idle: eventFeedIdle, log: log}
}

// enter counts a request that may wait, and starts following once there
// are threshold of them; leave, which the caller defers, uncounts it.
func (f *eventFeed) enter() (leave func()) {
	if f == nil || f.threshold < 0 {
		return func() {}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiting++
	if !f.running && !f.closed && f.waiting >= f.threshold {
		ctx, cancel := context.WithCancel(context.Background())
		f.running, f.stop, f.done = true, cancel, make(chan struct{})
		f.log.Info("following the events stream once for every watcher", "waits", f.waiting, "threshold", f.threshold)
		go f.run(ctx, f.done)
	}
	return func() {
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
	}
}

// track keeps the events of the call of namespace ns and bucket from now
// on, if the feed runs and has room; ok tells whether it does.
func (f *eventFeed) track(callID, ns, bucket string, now time.Time) (ok bool) {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running || !f.started {
		return false
	}
	c := f.calls[callID]
	if c == nil {
		if len(f.calls) >= eventFeedMaxCalls {
			return false
		}
		c = &keptCall{ns: ns, bucket: bucket, since: f.through, known: f.through, changed: make(chan struct{})}
		if f.calls == nil {
			f.calls = make(map[string]*keptCall)
		}
		f.calls[callID] = c
	}
	if c.ns != ns || c.bucket != bucket {
		return false
	}
	c.asked = now
	return true
}

// walked tells the feed what a walk of the stream, made after track,
// found: every event of the call after after, up to the stream's end
// then, unless it was cut short by its bounds (complete false). The call's
// events are then known from the last of them at or before since on.
func (f *eventFeed) walked(callID string, after uint64, events []*ledger.Event, complete bool) {
	if f == nil || !complete {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls[callID]
	if c == nil {
		return
	}
	from := after
	for _, ev := range events {
		if ev.Seq <= c.since {
			from = max(from, ev.Seq)
		}
	}
	if from < c.known && from >= c.dropped {
		c.known = from
	}
}

// after returns the call's kept events after seq, within max and
// maxBytes as ledger.EventsAfter bounds them. ok is false when the feed
// cannot tell them (the request walks); with none yet, changed is closed
// when one is kept.
func (f *eventFeed) after(callID string, seq uint64, limit, maxBytes int) (events []*ledger.Event, changed <-chan struct{}, ok bool) {
	if f == nil {
		return nil, nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls[callID]
	if !f.running || c == nil || seq < c.known {
		return nil, nil, false
	}
	size := 0
	for _, k := range c.events {
		if k.ev.Seq <= seq {
			continue
		}
		events = append(events, k.ev)
		size += k.size
		if len(events) >= limit || (maxBytes > 0 && size >= maxBytes) {
			break
		}
	}
	return events, c.changed, true
}

// run follows the stream until stopped, or until too few calls are asked
// about; it then forgets every call.
func (f *eventFeed) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		// The waits on a call's events read them from the stream again.
		for _, c := range f.calls {
			close(c.changed)
		}
		f.running, f.started, f.through, f.calls, f.bytes = false, false, 0, nil, 0
		f.log.Info("no longer following the events stream for the watchers; their waits read it again", "waits", f.waiting)
	}()
	for failures := 0; ctx.Err() == nil; failures++ {
		err := f.follow(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		f.log.Warn("the event feed stopped following the events stream; following again", "error", err)
		if failures == 0 {
			continue // a lost consumer or a gap: at once, the first time
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(eventFeedRetry):
		}
	}
}

// follow reads from a consumer made from the event after the last
// applied, until stopped, idle, or failing (a gap, a lost consumer); nil
// means the feed should stop.
func (f *eventFeed) follow(ctx context.Context) error {
	cons, err := f.consumer(ctx)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = f.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(eventFeedBatch))
	if err != nil {
		return err
	}
	defer it.Stop()
	stopped := context.AfterFunc(ctx, it.Stop)
	defer stopped()
	// The janitor forgets the calls no longer asked about, and ends the
	// feed when too few are left.
	idle, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	janitor := time.NewTicker(f.idle / 4)
	defer janitor.Stop()
	go func() {
		for {
			select {
			case <-quit:
				return
			case now := <-janitor.C:
				if f.prune(now) {
					close(idle)
					it.Stop()
					return
				}
			}
		}
	}()
	var delivered uint64
	for {
		msg, err := it.Next()
		if err != nil {
			select {
			case <-idle:
				return nil
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		meta, err := msg.Metadata()
		if err != nil || meta.Sequence.Consumer != delivered+1 {
			return fmt.Errorf("the events after %d came with a gap", f.position())
		}
		delivered++
		f.apply(meta.Sequence.Stream, msg)
	}
}

// consumer makes the feed's consumer: every event but the queued ones,
// from the stream's next message on at first and later from the one after
// the last applied; in memory and without acknowledgements, each delivery
// checked for gaps.
func (f *eventFeed) consumer(ctx context.Context) (jetstream.Consumer, error) {
	f.mu.Lock()
	started, from := f.started, f.through+1
	f.mu.Unlock()
	if !started {
		info, err := f.stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the events stream's last sequence: %w", err)
		}
		from = info.State.LastSeq + 1
	}
	var filters []string
	for _, kind := range []messages.EventKind{messages.EventStarted, messages.EventProgress, messages.EventLog, messages.EventCancel, messages.EventApproval, messages.EventResult} {
		filter, err := f.names.Filters().EventKind(kind)
		if err != nil {
			return nil, err
		}
		filters = append(filters, filter)
	}
	cons, err := f.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubjects:    filters,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: f.idle,
	})
	if err != nil {
		return nil, fmt.Errorf("follow the events from %d: %w", from, err)
	}
	f.mu.Lock()
	if !f.started {
		f.started, f.through = true, from-1
	}
	f.mu.Unlock()
	return cons, nil
}

func (f *eventFeed) position() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.through
}

// apply takes one delivered event: kept when its call is asked about.
func (f *eventFeed) apply(seq uint64, msg jetstream.Msg) {
	events := f.names.Events()
	callID, _, ns, parsed := events.Parse(msg.Subject())
	f.mu.Lock()
	defer f.mu.Unlock()
	f.through = max(f.through, seq)
	c := f.calls[callID]
	if !parsed || c == nil || seq <= c.since || ns != c.ns || events.Bucket(msg.Subject()) != c.bucket {
		return
	}
	ev := &ledger.Event{Seq: seq, Namespace: ns, Bucket: c.bucket}
	if _, err := messages.DecodeStored(messages.Header(msg.Headers()), msg.Data(), &ev.CallEvent); err != nil {
		// The walk reports what cannot be read: from here on, this call
		// walks.
		c.dropped, c.known = seq, seq
		f.bytes -= c.bytes
		c.events, c.bytes = nil, 0
		return
	}
	c.events = append(c.events, keptEvent{ev: ev, size: len(msg.Data())})
	c.bytes += len(msg.Data())
	f.bytes += len(msg.Data())
	for len(c.events) > 1 && (len(c.events) > eventFeedCallEvents || c.bytes > eventFeedCallBytes || f.bytes > eventFeedMaxBytes) {
		c.dropped = c.events[0].ev.Seq
		c.known = max(c.known, c.dropped)
		c.bytes -= c.events[0].size
		f.bytes -= c.events[0].size
		c.events[0] = keptEvent{}
		c.events = c.events[1:]
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// prune forgets the calls not asked about within idle, and reports
// whether the feed should stop: too few calls asked about, and too few
// requests waiting.
func (f *eventFeed) prune(now time.Time) (stop bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.calls {
		if now.Sub(c.asked) > f.idle {
			// A wait still on it reads the stream instead.
			close(c.changed)
			f.bytes -= c.bytes
			delete(f.calls, id)
		}
	}
	return f.waiting < f.threshold && len(f.calls) < (f.threshold+1)/2
}

// close stops the feed and waits for it to end.
func (f *eventFeed) close(context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	f.closed = true
	stop, done := f.stop, f.done
	f.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}
