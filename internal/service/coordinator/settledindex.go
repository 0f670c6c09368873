package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The calls without a result, followed instead of read.
//
// The sweep of settled calls must find, behind each namespace's floor,
// the calls that have no result. Reading every queued event again and
// asking the stream for every call's last result costs the server two
// direct-get answers a call, each with its body and six generated
// headers: about a tenth of a call's CPU under sustained load. Instead a
// coordinator follows, from a consumer of its own that delivers headers
// only, the queued and result events of every namespace in stream order,
// and keeps the calls queued that have no result yet. A sweep then asks
// the stream only about those of them the floor passed (almost always
// none), and reads as before what the follower does not cover: the
// events before it started, after it failed, or while it was full.

// settledIndexMax bounds the calls an index keeps; past it, the index
// forgets them all and covers again from the next event on.
const settledIndexMax = 1 << 18

// settledIndexBatch is the most events one fetch takes.
const settledIndexBatch = 4096

// openCall is a queued call whose result the index has not seen.
type openCall struct {
	seq      uint64
	bucket   string
	callID   string
	awaiting bool
}

// settledIndex keeps, by namespace, the calls queued without a result
// from its start on: the calls the sweep of settled calls must ask about.
type settledIndex struct {
	stream jetstream.Stream
	names  messages.Names
	max    int // settledIndexMax unless a test sets it
	// idle is how long its consumer lives without a fetch.
	idle time.Duration

	mu sync.Mutex
	// start is the first events sequence it covers (0: none yet), through
	// the last one delivered to it; nsStart, by namespace, a later start
	// for a namespace whose calls it forgot.
	start, through uint64
	nsStart        map[string]uint64
	// open holds, by namespace and by bucket and call ID, the calls
	// queued without a result seen.
	open map[string]map[string]openCall
	size int

	cons      jetstream.Consumer
	delivered uint64 // the consumer's delivery sequence
	// failing tells that the last catchUp failed: the sweep then reads
	// what came after through instead of waiting for the index.
	failing bool
}

// newSettledIndex follows the events stream for a sweep that runs every
// interval.
func newSettledIndex(stream jetstream.Stream, names messages.Names, interval time.Duration) *settledIndex {
	return &settledIndex{stream: stream, names: names, max: settledIndexMax, idle: max(2*time.Minute, 3*interval)}
}

// catchUp takes what the consumer holds, creating it first if need be.
// A failure leaves the index covering what it covered; the next catchUp
// follows again from where it stopped.
func (x *settledIndex) catchUp(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	had := x.cons != nil
	err := x.fetchAll(ctx)
	if err != nil && had && ctx.Err() == nil {
		// Its consumer was lost (a restart, a leader change): once more
		// from a new one, from the event after the last delivered.
		err = x.fetchAll(ctx)
	}
	x.failing = err != nil
	return err
}

func (x *settledIndex) fetchAll(ctx context.Context) error {
	if x.cons == nil {
		if err := x.follow(ctx); err != nil {
			return err
		}
	}
	for {
		batch, err := x.cons.FetchNoWait(settledIndexBatch)
		if err != nil {
			x.lost(ctx)
			return fmt.Errorf("follow queued and result events after %d: %w", x.through, err)
		}
		got := 0
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			if err != nil || meta.Sequence.Consumer != x.delivered+1 {
				x.lost(ctx)
				return fmt.Errorf("queued and result events after %d came with a gap", x.through)
			}
			x.delivered++
			got++
			x.apply(meta.Sequence.Stream, msg.Subject(), msg.Headers().Get(messages.HeaderAwaiting) != "")
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			x.lost(ctx)
			return fmt.Errorf("follow queued and result events after %d: %w", x.through, err)
		}
		if got < settledIndexBatch {
			return nil
		}
	}
}

