package ledger

import (
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// Inbox receives messages for many waiters on one wildcard subscription:
// each waiter registers a subject of its own under the inbox and gets the
// messages sent there, without a subscribe and unsubscribe per wait.
// Batched reads are answered here, and callers receive result copies here.
type Inbox struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string
	sub     *nats.Subscription
	waiting map[string]chan *nats.Msg
	// next numbers the subjects: unique under the inbox's random prefix.
	next uint64
}

// NewInbox returns an inbox on the connection; it subscribes on first use.
func NewInbox(nc *nats.Conn) *Inbox {
	return &Inbox{nc: nc, waiting: map[string]chan *nats.Msg{}}
}

// Register returns a new subject under the inbox and the channel its
// messages arrive on, holding up to buffer of them. Call done when finished.
func (m *Inbox) Register(buffer int) (string, <-chan *nats.Msg, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub == nil {
		m.prefix = m.nc.NewInbox() + "."
		sub, err := m.nc.Subscribe(m.prefix+"*", m.dispatch)
		if err != nil {
			return "", nil, nil, err
		}
		// Messages are read as they come; none is dropped for a slow reader.
		_ = sub.SetPendingLimits(-1, -1)
		m.sub = sub
	}
	m.next++
	token := strconv.FormatUint(m.next, 36)
	ch := make(chan *nats.Msg, buffer)
	m.waiting[token] = ch
	done := func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}
	return m.prefix + token, ch, done, nil
}

func (m *Inbox) dispatch(msg *nats.Msg) {
	m.mu.Lock()
	ch := m.waiting[msg.Subject[len(m.prefix):]]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- msg:
	default:
	}
}

// Close ends the subscription.
func (m *Inbox) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
		m.sub = nil
	}
}
