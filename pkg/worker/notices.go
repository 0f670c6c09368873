package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// A call cancelled while it waits in its namespace's consumer must never
// run. The coordinator tells the namespace's workers (a cancel notice on
// the namespace's cancel subject, see docs/reliability.md) and then asks
// the consumer whether the call's queued event was delivered yet: only
// if not does it commit the call's cancelled result itself; otherwise a
// worker may hold the call, and the worker decides. The notice reached
// the server first, so on one server every delivery of the call that
// follows comes on the worker's connection after the notice, and a
// worker that heard every notice since the call was queued knows, from
// the notices alone, whether the call was cancelled: it needs no read of
// the call's record before running the tool.
//
// When it cannot know that it heard every notice, the worker reads the
// call's record first, as a redelivery does: on a cluster (a notice and a
// delivery travel different routes), after its connection was
// interrupted or a notice was dropped (until it has subscribed again, and
// then for the calls queued before that), and for calls queued by a
// coordinator that does not send notices first (their queued event is
// not labelled messages.NoticeVersion).

const (
	// noticeBuffer is how many notices may wait for the worker to take
	// them; the server drops those beyond, which the worker notices.
	noticeBuffer = 16384
	// maxNotices bounds the notices held per namespace; past it they are
	// forgotten, and the calls queued until then are read before they run.
	maxNotices = 100000
	// noticeMargin is how long past its call's deadline a notice is held,
	// beyond which no worker starts the call anyway.
	noticeMargin = time.Minute
	// confirmTimeout bounds a confirmation's flush and request.
	confirmTimeout = 10 * time.Second
)

// cancelNotices are the cancel notices of one namespace that its worker
// heard: the calls, by ID, not to run, each until its deadline has passed.
type cancelNotices struct {
	nc  *nats.Conn
	sub *nats.Subscription
	ch  chan *nats.Msg
	// consumerInfo asks the server for the namespace's consumer, whose
	// answer carries the server's time.
	consumerInfo func(ctx context.Context) (*jetstream.ConsumerInfo, error)
	// heardOne is told of each notice once it is held: a call in flight
	// is cancelled.
	heardOne func(callID string, info *messages.CancelInfo)
	log      *slog.Logger

	mu   sync.Mutex
	cond *sync.Cond
	// taken counts the notices taken from ch and held; the subscription's
	// Delivered counts those put in ch.
	taken   int64
	stopped bool
	held    map[string]heldNotice
	pruneAt time.Time

	// trust, when set, says since when every notice was heard; nil when
	// the worker cannot tell.
	trust atomic.Pointer[noticeTrust]
	// recheck asks for trust to be established again: the worker's
	// noticeRecheck, shared by its namespaces.
	recheck chan struct{}
}

type heldNotice struct {
	info  messages.CancelInfo
	until time.Time
}

// noticeTrust is what makes the notices complete: the connection has not
// reconnected and no notice was dropped since the subscription was
// confirmed, at the server's time since.
type noticeTrust struct {
	reconnects uint64
	dropped    int
	since      time.Time
}

// subscribeNotices subscribes to the namespace's cancel notices; run
// takes them until ctx ends.
func subscribeNotices(nc *nats.Conn, filter string, consumerInfo func(context.Context) (*jetstream.ConsumerInfo, error), heardOne func(string, *messages.CancelInfo), recheck chan struct{}, log *slog.Logger) (*cancelNotices, error) {
	n := &cancelNotices{nc: nc, ch: make(chan *nats.Msg, noticeBuffer), consumerInfo: consumerInfo, heardOne: heardOne, log: log,
		held: map[string]heldNotice{}, recheck: recheck}
	n.cond = sync.NewCond(&n.mu)
	sub, err := nc.ChanSubscribe(filter, n.ch)
	if err != nil {
		return nil, err
	}
	n.sub = sub
	return n, nil
}

