package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PullConfig configures a PullRequester.
type PullConfig struct {
	// Stream and Consumer name the durable pull consumer. Required.
	Stream   string
	Consumer string
	// Expires is how long one pull request waits for messages. Required;
	// at least 2 ms.
	Expires time.Duration
	// Heartbeat is how often the server tells an idle pull request that it
	// is still waiting. Requests are taken as lost when nothing at all
	// arrives for twice that long. Defaults to half of Expires, at most 5s.
	Heartbeat time.Duration
	// BackoffMin and BackoffMax bound the wait after a refused pull request
	// (the consumer is missing, the server has too many waiting): it
	// doubles with each refusal in a row, with jitter, and starts again
	// from BackoffMin once a request is served. They default to 100ms (or
	// the Heartbeat when shorter) and to the Heartbeat.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// Deliver receives every delivered message, on the subscription's
	// goroutine, while the count of messages asked for is locked: it must
	// hand the message on without blocking. Requests taken as lost may
	// still deliver, beyond what free allowed (see Request): the caller
	// must keep such a message until it can take it, and not hand it back,
	// since every delivery counts against the consumer's MaxDeliver.
	// Required.
	Deliver func(*nats.Msg)
	// Ready is called, from any goroutine and without locks held, when
	// more may be asked for than before: a request ended, its requests
	// were lost or a backoff elapsed. Required.
	Ready func()
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c PullConfig) withDefaults() PullConfig {
	if c.Heartbeat == 0 {
		c.Heartbeat = min(c.Expires/2, 5*time.Second)
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = c.Heartbeat
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = min(100*time.Millisecond, c.BackoffMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c PullConfig) validate() error {
	switch {
	case c.Stream == "" || c.Consumer == "":
		return errors.New("transport: PullConfig.Stream and Consumer are required")
	case c.Expires < 2*time.Millisecond:
		return fmt.Errorf("transport: PullConfig.Expires %v is shorter than 2ms", c.Expires)
	case c.Heartbeat < time.Millisecond || 2*c.Heartbeat > c.Expires:
		// The server refuses heartbeats longer than half the expiry.
		return fmt.Errorf("transport: PullConfig.Heartbeat %v must be at least 1ms and at most half of Expires", c.Heartbeat)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("transport: PullConfig.BackoffMin %v and BackoffMax %v must be positive and in order", c.BackoffMin, c.BackoffMax)
	case c.Deliver == nil || c.Ready == nil:
		return errors.New("transport: PullConfig.Deliver and Ready are required")
	}
	return nil
}

// PullRequester asks a pull consumer for messages on behalf of a caller
// that decides how many it can take, and answers every request on one
// subscription, so that taking a message costs no subscription of its own.
// It counts the messages its requests still ask for, and forgets them when
// they can no longer come: a request ended with a status that says how many
// it still owed, or nothing, not even the server's idle heartbeat, arrived
// for twice the heartbeat interval (the requests were lost, e.g. with the
// consumer's server). A refused request is asked again only after a backoff.
//
// Delivered messages carry their own subject, not the request's, so only
// the number still asked for is kept, not which request owes them.
type PullRequester struct {
	nc      *nats.Conn
	cfg     PullConfig
	subject string

	mu sync.Mutex
	// inbox and sub answer the requests of the current generation: asked
	// counts only what they ask for. When its requests are taken as lost, a
	// new generation starts on a new inbox; the old subscription stays
	// until its requests have expired on the server, and what arrives on it
	// is delivered without being counted (see stale).
	inbox string
	sub   *nats.Subscription
	gen   int
	stale []*staleSub
	asked int // messages the current generation's requests still ask for
	// heard is when the subscription last received anything, or a request
	// last went out; watch checks it while something is asked for.
	heard    time.Time
	watch    *time.Timer
	watching bool
	// refusals in a row; no request goes out before retryAt.
	refusals int
	retryAt  time.Time
	retry    *time.Timer
	closed   bool
	body     []byte
}

// NewPullRequester subscribes to the answers of the requests it will make.
func NewPullRequester(nc *nats.Conn, cfg PullConfig) (*PullRequester, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &PullRequester{
		nc:      nc,
		cfg:     cfg,
		subject: PullSubject(cfg.Stream, cfg.Consumer),
	}
	if err := r.subscribeLocked(); err != nil {
		return nil, err
	}
	return r, nil
}

// subscribeLocked starts a generation of requests on a new inbox.
func (r *PullRequester) subscribeLocked() error {
	gen, inbox := r.gen+1, r.nc.NewInbox()
	sub, err := r.nc.Subscribe(inbox+".*", func(msg *nats.Msg) { r.onMsg(gen, msg) })
	if err != nil {
		return fmt.Errorf("transport: subscribe to pull answers: %w", err)
	}
	// Deliveries never outnumber what was asked for, which the caller bounds.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("transport: subscribe to pull answers: %w", err)
	}
	r.gen, r.inbox, r.sub = gen, inbox, sub
	return nil
}

// newGenerationLocked forgets the current requests and answers the next
// ones on a new inbox. The old inbox keeps its subscription until its
// requests have expired on the server, so that a request taken as lost but
// still alive (a slow link, a consumer leader that came back) delivers to
// a subscriber, which holds the message rather than letting it wait out
// AckWait; once unsubscribed, a delivery to it finds no interest, which the
// server does not count as a delivery.
func (r *PullRequester) newGenerationLocked() {
	r.asked = 0
	old := r.sub
	if err := r.subscribeLocked(); err != nil {
		// The connection is closed or closing: nothing will be delivered.
		r.cfg.Logger.Warn("pull requests not renewed on a new inbox", "error", err)
		return
	}
	stale := &staleSub{sub: old}
	r.stale = append(r.stale, stale)
	stale.end = time.AfterFunc(r.cfg.Expires+2*r.cfg.Heartbeat, func() {
		r.mu.Lock()
		for i, s := range r.stale {
			if s == stale {
				r.stale = append(r.stale[:i], r.stale[i+1:]...)
				break
			}
		}
		r.mu.Unlock()
		_ = old.Unsubscribe()
	})
}

// staleSub is the subscription of an earlier generation of requests, and
// the timer that ends it.
type staleSub struct {
	sub *nats.Subscription
	end *time.Timer
}

// PullSubject is the API subject of a consumer's next-message requests.
func PullSubject(stream, consumer string) string {
	return "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer
}

// AppendPullRequest appends the body of a pull request for batch messages.
func AppendPullRequest(dst []byte, batch int, expires, heartbeat time.Duration) []byte {
	dst = append(dst, `{"batch":`...)
	dst = strconv.AppendInt(dst, int64(batch), 10)
	dst = append(dst, `,"expires":`...)
	dst = strconv.AppendInt(dst, expires.Nanoseconds(), 10)
	if heartbeat > 0 {
		dst = append(dst, `,"idle_heartbeat":`...)
		dst = strconv.AppendInt(dst, heartbeat.Nanoseconds(), 10)
	}
	return append(dst, '}')
}

// Request asks for more messages when the caller can take them: free is
// how many it can take now, called with the count of messages asked for
// locked (so that no delivery is counted twice or not at all). A request
// goes out when nothing is asked for, or when at least half of free is
// not, so that slots freed one at a time are asked for together and, under
// load, one request serves many messages. None goes out while a refusal's
// backoff lasts.
func (r *PullRequester) Request(free func() int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	now := time.Now()
	if now.Before(r.retryAt) {
		return
	}
	f := free()
	n := f - r.asked
	if n <= 0 || (r.asked > 0 && 2*n < f) {
		return
	}
	// The reply subject carries the batch size, so that a status refusing
	// the request outright says how much it asked for.
	reply := r.inbox + "." + strconv.Itoa(n)
	r.body = AppendPullRequest(r.body[:0], n, r.cfg.Expires, r.cfg.Heartbeat)
	if err := r.nc.PublishRequest(r.subject, reply, r.body); err != nil {
		r.refusedLocked(now, "request not sent", err.Error())
		return
	}
	r.asked += n
	r.heard = now
	if !r.watching {
		r.watching = true
		if r.watch == nil {
			r.watch = time.AfterFunc(2*r.cfg.Heartbeat, r.checkHeard)
		} else {
			r.watch.Reset(2 * r.cfg.Heartbeat)
		}
	}
}

// Inbox returns the prefix of the reply subjects of the current requests:
// a request's reply subject is the inbox, a dot and its batch size.
func (r *PullRequester) Inbox() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inbox
}

