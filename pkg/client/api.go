package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// coordinatorAPI sends the client's requests to the coordinators' API, an
// agent's and an operator's alike: in attempts, retried and hedged with
// copies as the package doc says, with what it learns on the way (how long
// coordinators take to answer; whether the connection's account has
// JetStream).
type coordinatorAPI struct {
	nc     *nats.Conn
	inbox  *ledger.Inbox
	routes *ledger.Routes
	opts   Options
	names  messages.Names
	// noJetStream is set once the server said that the connection's
	// account has no JetStream: calls are then followed through the
	// coordinator (see readsViaCoordinator).
	noJetStream atomic.Bool
	// answerTime is the recent time coordinators took to answer a request
	// that no copy had to help, in nanoseconds (an exponentially weighted
	// mean; 0 before the first): what hedgeDelay scales with.
	answerTime atomic.Int64
}

// readsViaCoordinator tells whether calls are followed through the API
// (Options.CoordinatorReads, or an account without JetStream), and so
// whether the client may lack a route of its own to receive receipts on.
func (a *coordinatorAPI) readsViaCoordinator() bool {
	return a.opts.CoordinatorReads || a.noJetStream.Load()
}

// requestRetry is the backoff between the attempts of a request.
var requestRetry = transport.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second}

// maxNoResponderAttempts is how many times a request that no coordinator
// received is sent: enough to ride out a coordinator's restart, not so
// many that a caller with no coordinator at all waits long to hear so.
const maxNoResponderAttempts = 6

// safety says whether a request may be sent again after an attempt that
// went unanswered.
type safety int

const (
	// once: an unanswered attempt may have been carried out, and a second
	// would be carried out again.
	once safety = iota
	// repeatable: requests whose repetition changes nothing.
	repeatable
	// read: requests that change nothing at all.
	read
	// scan: reads that cost the coordinator a scan of seconds (within a
	// budget): copied only while no coordinator has sent a receipt, which
	// the first copy asks for already, as a copy would cost another scan;
	// and given scanTime more to be answered in each attempt.
	scan
)

// scanTime is what an attempt of a scan is given on top of
// Options.RequestTimeout.
const scanTime = 25 * time.Second

// request sends one API request and decodes the reply into out, in
// attempts bounded by RequestTimeout plus wait (see the package doc).
// Error replies come back as *messages.Error, so errors.Is(err,
// messages.ErrToolNotFound) and the like work; a request that no
// coordinator received fails with messages.ErrNoResponders, and one that
// cannot be repeated and went unanswered with messages.ErrTimeout. A
// read or a repeatable request that the coordinator does not hold (wait
// 0) is hedged within each attempt (see hedged); a scan is not.
func (a *coordinatorAPI) request(ctx context.Context, endpoint string, in, out any, safe safety, wait time.Duration) error {
	subject, err := a.names.APISubject(endpoint)
	if err != nil {
		return err
	}
	data, err := a.opts.Codec.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.opts.DefaultTimeout)
		defer cancel()
	}
	policy := requestRetry
	policy.Attempt = a.opts.RequestTimeout + wait
	switch safe {
	case once:
		policy.Attempt += a.opts.CoordinatorWait
	case scan:
		policy.Attempt += scanTime
	}
	unanswered := false
	noResponders := 0
	var firstNoResponders time.Time
	policy.Retryable = func(err error) bool {
		var e *messages.Error
		switch {
		case errors.Is(err, messages.ErrNoResponders):
			noResponders++
			if safe == repeatable && wait == 0 {
				// Safe to send again however often: while no coordinator
				// listens (a server of the cluster restarting, coordinators
				// reconnecting), for up to NoCoordinatorWait.
				if firstNoResponders.IsZero() {
					firstNoResponders = time.Now()
				}
				return time.Since(firstNoResponders) < a.opts.NoCoordinatorWait
			}
			return noResponders < maxNoResponderAttempts
		case errors.Is(err, context.DeadlineExceeded):
			// Retry ends before asking if the caller's context ended, so
			// this is the attempt's bound.
			unanswered = true
			return safe != once
		case errors.As(err, &e):
			return safe != once && (e.Code == messages.CodeUnavailable || e.Code == messages.CodeTimeout)
		}
		return false
	}
	send := func(ctx context.Context) (*nats.Msg, error) {
		msg := &nats.Msg{Subject: subject, Header: nats.Header(a.opts.Codec.NewHeader()), Data: data}
		tracing.Inject(ctx, msg.Header)
		reply, err := a.nc.RequestMsgWithContext(ctx, msg)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, noCoordinator(subject)
		}
		if err != nil {
			return nil, a.tooLarge(endpoint, msg, err)
		}
		return reply, nil
	}
	err = transport.Retry(ctx, policy, func(actx context.Context) error {
		var reply *nats.Msg
		var err error
		if safe == once {
			reply, err = send(actx)
		} else {
			// Only reads are copied before a coordinator was heard from:
			// a copy of a request that changes something may be answered
			// by what the first did (a cancel's too_late, a submit's
			// duplicate), so such copies go out only while no receipt has
			// come, to a coordinator that has not taken the first.
			reply, err = a.hedged(actx, subject, data, wait > 0 || safe == scan || safe == repeatable)
			if err != nil {
				err = a.tooLarge(endpoint, &nats.Msg{Data: data}, err)
			}
		}
		if err != nil {
			return err
		}
		return decodeReply(endpoint, reply, out)
	})
	switch {
	case err == nil:
		return nil
	case unanswered && safe == once && ctx.Err() == nil:
		return messages.Errorf(messages.CodeTimeout, "%s: no answer within %v; the outcome is unknown (a submit's call may have been queued)", endpoint, policy.Attempt)
	case messages.CodeOf(err) != messages.CodeInternal:
		return err
	}
	return fmt.Errorf("%s: %w", endpoint, err)
}

