package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/reuse"
	"github.com/toolbus/toolbus/internal/transport"
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
}

func newPoller(nc *nats.Conn, stream, consumer string, size int, expires time.Duration, spawn *reuse.Pool, execute func(*transport.PullMsg, *slot), log *slog.Logger) (*poller, error) {
	p := &poller{nc: nc, spawn: spawn, execute: execute, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
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
			p.requests.Request(p.slots.freeCount)
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
		}
	}()
}

// stop ends the subscription, so that the server drops the outstanding
// requests, and waits for the calls in slots: until they are over, or
// until Stop gives up on them. The context given to start must have ended.
func (p *poller) stop() {
	p.requests.Close()
	p.slots.wait()
	if p.started {
		<-p.done
	}
}

// requestsLost forgets the outstanding requests, which a reconnect may have lost.
func (p *poller) requestsLost() { p.requests.Forget() }

// deliver hands a delivered call to the executor in a slot of its own.
func (p *poller) deliver(msg *nats.Msg) {
	s := p.slots.take()
	if s == nil {
		// More requests were answered than slots are free (after a
		// reconnect); hand the call back at once rather than hold it.
		if err := msg.Respond([]byte("-NAK")); err != nil {
			p.log.Warn("call not handed back", "error", err)
		}
		return
	}
	m := transport.NewPullMsg(p.nc, msg)
	p.spawn.Go(func() { p.execute(m, s) })
}
