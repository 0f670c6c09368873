package ledger

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Routes receives the messages of one client's routed calls on one
// subscription (see messages.RouteNames.Subject): the committed results, and the
// coordinator's answers to quiet submits. A caller names its call's ID
// itself and awaits it before submitting, so a message for an ID nobody
// awaits belongs to a call its caller gave up on, and is dropped.
type Routes struct {
	nc    *nats.Conn
	names messages.Names
	route string

	mu      sync.Mutex
	sub     *nats.Subscription
	waiting map[string]awaited
	// check is closed at the next check (see Check).
	check chan struct{}
	// status tells of the connection's reconnects, which the route's
	// messages may have been lost in; reconnects counts them.
	status     chan nats.Status
	reconnects uint64
}

// NewRoutes returns a client's routes under a new route; it subscribes on first use.
func NewRoutes(nc *nats.Conn, names messages.Names) *Routes {
	return &Routes{nc: nc, names: names, route: messages.RandomToken(), waiting: map[string]awaited{}}
}

// Route returns the route to name in submits, once messages on it are received.
func (r *Routes) Route() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		subject, err := r.names.Routes().Subject(r.route)
		if err != nil {
			return "", err
		}
		sub, err := r.nc.Subscribe(subject, r.dispatch)
		if err != nil {
			return "", err
		}
		// Messages are read as they come; none is dropped for a slow reader.
		_ = sub.SetPendingLimits(-1, -1)
		r.sub = sub
		r.status = r.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
		go r.watchReconnects(r.status)
	}
	return r.route, nil
}

// watchReconnects makes the next check come at once after each reconnect:
// a message sent to the route while the connection was away is lost.
func (r *Routes) watchReconnects(status <-chan nats.Status) {
	for st := range status {
		if st == nats.CLOSED {
			return
		}
		r.mu.Lock()
		r.reconnects++
		if r.check != nil {
			close(r.check)
			r.check = nil
		}
		r.mu.Unlock()
	}
}

// Reconnects is how many times the connection came back since the route
// was first used: a waiter that sees it change may have missed messages,
// and should ask the stream's leader rather than any replica.
func (r *Routes) Reconnects() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reconnects
}

// awaited is a call awaited on a route: where its messages go, and the
// namespace its result must have been written under.
type awaited struct {
	ch chan *nats.Msg
	ns string
}

// Await returns the channel the call's messages arrive on: at most an
// answer to its submit and its result. A result written under another
// namespace than ns, the called tool's, is dropped. Call done when
// finished.
func (r *Routes) Await(callID, ns string) (<-chan *nats.Msg, func()) {
	ch := make(chan *nats.Msg, 2)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting[callID] = awaited{ch: ch, ns: ns}
	return ch, func() {
		r.mu.Lock()
		delete(r.waiting, callID)
		r.mu.Unlock()
	}
}

func (r *Routes) dispatch(msg *nats.Msg) {
	callID, ns, ok := r.names.Routes().ParseSubject(r.route, msg.Subject)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, found := r.waiting[callID]
	if !found || ns != "" && ns != a.ns {
		// A result under another namespace than the tool's was not
		// written by the tool's workers.
		return
	}
	select {
	case a.ch <- msg:
	default:
	}
}

// Check returns a channel that is closed within ResultCheckInterval, or at
// once when the connection comes back: the moment for its waiters to ask
// the stream about messages they may have missed. All waiters share one
// timer rather than each having its own.
func (r *Routes) Check() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.check == nil {
		ch := make(chan struct{})
		r.check = ch
		time.AfterFunc(ResultCheckInterval, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.check == ch {
				r.check = nil
				close(ch)
			}
		})
	}
	return r.check
}

// IsStoredEvent reports whether msg is a stored event republished by the
// events stream, rather than a message sent to the same subject by a
// coordinator or the server.
func IsStoredEvent(msg *nats.Msg) bool { return msg.Header.Get(jetstream.SequenceHeader) != "" }

// Close ends the subscription.
func (r *Routes) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
		r.sub = nil
		r.nc.RemoveStatusListener(r.status)
	}
}