// hedged sends a request that is safe to repeat and returns the first
// answer to it or to one of its copies. The coordinators' queue group
// gives each copy to a coordinator at random; a copy goes out when no
// answer has come after the hedge delay: two at once, then four after
// HedgeAfter, then one after each hedgeWait (twice as long each round, up
// to 2s), until a coordinator sends a receipt for one of them
// (messages.HeaderReceipt; the copies ask for one on the client's route)
// or the answer comes. A live coordinator's receipt stops the copies, so a
// request that coordinators are slow to answer (waiting out an election,
// say) costs them a few copies at most, and a hung coordinator costs the
// request about one HedgeAfter: with one of two hung, longer than two
// only with a chance of 1 in 128, and longer than four with 1 in 256. A
// held request (wait > 0), a read that may keep a coordinator busy
// (calls.list, audit.list, stats.calls) and a request that changes
// something (a submit, a cancel) asks for a receipt from its first copy:
// each copy a live coordinator takes holds one of its user's waits, scans
// the stream again, or is answered as what the first did (a cancel's
// too_late, a submit's duplicate), and the receipt says that a coordinator
// has it. A request whose connection is lost is sent again once it is
// back, as its answer may be lost with it. A client without a route it
// receives on (an agent's user that named none) gets no receipts: it sends
// the copies of the first two rounds only, and a held request once. If every copy found no
// coordinator, that is the error.
func (a *coordinatorAPI) hedged(ctx context.Context, subject string, data []byte, held bool) (*nats.Msg, error) {
	// held: the first copy asks for a receipt, and without receipts there
	// are no copies.
	reply, answers, done, err := a.inbox.Register(64)
	if err != nil {
		return nil, err
	}
	defer done()
	var receipts <-chan *nats.Msg
	receiptTo := ""
	if a.opts.Route != "" || !a.readsViaCoordinator() {
		route, err := a.routes.Route()
		if err != nil {
			return nil, err
		}
		id := messages.RoutedCallID(route, messages.RandomToken())
		if receiptTo, err = a.names.Routes().CallSubject(id); err != nil {
			return nil, err
		}
		var stop func()
		receipts, stop = a.routes.Await(id, "")
		defer stop()
	}
	// One token for the request and all its copies: a coordinator that
	// holds the first leaves a copy with the same token to the first's
	// answer, and across the import from the agents' account the token is
	// what tells it that a copy is one (the reply subject it sees is new
	// for each).
	token := newReplyToken()
	sent, unheard := 0, 0
	launch := func(copies int, receipt bool) error {
		for range copies {
			msg := &nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(a.opts.Codec.NewHeader()), Data: data}
			msg.Header.Set(messages.HeaderReplyToken, token)
			if receipt && receiptTo != "" {
				msg.Header.Set(messages.HeaderReceipt, receiptTo)
			}
			tracing.Inject(ctx, msg.Header)
			if err := a.nc.PublishMsg(msg); err != nil {
				return err
			}
			sent++
		}
		return nil
	}
	// An answer in flight when the connection is lost is lost with it:
	// the request is sent again on the new connection rather than waited
	// for until ctx ends.
	lost := a.nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED)
	defer a.nc.RemoveStatusListener(lost)
	if err := launch(1, held); err != nil {
		return nil, err
	}
	start := time.Now()
	hedge := time.NewTimer(a.hedgeDelay())
	defer hedge.Stop()
	next := hedge.C
	if held && receiptTo == "" {
		next = nil
	}
	rounds := 0
	for {
		select {
		case <-lost:
			rounds = 0
			if err := launch(1, true); err != nil {
				return nil, err
			}
			if !held || receiptTo != "" {
				hedge.Reset(a.opts.HedgeAfter)
				next = hedge.C
			}
		case msg := <-receipts:
			if msg.Header.Get(messages.HeaderReceipt) == messages.ReceiptSent {
				next = nil // a live coordinator has it
			}
		case msg := <-answers:
			if noCoordinatorListened(msg) {
				if unheard++; unheard == sent {
					return nil, noCoordinator(subject)
				}
				break
			}
			if sent == 1 && !held {
				a.observeAnswer(time.Since(start))
			}
			return msg, nil
		case <-next:
			rounds++
			if receiptTo == "" && rounds > 2 {
				next = nil
				break
			}
			if err := launch(hedgeCopies(rounds), true); err != nil {
				return nil, err
			}
			hedge.Reset(a.hedgeWait(rounds))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// hedgeCopies is how many copies of a request the nth round of hedging
// sends: 2, then 4, then one (a request that asked for a receipt and got
// none). With one coordinator of two not answering, a request reaches a
// live one within about two HedgeAfter but for a chance of 1 in 128.
func hedgeCopies(n int) int {
	switch n {
	case 1:
		return 2
	case 2:
		return 4
	}
	return 1
}

// hedgeWait is how long the nth round of copies waits for an answer or a
// receipt before the next round: HedgeAfter after the first, then twice
// as long after each, up to ResultCheckInterval. Coordinators
// that send no receipt for a while are most often behind on their
// requests, and every copy is one more request for them: a copy of every
// waiting request each HedgeAfter would put them further behind the more
// requests wait (a thousand calls would be 4,000 copies a second).
func (a *coordinatorAPI) hedgeWait(round int) time.Duration {
	wait := a.opts.HedgeAfter
	for i := 1; i < round && wait < ledger.ResultCheckInterval; i++ {
		wait *= 2
	}
	return max(min(wait, ledger.ResultCheckInterval), a.opts.HedgeAfter)
}

// hedgeDelay is how long a request, or a quiet submit, goes without news
// (an answer, or a receipt) before a copy is sent or the call looked up:
// three times the recent time coordinators took to answer or to send a
// receipt, at least HedgeAfter and at most ResultCheckInterval. A
// coordinator that does not answer costs about HedgeAfter while the
// others answer quickly, and coordinators slow to answer (busy) are not
// sent copies that would load them more.
func (a *coordinatorAPI) hedgeDelay() time.Duration {
	t := time.Duration(a.answerTime.Load())
	return min(max(3*t, a.opts.HedgeAfter), ledger.ResultCheckInterval)
}

// observeAnswer adds the time an answer took to answerTime, with a weight
// of one eighth.
func (a *coordinatorAPI) observeAnswer(d time.Duration) {
	for {
		old := a.answerTime.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if a.answerTime.CompareAndSwap(old, next) {
			return
		}
	}
}

// noCoordinator is the error of a request that no coordinator received.
func noCoordinator(subject string) error {
	return messages.Errorf(messages.CodeNoResponders, "no coordinator answers on %s", subject)
}

// decodeReply decodes a reply into out, or returns the error it carries
// as *messages.Error. The error's code is the one in the reply's body; the
// HTTP-style status in the Nats-Service-Error-Code header stands for
// several codes, so a reply without a readable body is reported by the
// code that covers all of its status, or as internal.
func decodeReply(endpoint string, reply *nats.Msg, out any) error {
	if status := reply.Header.Get(micro.ErrorCodeHeader); status != "" {
		var e messages.Error
		if len(reply.Data) > 0 {
			if _, derr := messages.Decode(messages.Header(reply.Header), reply.Data, &e); derr == nil && e.Code != "" {
				return &e
			}
		}
		return &messages.Error{Code: codeForStatus(status), Message: fmt.Sprintf("%s failed with status %s: %s", endpoint, status, reply.Header.Get(micro.ErrorHeader))}
	}
	if out == nil {
		return nil
	}
	if _, err := messages.Decode(messages.Header(reply.Header), reply.Data, out); err != nil {
		return fmt.Errorf("decode %s reply: %w", endpoint, err)
	}
	return nil
}

// codeForStatus returns the code that covers every code of an error
// status, for a reply that carries no code of its own: bad_request for
// 400, unavailable for 503, and internal for any other status, since no
// code covers, say, every kind of 404.
func codeForStatus(status string) messages.ErrorCode {
	switch status {
	case messages.CodeBadRequest.StatusText():
		return messages.CodeBadRequest
	case messages.CodeUnavailable.StatusText():
		return messages.CodeUnavailable
	}
	return messages.CodeInternal
}

// tooLarge turns the connection's refusal of a message larger than the
// server's max_payload into payload_too_large, which says both sizes; it
// returns any other error as it is.
func (a *coordinatorAPI) tooLarge(endpoint string, msg *nats.Msg, err error) error {
	if !errors.Is(err, nats.ErrMaxPayload) {
		return err
	}
	return messages.Errorf(messages.CodePayloadTooLarge, "%s: the request is %d bytes, more than the NATS server's max_payload of %d bytes",
		endpoint, len(msg.Data), a.nc.MaxPayload())
}
