package ledger

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// reconnects tells the waiters of a connection when it comes back after it
// was lost, with one status listener for all of them.
type reconnects struct {
	nc *nats.Conn
	// reconnected is closed at the connection's next reconnect; status is
	// the listener that closes it.
	mu          sync.Mutex
	reconnected chan struct{}
	status      chan nats.Status
}

// next returns a channel closed when the connection next comes
// back after it was lost: the messages a waiter was sent meanwhile are
// lost, and it should look for them.
func (r *reconnects) next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reconnected == nil {
		r.reconnected = make(chan struct{})
	}
	if r.status == nil {
		r.status = r.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
		go r.watch(r.status)
	}
	return r.reconnected
}

func (r *reconnects) watch(status <-chan nats.Status) {
	for st := range status {
		r.mu.Lock()
		if r.reconnected != nil {
			close(r.reconnected)
			r.reconnected = nil
		}
		r.mu.Unlock()
		if st == nats.CLOSED {
			return
		}
	}
}

// close removes the status listener.
func (r *reconnects) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status != nil {
		r.nc.RemoveStatusListener(r.status)
		r.status = nil
	}
}
