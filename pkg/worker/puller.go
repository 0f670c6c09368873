package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/reuse"
)

// puller takes a namespace's calls for a worker: the messages it has asked
// for and not yet received never outnumber its free slots, and all pull
// requests are answered on one subscription. Nothing is fetched ahead, so a
// call never waits in a busy worker while another worker has room; and
// unlike a fetch per call, taking a call costs no subscription of its own.
//
// Slots freed one at a time are asked for together: a new request goes out
// when nothing is asked for or when at least half of the free slots are
// not, so under load one request serves many calls rather than one each.
// Delivered calls carry their own subject, not the request's, so only the
// number of messages still asked for is kept, not which request owes them.
type puller struct {
	nc      *nats.Conn
	next    string // the consumer's next-message API subject
	inbox   string
	expires time.Duration
	// run runs one call in a free slot; release frees it early. It reports
	// whether it has left release to be called later, by the commit of the
	// call's result.
	run   func(m *callMsg, release func()) (later bool)
	spawn *reuse.Pool
	log   interface{ Warn(string, ...any) }

	mu      sync.Mutex
	free    int
	asked   int       // messages the outstanding requests still ask for
	lastEnd time.Time // when the newest outstanding request expires
	wake    chan struct{}
	sub     *nats.Subscription
	running sync.WaitGroup
}

func newPuller(nc *nats.Conn, stream, consumer string, slots int, expires time.Duration, spawn *reuse.Pool, run func(*callMsg, func()) bool, log interface{ Warn(string, ...any) }) *puller {
	return &puller{
		nc:      nc,
		next:    "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		inbox:   nc.NewInbox(),
		expires: expires,
		run:     run,
		spawn:   spawn,
		log:     log,
		free:    slots,
		wake:    make(chan struct{}, 1),
	}
}

func (p *puller) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// start subscribes and keeps requesting until ctx ends.
func (p *puller) start(ctx context.Context) error {
	sub, err := p.nc.Subscribe(p.inbox+".*", p.onMsg)
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	go p.loop(ctx)
	return nil
}

// stop ends the subscription, so that the server drops the outstanding
// requests, and waits for the running calls.
func (p *puller) stop() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	p.running.Wait()
}

// requestsLost forgets the outstanding requests, which a reconnect may have lost.
func (p *puller) requestsLost() {
	p.mu.Lock()
	p.asked = 0
	p.mu.Unlock()
	p.signal()
}

