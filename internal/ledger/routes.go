package ledger

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Routes receives the committed results of one client's routed calls on
// one subscription (see messages.RouteSubject). A result can come before
// the submit's reply has told the caller the call's ID; it is kept for
// the caller for a while.
type Routes struct {
	nc    *nats.Conn
	names messages.Names
	route string

	mu      sync.Mutex
	sub     *nats.Subscription
	waiting map[string]chan *nats.Msg
	early   map[string]earlyResult
}

type earlyResult struct {
	msg *nats.Msg
	at  time.Time
}

// earlyKept is how long a result nobody waits for yet is kept; a caller
// that comes later asks the stream (every ResultCheckInterval).
const earlyKept = time.Minute

// NewRoutes returns a client's routes under a new route; it subscribes on first use.
func NewRoutes(nc *nats.Conn, names messages.Names) *Routes {
	return &Routes{nc: nc, names: names, route: nuid.Next(), waiting: map[string]chan *nats.Msg{}, early: map[string]earlyResult{}}
}

// Route returns the route to name in submits, once results on it are received.
func (r *Routes) Route() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		subject, err := r.names.RouteSubject(r.route)
		if err != nil {
			return "", err
		}
		sub, err := r.nc.Subscribe(subject, r.dispatch)
		if err != nil {
			return "", err
		}
		// Results are read as they come; none is dropped for a slow reader.
		_ = sub.SetPendingLimits(-1, -1)
		r.sub = sub
	}
	return r.route, nil
}

// Await returns the channel the call's result arrives on. Call done when finished.
func (r *Routes) Await(callID string) (<-chan *nats.Msg, func()) {
	ch := make(chan *nats.Msg, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.early[callID]; ok {
		delete(r.early, callID)
		ch <- e.msg
		return ch, func() {}
	}
	r.waiting[callID] = ch
	return ch, func() {
		r.mu.Lock()
		delete(r.waiting, callID)
		r.mu.Unlock()
	}
}

func (r *Routes) dispatch(msg *nats.Msg) {
	callID := r.route + msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.waiting[callID]; ch != nil {
		select {
		case ch <- msg:
		default:
		}
		return
	}
	now := time.Now()
	if len(r.early) >= 1024 {
		for id, e := range r.early {
			if now.Sub(e.at) > earlyKept {
				delete(r.early, id)
			}
		}
	}
	r.early[callID] = earlyResult{msg: msg, at: now}
}

// Close ends the subscription.
func (r *Routes) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
		r.sub = nil
	}
}