// Asked returns how many messages the outstanding requests still ask for.
func (r *PullRequester) Asked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// Forget forgets the outstanding requests, which a reconnect may have lost;
// those that were not lost still deliver, uncounted.
func (r *PullRequester) Forget() {
	r.mu.Lock()
	if !r.closed {
		r.newGenerationLocked()
	}
	r.mu.Unlock()
	r.cfg.Ready()
}

// Close ends the subscription, so that the server drops the outstanding
// requests, and stops the timers. Deliver is not called once Close has
// returned; a message that arrives later is handed back to the consumer.
func (r *PullRequester) Close() {
	r.mu.Lock()
	r.closed = true
	if r.watch != nil {
		r.watch.Stop()
	}
	if r.retry != nil {
		r.retry.Stop()
	}
	current, stale := r.sub, r.stale
	r.stale = nil
	r.mu.Unlock()
	_ = current.Unsubscribe()
	for _, s := range stale {
		s.end.Stop()
		_ = s.sub.Unsubscribe()
	}
}

// checkHeard runs twice the heartbeat interval after the subscription was
// last heard from, while something is asked for.
func (r *PullRequester) checkHeard() {
	r.mu.Lock()
	if r.closed || r.asked == 0 {
		r.watching = false
		r.mu.Unlock()
		return
	}
	silence := time.Since(r.heard)
	if limit := 2 * r.cfg.Heartbeat; silence < limit {
		r.watch.Reset(limit - silence)
		r.mu.Unlock()
		return
	}
	lost := r.asked
	r.newGenerationLocked()
	r.watching = false
	r.mu.Unlock()
	r.cfg.Logger.Info("pull requests lost: no message or heartbeat; asking again", "asked", lost, "silence", silence.Round(time.Millisecond))
	r.cfg.Ready()
}