func (p *puller) loop(ctx context.Context) {
	tick := time.NewTicker(p.expires / 2)
	defer tick.Stop()
	for {
		now := time.Now()
		p.mu.Lock()
		// Every request ends by its expiry: served, or with a status that
		// says how many messages it still owed. Owed messages left after
		// the newest request's expiry belong to requests that were lost
		// (a server restart); they no longer count.
		if p.asked > 0 && now.After(p.lastEnd.Add(p.expires/2)) {
			p.asked = 0
		}
		if n := p.free - p.asked; n > 0 && (p.asked == 0 || 2*n >= p.free) {
			// The reply subject carries the batch size, so that a status
			// refusing the request outright says how much it asked for.
			reply := p.inbox + "." + strconv.Itoa(n)
			body := fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, n, p.expires.Nanoseconds())
			if err := p.nc.PublishRequest(p.next, reply, body); err == nil {
				p.asked += n
				p.lastEnd = now.Add(p.expires)
			}
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// ended counts the messages a request that ended with a status still
// owed: its Nats-Pending-Messages header, or all it asked for (its reply
// subject's last token) when it was refused outright.
func (p *puller) ended(msg *nats.Msg) {
	owed, err := strconv.Atoi(msg.Header.Get("Nats-Pending-Messages"))
	if err != nil {
		owed, err = strconv.Atoi(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:])
	}
	if err == nil {
		p.asked = max(p.asked-owed, 0)
	}
}

func (p *puller) onMsg(msg *nats.Msg) {
	status := msg.Header.Get("Status")
	if status == "100" {
		return // an idle heartbeat
	}
	p.mu.Lock()
	if status != "" || msg.Reply == "" {
		// The request ended without (all of) its calls: expired (408), or
		// refused (409).
		p.ended(msg)
		p.mu.Unlock()
		if status != "408" && status != "404" {
			p.log.Warn("pull request refused", "status", status, "description", msg.Header.Get("Description"))
		}
		p.signal()
		return
	}
	p.asked = max(p.asked-1, 0)
	if p.free <= 0 {
		// More requests were answered than slots are free (after a
		// reconnect); hand the call back at once rather than hold it.
		p.mu.Unlock()
		_ = msg.Nak()
		return
	}
	p.free--
	p.running.Add(1)
	p.mu.Unlock()
	release := sync.OnceFunc(func() {
		p.mu.Lock()
		p.free++
		p.mu.Unlock()
		p.running.Done()
		p.signal()
	})
	p.spawn.Go(func() {
		if !p.run(&callMsg{nc: p.nc, msg: msg}, release) {
			release()
		}
	})
}

// callMsg is a delivered call with JetStream's acknowledgement protocol.
type callMsg struct {
	nc    *nats.Conn
	msg   *nats.Msg
	mu    sync.Mutex
	acked bool
}

var _ jetstream.Msg = (*callMsg)(nil)

var errAcked = errors.New("call message already acknowledged")

func (m *callMsg) reply(body string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked {
		return errAcked
	}
	if err := m.msg.Respond([]byte(body)); err != nil {
		return err
	}
	if body != "+WPI" {
		m.acked = true
	}
	return nil
}

func (m *callMsg) Data() []byte                       { return m.msg.Data }
func (m *callMsg) Headers() nats.Header               { return m.msg.Header }
func (m *callMsg) Subject() string                    { return m.msg.Subject }
func (m *callMsg) Reply() string                      { return m.msg.Reply }
func (m *callMsg) Ack() error                         { return m.reply("+ACK") }
func (m *callMsg) Nak() error                         { return m.reply("-NAK") }
func (m *callMsg) InProgress() error                  { return m.reply("+WPI") }
func (m *callMsg) Term() error                        { return m.reply("+TERM") }
func (m *callMsg) TermWithReason(reason string) error { return m.reply("+TERM " + reason) }
func (m *callMsg) NakWithDelay(d time.Duration) error {
	return m.reply(fmt.Sprintf(`-NAK {"delay": %d}`, d.Nanoseconds()))
}

// DoubleAck acknowledges and waits for the server to confirm.
func (m *callMsg) DoubleAck(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked {
		return errAcked
	}
	if _, err := m.nc.RequestWithContext(ctx, m.msg.Reply, []byte("+ACK")); err != nil {
		return err
	}
	m.acked = true
	return nil
}

// Metadata reads the delivery's metadata from its acknowledgement subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>,
// or the longer form with a domain and an account hash after $JS.ACK.
func (m *callMsg) Metadata() (*jetstream.MsgMetadata, error) {
	tokens := strings.Split(m.msg.Reply, ".")
	if len(tokens) < 9 || tokens[0] != "$JS" || tokens[1] != "ACK" {
		return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", m.msg.Reply)
	}
	meta := &jetstream.MsgMetadata{}
	var rest []string
	if len(tokens) == 9 {
		meta.Stream, meta.Consumer, rest = tokens[2], tokens[3], tokens[4:9]
	} else if len(tokens) >= 11 {
		if tokens[2] != "_" {
			meta.Domain = tokens[2]
		}
		meta.Stream, meta.Consumer, rest = tokens[4], tokens[5], tokens[6:11]
	} else {
		return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", m.msg.Reply)
	}
	var nums [5]uint64
	for i, t := range rest {
		n, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", m.msg.Reply)
		}
		nums[i] = n
	}
	meta.NumDelivered = nums[0]
	meta.Sequence.Stream, meta.Sequence.Consumer = nums[1], nums[2]
	meta.Timestamp = time.Unix(0, int64(nums[3]))
	meta.NumPending = nums[4]
	return meta, nil
}
