package ledger

import (
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// responseMux receives requests that are answered by several messages
// (batched direct gets) on one wildcard subscription, so that a read costs
// no subscribe and unsubscribe of its own.
type responseMux struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string
	sub     *nats.Subscription
	waiting map[string]chan *nats.Msg
}

func newResponseMux(nc *nats.Conn) *responseMux {
	return &responseMux{nc: nc, waiting: map[string]chan *nats.Msg{}}
}

// replyBuffer holds the replies of one request until they are read; a
// batch is at most 1,024 messages and an end-of-batch status.
const replyBuffer = 1100

// request publishes a request and returns the channel its replies arrive
// on, and a function to call when done reading.
func (m *responseMux) request(subject string, data []byte) (<-chan *nats.Msg, func(), error) {
	m.mu.Lock()
	if m.sub == nil {
		m.prefix = m.nc.NewInbox() + "."
		sub, err := m.nc.Subscribe(m.prefix+"*", m.dispatch)
		if err != nil {
			m.mu.Unlock()
			return nil, nil, err
		}
		// Replies are read as they come; a slow reader loses nothing within the buffer.
		_ = sub.SetPendingLimits(-1, -1)
		m.sub = sub
	}
	token := nuid.Next()
	ch := make(chan *nats.Msg, replyBuffer)
	m.waiting[token] = ch
	prefix := m.prefix
	m.mu.Unlock()
	done := func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}
	if err := m.nc.PublishRequest(subject, prefix+token, data); err != nil {
		done()
		return nil, nil, err
	}
	return ch, done, nil
}

func (m *responseMux) dispatch(msg *nats.Msg) {
	token := msg.Subject[len(m.prefix):]
	m.mu.Lock()
	ch := m.waiting[token]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- msg:
	default:
	}
}

func (m *responseMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
		m.sub = nil
	}
}