func (r *PullRequester) onMsg(gen int, msg *nats.Msg) {
	status := msg.Header.Get("Status")
	r.mu.Lock()
	if gen != r.gen && !r.closed {
		// An answer to a request of an earlier generation, already taken as
		// lost: a message is delivered, uncounted, as the caller must take
		// what the server delivered (see Deliver); statuses say nothing
		// about the current requests.
		if status == "" && msg.Reply != "" {
			r.cfg.Deliver(msg)
		}
		r.mu.Unlock()
		return
	}
	if r.closed {
		r.mu.Unlock()
		if status == "" && msg.Reply != "" {
			// Nobody takes it now: another consumer may, at once.
			if err := msg.Respond([]byte("-NAK")); err != nil {
				r.cfg.Logger.Warn("message delivered after close not handed back", "error", err)
			}
		}
		return
	}
	r.heard = time.Now()
	switch {
	case status == "" && msg.Reply != "":
		r.asked = max(r.asked-1, 0)
		r.servedLocked()
		r.cfg.Deliver(msg)
		r.mu.Unlock()
		return
	case status == "100":
		// An idle heartbeat: the request still waits.
		r.servedLocked()
		r.mu.Unlock()
		return
	}
	// The request ended without (all of) its messages: expired (408), found
	// none (404), or was refused.
	r.asked = max(r.asked-pullOwed(msg), 0)
	refused := status != "408" && status != "404"
	if refused {
		r.refusedLocked(r.heard, status, msg.Header.Get("Description"))
	} else {
		r.servedLocked()
	}
	r.mu.Unlock()
	if !refused {
		r.cfg.Ready()
	}
}

// pullOwed is how many messages a request that ended with a status still owed:
// its Nats-Pending-Messages header, or all it asked for (its reply
// subject's last token) when it was refused outright.
func pullOwed(msg *nats.Msg) int {
	n, err := strconv.Atoi(msg.Header.Get("Nats-Pending-Messages"))
	if err != nil {
		n, err = strconv.Atoi(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:])
	}
	if err != nil {
		return 0
	}
	return n
}

// servedLocked ends a run of refusals.
func (r *PullRequester) servedLocked() {
	if r.refusals == 0 {
		return
	}
	r.cfg.Logger.Info("pull requests served again", "refusals", r.refusals)
	r.refusals = 0
	r.retryAt = time.Time{}
}