// run takes the notices as they come, until ctx ends.
func (n *cancelNotices) run(ctx context.Context) {
	for {
		select {
		case m := <-n.ch:
			n.mu.Lock()
			id, info := n.hold(m)
			n.taken++
			n.cond.Broadcast()
			n.mu.Unlock()
			n.heardOne(id, info)
		case <-ctx.Done():
			n.mu.Lock()
			n.stopped = true
			n.cond.Broadcast()
			n.mu.Unlock()
			return
		}
	}
}

// hold records a notice; n.mu is held.
func (n *cancelNotices) hold(m *nats.Msg) (string, *messages.CancelInfo) {
	id := lastToken(m.Subject)
	var info messages.CancelInfo
	if len(m.Data) > 0 {
		if _, err := messages.Decode(m.Header, m.Data, &info); err != nil {
			n.log.Warn("unreadable cancel notice", "subject", m.Subject, "error", err)
		}
	}
	now := time.Now()
	until := now.Add(messages.MaxTimeoutMS*time.Millisecond + noticeMargin)
	if d, err := time.Parse(time.RFC3339Nano, m.Header.Get(messages.HeaderDeadline)); err == nil {
		until = d.Add(noticeMargin)
	}
	if now.After(n.pruneAt) || len(n.held) >= maxNotices {
		for k, h := range n.held {
			if now.After(h.until) {
				delete(n.held, k)
			}
		}
		n.pruneAt = now.Add(noticeMargin)
	}
	if len(n.held) >= maxNotices {
		// Forgotten: the calls queued until now are read before they run,
		// once trust is established again.
		n.log.Warn("too many cancel notices held; the calls queued until now are read before they run", "held", len(n.held))
		clear(n.held)
		n.distrust()
	}
	n.held[id] = heldNotice{info: info, until: until}
	return id, &info
}

// heard returns the notice of a call, if one came before the call's
// delivery that the caller holds: every notice the connection received
// until now is taken first.
func (n *cancelNotices) heard(callID string) (*messages.CancelInfo, bool) {
	if n == nil {
		return nil, false
	}
	arrived, err := n.sub.Delivered()
	n.mu.Lock()
	defer n.mu.Unlock()
	for err == nil && n.taken < arrived && !n.stopped {
		select {
		case m := <-n.ch:
			id, info := n.hold(m)
			n.taken++
			if id != callID {
				go n.heardOne(id, info)
			}
		default:
			// run took it, and is about to hold it.
			n.cond.Wait()
		}
	}
	h, ok := n.held[callID]
	if !ok {
		return nil, false
	}
	return &h.info, true
}

// trusted tells whether the worker heard every notice of a call whose
// queued event the server stored at stored.
func (n *cancelNotices) trusted(stored time.Time) bool {
	if n == nil {
		return false
	}
	t := n.trust.Load()
	if t == nil || n.nc.Stats().Reconnects != t.reconnects || !stored.After(t.since) {
		return false
	}
	if dropped, err := n.sub.Dropped(); err != nil || dropped != t.dropped {
		n.distrust()
		return false
	}
	return true
}

// distrust forgets trust, and asks for it to be established again.
func (n *cancelNotices) distrust() {
	n.trust.Store(nil)
	select {
	case n.recheck <- struct{}{}:
	default:
	}
}

// confirm establishes trust: once the server has the subscription (a
// flush), the time the server answers the consumer's information at is
// the time from which every notice comes. A connection to a cluster is
// never trusted.
func (n *cancelNotices) confirm(ctx context.Context) {
	n.trust.Store(nil)
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	reconnects := n.nc.Stats().Reconnects
	dropped, err := n.sub.Dropped()
	if err != nil {
		return
	}
	if err := n.nc.FlushWithContext(ctx); err != nil {
		n.log.Info("cancel notices not confirmed; calls are read before they run", "error", err)
		return
	}
	if n.nc.ConnectedClusterName() != "" {
		return
	}
	info, err := n.consumerInfo(ctx)
	if err != nil || info.TimeStamp.IsZero() {
		n.log.Info("cancel notices not confirmed; calls are read before they run", "error", err)
		return
	}
	n.trust.Store(&noticeTrust{reconnects: reconnects, dropped: dropped, since: info.TimeStamp})
}
