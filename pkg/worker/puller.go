package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// puller takes a namespace's calls for a worker: it keeps exactly one pull
// request for one message outstanding per free slot, all answered on one
// subscription. Nothing is fetched ahead, so a call never waits in a busy
// worker while another worker has room; and unlike a fetch per call, taking
// a call costs no subscription of its own.
type puller struct {
	nc      *nats.Conn
	next    string // the consumer's next-message API subject
	inbox   string
	expires time.Duration
	run     func(*callMsg) // runs one call in a free slot
	log     interface{ Warn(string, ...any) }

	mu      sync.Mutex
	free    int
	pending []time.Time // when each outstanding request expires, oldest first
	wake    chan struct{}
	sub     *nats.Subscription
	running sync.WaitGroup
}

func newPuller(nc *nats.Conn, stream, consumer string, slots int, expires time.Duration, run func(*callMsg), log interface{ Warn(string, ...any) }) *puller {
	return &puller{
		nc:      nc,
		next:    "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		inbox:   nc.NewInbox(),
		expires: expires,
		run:     run,
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
	sub, err := p.nc.Subscribe(p.inbox, p.onMsg)
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
	p.pending = nil
	p.mu.Unlock()
	p.signal()
}

func (p *puller) loop(ctx context.Context) {
	body, _ := json.Marshal(map[string]any{"batch": 1, "expires": p.expires.Nanoseconds()})
	tick := time.NewTicker(p.expires / 2)
	defer tick.Stop()
	for {
		now := time.Now()
		p.mu.Lock()
		// A request that neither brought a call nor expired in time was
		// lost (a server restart); it no longer counts.
		for len(p.pending) > 0 && now.After(p.pending[0].Add(p.expires/2)) {
			p.pending = p.pending[1:]
		}
		need := p.free - len(p.pending)
		for range max(need, 0) {
			if err := p.nc.PublishRequest(p.next, p.inbox, body); err != nil {
				break
			}
			p.pending = append(p.pending, now.Add(p.expires))
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

func (p *puller) onMsg(msg *nats.Msg) {
	status := msg.Header.Get("Status")
	if status == "100" {
		return // an idle heartbeat
	}
	p.mu.Lock()
	if len(p.pending) > 0 {
		p.pending = p.pending[1:]
	}
	if status != "" || msg.Reply == "" {
		// The request ended without a call: expired (408), or refused (409).
		p.mu.Unlock()
		if status != "408" && status != "404" {
			p.log.Warn("pull request refused", "status", status, "description", msg.Header.Get("Description"))
		}
		p.signal()
		return
	}
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
	go func() {
		defer func() {
			p.mu.Lock()
			p.free++
			p.mu.Unlock()
			p.running.Done()
			p.signal()
		}()
		p.run(&callMsg{nc: p.nc, msg: msg})
	}()
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