// refusedLocked holds back the next request: exponentially longer with each
// refusal in a row, with jitter so that the workers of a namespace do not
// ask in step.
func (r *PullRequester) refusedLocked(now time.Time, status, description string) {
	r.refusals++
	if r.refusals == 1 {
		r.cfg.Logger.Warn("pull request refused; backing off", "status", status, "description", description)
	}
	wait := RetryPolicy{Initial: r.cfg.BackoffMin, Max: r.cfg.BackoffMax}.Delay(r.refusals)
	r.retryAt = now.Add(wait)
	if r.closed {
		return
	}
	if r.retry == nil {
		r.retry = time.AfterFunc(wait, r.cfg.Ready)
	} else {
		r.retry.Reset(wait)
	}
}

// ErrPullMsgSettled is returned when a message is acknowledged, handed
// back or terminated a second time.
var ErrPullMsgSettled = errors.New("message already acknowledged")

// PullMsg is a message delivered to a pull request, with JetStream's
// acknowledgement protocol.
type PullMsg struct {
	nc      *nats.Conn
	msg     *nats.Msg
	mu      sync.Mutex
	settled bool
}

var _ jetstream.Msg = (*PullMsg)(nil)

// NewPullMsg wraps a delivered message.
func NewPullMsg(nc *nats.Conn, msg *nats.Msg) *PullMsg { return &PullMsg{nc: nc, msg: msg} }

func (m *PullMsg) reply(body string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled {
		return ErrPullMsgSettled
	}
	if err := m.msg.Respond([]byte(body)); err != nil {
		return err
	}
	if body != "+WPI" {
		m.settled = true
	}
	return nil
}

// Data returns the message's body.
func (m *PullMsg) Data() []byte { return m.msg.Data }

// Headers returns the message's headers.
func (m *PullMsg) Headers() nats.Header { return m.msg.Header }

// Subject returns the subject the message was stored under.
func (m *PullMsg) Subject() string { return m.msg.Subject }

// Reply returns the message's acknowledgement subject.
func (m *PullMsg) Reply() string { return m.msg.Reply }

// Ack acknowledges the message: it is not delivered again.
func (m *PullMsg) Ack() error { return m.reply("+ACK") }

// Nak hands the message back for delivery at once.
func (m *PullMsg) Nak() error { return m.reply("-NAK") }

// InProgress resets the message's AckWait: the consumer does not deliver it
// again for another AckWait. It may be called any number of times before
// the message is settled.
func (m *PullMsg) InProgress() error { return m.reply("+WPI") }

// Term ends the message's deliveries without acknowledging it.
func (m *PullMsg) Term() error { return m.reply("+TERM") }

// TermWithReason is Term with a reason the server reports in its advisory.
func (m *PullMsg) TermWithReason(reason string) error { return m.reply("+TERM " + reason) }

// NakWithDelay hands the message back for delivery after d.
func (m *PullMsg) NakWithDelay(d time.Duration) error {
	return m.reply(`-NAK {"delay": ` + strconv.FormatInt(d.Nanoseconds(), 10) + `}`)
}

// DoubleAck acknowledges and waits for the server to confirm.
func (m *PullMsg) DoubleAck(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled {
		return ErrPullMsgSettled
	}
	if _, err := m.nc.RequestWithContext(ctx, m.msg.Reply, []byte("+ACK")); err != nil {
		return err
	}
	m.settled = true
	return nil
}

// Metadata reads the delivery's metadata from its acknowledgement subject.
func (m *PullMsg) Metadata() (*jetstream.MsgMetadata, error) { return PullMetadata(m.msg.Reply) }

// PullMetadata reads a delivery's metadata from its acknowledgement subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>,
// or the longer form with a domain and an account hash after $JS.ACK.
func PullMetadata(reply string) (*jetstream.MsgMetadata, error) {
	tokens := strings.Split(reply, ".")
	if len(tokens) < 9 || tokens[0] != "$JS" || tokens[1] != "ACK" {
		return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", reply)
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
		return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", reply)
	}
	var nums [5]uint64
	for i, t := range rest {
		n, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("not a JetStream delivery: reply subject %q", reply)
		}
		nums[i] = n
	}
	meta.NumDelivered = nums[0]
	meta.Sequence.Stream, meta.Sequence.Consumer = nums[1], nums[2]
	meta.Timestamp = time.Unix(0, int64(nums[3]))
	meta.NumPending = nums[4]
	return meta, nil
}
