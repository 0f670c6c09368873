package transport

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Inbox receives messages for many waiters on one wildcard subscription:
// each waiter registers a subject of its own under the inbox and gets the
// messages sent there, without a subscribe and unsubscribe per wait.
// Publish acknowledgements and batched reads are answered here, and
// callers receive result copies here. An Inbox is safe for concurrent use.
type Inbox struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string
	sub     *nats.Subscription
	waiting map[string]chan *nats.Msg
	// expecting holds the callbacks that wait for one message each.
	expecting map[string]expectation
	// expirer hands nil to expectations whose time is up; it runs while
	// there are any.
	expirer      *time.Timer
	expirerArmed bool
	// next numbers the subjects: unique under the inbox's random prefix.
	next uint64
	// status tells of the connection's losses, while subscribed.
	status chan nats.Status
}

type expectation struct {
	fn      func(*nats.Msg)
	expires time.Time
}

// expiryCheck is how often expectations are checked for their deadline.
const expiryCheck = time.Second

// NewInbox returns an inbox on the connection; it subscribes on first use.
// Close it when done.
func NewInbox(nc *nats.Conn) *Inbox {
	return &Inbox{nc: nc, waiting: map[string]chan *nats.Msg{}, expecting: map[string]expectation{}}
}

// subscribe starts the inbox's subscription. Call with mu held.
func (m *Inbox) subscribe() error {
	if m.sub != nil {
		return nil
	}
	m.prefix = m.nc.NewInbox() + "."
	sub, err := m.nc.Subscribe(m.prefix+"*", m.dispatch)
	if err != nil {
		return err
	}
	// Messages are read as they come; none is dropped for a slow reader.
	_ = sub.SetPendingLimits(-1, -1)
	m.sub = sub
	m.status = m.nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go m.failOnDisconnect(m.status)
	return nil
}

// failOnDisconnect hands nil to every open expectation when the connection
// is lost. An answer to a request sent before the loss may never come —
// the server that took it may be the one that went away — and the waiters
// would otherwise learn that only at their timeout; the writes that wait
// here are safe to send again, and their senders do so at once. It ends
// when the connection is closed, or the inbox.
func (m *Inbox) failOnDisconnect(status <-chan nats.Status) {
	for st := range status {
		m.mu.Lock()
		open := m.expecting
		m.expecting = map[string]expectation{}
		m.mu.Unlock()
		for _, e := range open {
			e.fn(nil)
		}
		if st == nats.CLOSED {
			return
		}
	}
}

// Expect returns a new subject under the inbox whose first message is
// handed to fn, on the inbox's goroutine: fn must not block. If none comes
// within timeout (give or take a second), or the inbox closes or its
// connection is lost first, fn gets nil. Unless cancel is called first, fn
// is called exactly once.
func (m *Inbox) Expect(timeout time.Duration, fn func(*nats.Msg)) (subject string, cancel func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.subscribe(); err != nil {
		return "", nil, err
	}
	m.next++
	token := strconv.FormatUint(m.next, 36)
	m.expecting[token] = expectation{fn: fn, expires: time.Now().Add(timeout)}
	if !m.expirerArmed {
		m.expirerArmed = true
		if m.expirer == nil {
			m.expirer = time.AfterFunc(expiryCheck, m.expire)
		} else {
			m.expirer.Reset(expiryCheck)
		}
	}
	cancel = func() {
		m.mu.Lock()
		delete(m.expecting, token)
		m.mu.Unlock()
	}
	return m.prefix + token, cancel, nil
}

// expire hands nil to the expectations whose time is up.
func (m *Inbox) expire() {
	now := time.Now()
	var due []func(*nats.Msg)
	m.mu.Lock()
	for token, e := range m.expecting {
		if now.After(e.expires) {
			due = append(due, e.fn)
			delete(m.expecting, token)
		}
	}
	if len(m.expecting) > 0 {
		m.expirer.Reset(expiryCheck)
	} else {
		m.expirerArmed = false
	}
	m.mu.Unlock()
	for _, fn := range due {
		fn(nil)
	}
}

// randomToken is 128 random bits, in the characters of a subject token.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Register returns a new subject under the inbox and the channel its
// messages arrive on, holding up to buffer of them: a message that finds
// the channel full is dropped, so buffer must hold every message that can
// arrive before the reader takes them. Call done when finished; the
// channel is never closed.
func (m *Inbox) Register(buffer int) (subject string, messages <-chan *nats.Msg, done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.subscribe(); err != nil {
		return "", nil, nil, err
	}
	// Unlike Expect's, a registered subject is given to others (a call's
	// notify subject, a reply subject held for long): its token is random,
	// so that one known subject does not tell the next.
	token := randomToken()
	ch := make(chan *nats.Msg, buffer)
	m.waiting[token] = ch
	done = func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}
	return m.prefix + token, ch, done, nil
}

func (m *Inbox) dispatch(msg *nats.Msg) {
	token := msg.Subject[len(m.prefix):]
	m.mu.Lock()
	if e, ok := m.expecting[token]; ok {
		delete(m.expecting, token)
		m.mu.Unlock()
		e.fn(msg)
		return
	}
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

// Close ends the subscription. Expectations still open get nil.
func (m *Inbox) Close() {
	m.mu.Lock()
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
		m.sub = nil
		m.nc.RemoveStatusListener(m.status)
		m.status = nil
	}
	if m.expirer != nil {
		m.expirer.Stop()
		m.expirerArmed = false
	}
	open := m.expecting
	m.expecting = map[string]expectation{}
	m.mu.Unlock()
	for _, e := range open {
		e.fn(nil)
	}
}