// follow creates the consumer: at the first call from the stream's next
// message on, later from the one after the last delivered.
func (x *settledIndex) follow(ctx context.Context) error {
	from := x.through + 1
	if x.start == 0 {
		info, err := x.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("read the events stream's last sequence: %w", err)
		}
		from = info.State.LastSeq + 1
	}
	queued, err := x.names.Filters().EventKind(messages.EventQueued)
	if err != nil {
		return err
	}
	result, err := x.names.Filters().EventKind(messages.EventResult)
	if err != nil {
		return err
	}
	// Headers only, without acknowledgements, in memory: what it delivers
	// is checked for gaps by its delivery sequence, and a gap or a lost
	// consumer follows again from the last event delivered.
	cons, err := x.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubjects:    []string{queued, result},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: x.idle,
	})
	if err != nil {
		return fmt.Errorf("follow queued and result events from %d: %w", from, err)
	}
	if x.start == 0 {
		x.start, x.through = from, from-1
	}
	x.cons, x.delivered = cons, 0
	return nil
}

// lost deletes the consumer after a failure; the next catchUp creates
// another from the event after the last delivered.
func (x *settledIndex) lost(ctx context.Context) {
	if x.cons == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = x.stream.DeleteConsumer(ctx, x.cons.CachedInfo().Name)
	x.cons = nil
}

// stop deletes the consumer.
func (x *settledIndex) stop(ctx context.Context) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lost(ctx)
}

// reset stops following and forgets every call, so that a later catchUp
// follows from the stream's end as the first one does.
func (x *settledIndex) reset(ctx context.Context) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.lost(ctx)
	x.open, x.size, x.nsStart = nil, 0, nil
	x.start, x.through, x.delivered, x.failing = 0, 0, 0, false
}

// apply takes one delivered event: a queued event opens its call, a
// result closes it.
func (x *settledIndex) apply(seq uint64, subject string, awaiting bool) {
	x.through = max(x.through, seq)
	events := x.names.Events()
	callID, kind, ns, ok := events.Parse(subject)
	if !ok {
		return
	}
	key := events.Bucket(subject) + "." + callID
	calls := x.open[ns]
	switch kind {
	case messages.EventQueued:
		if calls == nil {
			if x.open == nil {
				x.open = make(map[string]map[string]openCall)
			}
			calls = make(map[string]openCall)
			x.open[ns] = calls
		}
		if _, known := calls[key]; !known {
			if x.size >= x.max {
				// Full: forget every call, and cover again from the next
				// event on; the sweep reads what came before.
				x.open, x.size = nil, 0
				x.start = seq + 1
				return
			}
			x.size++
		}
		calls[key] = openCall{seq: seq, bucket: events.Bucket(subject), callID: callID, awaiting: awaiting}
	case messages.EventResult:
		if _, known := calls[key]; known {
			delete(calls, key)
			x.size--
		}
	}
}

// covers returns the first sequence from which the index knows every
// call of ns queued without a result, up to through; ok is false when it
// covers nothing yet, failing true when its last catchUp failed.
func (x *settledIndex) covers(ns string) (from, through uint64, failing, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.start == 0 || x.through < x.start {
		return 0, 0, x.failing, false
	}
	return max(x.start, x.nsStart[ns]), x.through, x.failing, true
}

// openUpTo returns the calls of ns queued from from through upTo that have
// no result seen and do not await an approval.
func (x *settledIndex) openUpTo(ns string, from, upTo uint64) []openCall {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []openCall
	for _, c := range x.open[ns] {
		if c.seq >= from && c.seq <= upTo && !c.awaiting {
			out = append(out, c)
		}
	}
	return out
}

// closed forgets calls of ns the sweep found with a result or ended.
func (x *settledIndex) closed(ns string, calls []openCall) {
	x.mu.Lock()
	defer x.mu.Unlock()
	open := x.open[ns]
	for _, c := range calls {
		key := c.bucket + "." + c.callID
		if cur, known := open[key]; known && cur.seq == c.seq {
			delete(open, key)
			x.size--
		}
	}
}

// keepOnly forgets the calls of the namespaces that have no consumer,
// which no sweep asks about; a namespace given a consumer later is
// covered from the next event on.
func (x *settledIndex) keepOnly(namespaces map[string]string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ns, calls := range x.open {
		if _, ok := namespaces[ns]; ok {
			continue
		}
		delete(x.open, ns)
		if len(calls) == 0 {
			continue
		}
		x.size -= len(calls)
		if x.nsStart == nil {
			x.nsStart = make(map[string]uint64)
		}
		x.nsStart[ns] = x.through + 1
	}
}
