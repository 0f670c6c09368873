package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/support/reuse"
	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// poller takes a namespace's calls for a worker and hands each, with the
// slot it takes, to the executor; it runs no call itself. The messages it
// has asked for and not yet received never outnumber its free slots, so
// nothing is fetched ahead: a call never waits in a busy worker while
// another worker has room. Requests and their answers, idle heartbeats
// and refusals are the transport's PullRequester's.
//
// nats.go's jetstream Consume and Messages keep a buffer of their own
// filled: they ask for more when it falls below a threshold, whether or not
// the caller has room, so calls would wait in a busy worker; Fetch takes a
// subscription per batch. Neither does this job at this cost.
type poller struct {
	nc       *nats.Conn
	requests *transport.PullRequester
	slots    *slots
	spawn    *reuse.Pool
	execute  func(*transport.PullMsg, *slot)
	log      *slog.Logger
	wake     chan struct{}
	// done is closed when the loop that asks for calls has ended.
	done    chan struct{}
	started bool
	// holdLimit bounds how long a call delivered without a free slot is
	// kept (see hold).
	holdLimit time.Duration

	mu sync.Mutex
	// held are calls delivered when no slot was free, oldest first. They
	// take the next slots that free, before anything new is asked for.
	held    []heldCall
	stopped bool
	// heldRenewals counts the lease renewals of held calls.
	heldRenewals atomic.Int64
}

// holdAckWaits is how many AckWaits a call delivered without a free slot
// is held at most: 2 minutes with the default AckWait of 30s.
const holdAckWaits = 4

// heldCall is a call delivered when no slot was free.
type heldCall struct {
	msg   *transport.PullMsg
	since time.Time
}

func newPoller(nc *nats.Conn, stream, consumer string, size int, expires, holdLimit time.Duration, spawn *reuse.Pool, execute func(*transport.PullMsg, *slot), log *slog.Logger) (*poller, error) {
	p := &poller{nc: nc, spawn: spawn, execute: execute, log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), holdLimit: holdLimit}
	p.slots = newSlots(size, p.signal)
	requests, err := transport.NewPullRequester(nc, transport.PullConfig{
		Stream:   stream,
		Consumer: consumer,
		Expires:  expires,
		Deliver:  p.deliver,
		Ready:    p.signal,
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	p.requests = requests
	return p, nil
}

func (p *poller) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// start keeps asking for calls until ctx ends.
func (p *poller) start(ctx context.Context) {
	p.started = true
	go func() {
		defer close(p.done)
		for {
			p.runHeld()
			p.requests.Request(p.freeForRequests)
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
		}
	}()
}

// stop ends the subscription, so that the server drops the outstanding
// requests, hands back the calls held without a slot, and waits for the
// calls in slots: until they are over, or until Stop gives up on them. The
// context given to start must have ended.
func (p *poller) stop() {
	p.requests.Close()
	if p.started {
		<-p.done
	}
	p.mu.Lock()
	held := p.held
	p.held, p.stopped = nil, true
	p.mu.Unlock()
	for _, h := range held {
		// The worker is going away without having run them: another worker
		// takes them at once. (This delivery counts as an attempt.)
		if err := h.msg.Nak(); err != nil {
			p.log.Warn("held call not handed back", "error", err)
		}
	}
	p.slots.wait()
	metrics.SlotsTotal(p.slots.namespace, -int64(p.slots.size))
}

// requestsLost forgets the outstanding requests, which a reconnect may have lost.
func (p *poller) requestsLost() { p.requests.Forget() }

// freeForRequests is how many calls may be asked for: the free slots that
// no held call waits for.
func (p *poller) freeForRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.slots.freeCount()-len(p.held), 0)
}

// deliver hands a delivered call to the executor in a slot of its own, or
// holds it until a slot frees.
func (p *poller) deliver(msg *nats.Msg) {
	m := transport.NewPullMsg(p.nc, msg)
	p.mu.Lock()
	if len(p.held) == 0 {
		if s := p.slots.take(); s != nil {
			p.mu.Unlock()
			p.spawn.Go(func() { p.execute(m, s) })
			return
		}
	}
	if p.stopped {
		p.mu.Unlock()
		_ = m.Nak()
		return
	}
	// A request taken as lost answered after all (see
	// transport.PullRequester): more calls came than slots are free. The
	// call is kept, its lease renewed, until a slot frees; handing it back
	// would spend one of its deliveries, which JetStream counts against
	// MaxDeliver, on an attempt that never ran.
	p.held = append(p.held, heldCall{msg: m, since: time.Now()})
	n := len(p.held)
	p.mu.Unlock()
	if n == 1 {
		p.log.Info("call delivered without a free slot; kept until one frees")
	}
	p.signal()
}

// runHeld starts the held calls that free slots can take, oldest first.
func (p *poller) runHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.held) > 0 {
		s := p.slots.take()
		if s == nil {
			return
		}
		m := p.held[0].msg
		p.held[0] = heldCall{}
		p.held = p.held[1:]
		p.spawn.Go(func() { p.execute(m, s) })
	}
}

// renewHeld renews the leases of the held calls, with the worker's other
// leases, and hands back those held for longer than holdLimit: with every
// slot taken that long, another worker may run them sooner. That hand-back
// spends a delivery, but at most one per holdLimit, not one per
// millisecond.
func (p *poller) renewHeld(now time.Time) {
	p.mu.Lock()
	var kept, expired []heldCall
	for _, h := range p.held {
		if now.Sub(h.since) >= p.holdLimit {
			expired = append(expired, h)
		} else {
			kept = append(kept, h)
		}
	}
	if len(expired) > 0 {
		p.held = kept
	}
	p.mu.Unlock()
	for _, h := range kept {
		// A call that took a slot meanwhile may be settled already.
		if err := h.msg.InProgress(); err != nil && !errors.Is(err, transport.ErrPullMsgSettled) {
			p.log.Warn("lease renewal of a held call failed", "error", err)
		}
		p.heldRenewals.Add(1)
	}
	for _, h := range expired {
		p.log.Warn("call held without a free slot for too long; handing it back", "held", now.Sub(h.since).Round(time.Millisecond))
		if err := h.msg.Nak(); err != nil {
			p.log.Warn("held call not handed back", "error", err)
		}
	}
}

// heldCount is how many calls wait for a slot.
func (p *poller) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}
