package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// A call on the client's route.
//
// Call names its call's ID on the client's route, awaits it there, and
// then submits it quietly: the coordinator answers only if the call is not
// queued (a refusal, an approval to obtain), and the result arrives on the
// route once it is stored. Nothing in this says whether the submit reached
// a coordinator that works, so until the call is known to be queued it is
// looked up (in the events stream, or with calls.get) after HedgeAfter, and
// again after each doubling of that wait; a lookup that finds no call sends
// the submit again, quietly in 2 copies the first time and 4 the second,
// each to a coordinator the queue group picks, and after that as a request
// whose reply comes on the client's own inbox (one at a time): its answer
// is the coordinator's word, whatever protocol the coordinator speaks. The copies cannot
// queue the call twice (they name its ID), and a coordinator that does not
// answer (stopped, hung, cut off) costs the call about one HedgeAfter.
// The first submit asks for no receipt, so a call that ends before its
// first lookup costs no message more than its submit and its result; the
// copies ask for one, and a receipt defers the next lookup (a coordinator
// that has a copy may be waiting out an election before it stores it).
//
// No answer ends the call early that could be wrong: a submit that found
// no coordinator, or that a coordinator could not store for now
// (unavailable, timeout), is sent again while the context allows, and a
// refusal of one copy among several is reported only once a lookup at the
// stream's leader (or the coordinator) says the call does not exist. So
// Call reports a refusal only when nothing was queued, and otherwise
// returns the call's result or, when its context ends, an error naming the
// call, whose outcome calls.get tells.
//
// Anyone who knows the route may have answers sent to it (the server does
// not check whose a reply subject is), so the submits carry a fresh token
// (messages.HeaderReplyToken) that the coordinator copies onto its
// answers, and an answer without it is not this call's; a result counts
// only as the events stream republished it, for this call ID.

// callOnRoute makes a call on the client's route (see above).
func (c *Client) callOnRoute(ctx context.Context, req messages.SubmitRequest, o *CallObserver) (*messages.CallResult, error) {
	w, err := startRouteWait(ctx, c, req, o)
	if err != nil {
		return nil, err
	}
	defer w.close()
	return w.wait()
}

// wait follows the call until its result, a refusal, or ctx's end.
func (w *routeWait) wait() (*messages.CallResult, error) {
	ctx := w.ctx
	for {
		var (
			res *messages.CallResult
			end bool
			err error
		)
		select {
		case msg := <-w.receipts:
			w.receipt(msg)
		case msg := <-w.answers:
			res, end, err = w.answer(msg)
		case <-timerC(w.resend):
			w.askReceipts()
			_ = w.rc.send(ctx, 1)
		case <-timerC(w.copies):
			if w.takenAt.IsZero() && !w.confirmed {
				w.sendCopies()
			}
		case a := <-w.loud:
			w.loud = nil
			res, end, err = w.loudAnswered(a)
		case <-w.lookup.C:
			res, end, err = w.lookUp()
		case <-w.check:
			w.check = nil
			res, end = w.checkResult()
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for call %s: %w", w.callID, ctx.Err())
		}
		if end {
			return res, err
		}
		if w.confirmed && w.check == nil {
			w.check = w.c.routes.Check()
		}
	}
}

// routeWait is what a call on the route knows while it waits: the copies
// sent, the receipts and answers seen, and when to look again.
type routeWait struct {
	c   *Client
	ctx context.Context
	req messages.SubmitRequest
	o   *CallObserver
	rc  *routedCall
	// callID is the call's name, which a coordinator from before quiet
	// submits may change (adopt); answers and done are its route's.
	callID, ns string
	answers    <-chan *nats.Msg
	done       func()
	// receipts are the coordinators' receipts of the copies.
	receipts     <-chan *nats.Msg
	stopReceipts func()
	// lookup is when to look the call up next, while it is not known to
	// be queued: soon if no receipt comes, later if one came.
	lookup *time.Timer
	// copies is when to send the next round of copies, while a lookup
	// found no call and no receipt came since; nil until first armed.
	copies *time.Timer
	// resend is a submit to send again after a pause: no coordinator
	// listened, or one could not store the call for now; nil until first
	// armed.
	resend  *time.Timer
	resends int
	// check is the route's next periodic look for a missed result, once
	// the call is known to be queued (confirmed).
	check     <-chan struct{}
	checks    ledger.LeaderChecks
	confirmed bool
	// takenAt is when the last receipt came; zero when none came since
	// the last lookup that found no call.
	takenAt time.Time
	// refusal is a coordinator's refusal of one of several copies,
	// reported once a lookup says the call does not exist.
	refusal error
	// noCoordinatorSince is when the copies began to find no coordinator
	// listening; noCoordinatorAnswers counts the copies that found none.
	noCoordinatorSince   time.Time
	noCoordinatorAnswers int
	// loud is the outcome of a submit sent as a request, while one is;
	// stopLoud ends that request once the wait ends: a result that came
	// meanwhile leaves it nothing to learn, and its copies would go on.
	loud     chan loudAnswer
	stopLoud context.CancelFunc
	// reconnects is the route's count of reconnects at the last check.
	reconnects uint64
}

// startRouteWait names the call on the route, awaits its answers and
// receipts there, and sends the first copy of its quiet submit.
func startRouteWait(ctx context.Context, c *Client, req messages.SubmitRequest, o *CallObserver) (*routeWait, error) {
	route, err := c.routes.Route()
	if err != nil {
		return nil, err
	}
	req.Route, req.CallID, req.Quiet = route, messages.RoutedCallID(route, messages.RandomToken()), true
	o.named(req.CallID)
	w := &routeWait{c: c, ctx: ctx, req: req, o: o, callID: req.CallID, ns: toolNamespace(req.Tool)}
	w.rc = &routedCall{c: c, req: req, token: newReplyToken(), callID: w.callID, ns: w.ns}
	w.answers, w.done = c.routes.Await(w.callID, w.ns)
	// The first copy asks for no receipt: most calls end before the first
	// lookup, and one that does not is looked up once, which costs what a
	// receipt would. The copies after it ask for one (askReceipts).
	if err := w.rc.send(ctx, 1); err != nil {
		w.done()
		return nil, err // nothing was sent
	}
	w.lookup = time.NewTimer(c.api.hedgeDelay())
	w.reconnects = c.routes.Reconnects()
	return w, nil
}

func (w *routeWait) close() {
	if w.stopLoud != nil {
		w.stopLoud()
	}
	w.lookup.Stop()
	stopTimer(w.copies)
	stopTimer(w.resend)
	if w.stopReceipts != nil {
		w.stopReceipts()
	}
	w.done()
}

// askReceipts has the copies sent from now on ask for a receipt on the
// route, which a coordinator sends as soon as it has the copy.
func (w *routeWait) askReceipts() {
	if w.rc.receiptTo != "" {
		return
	}
	route, err := w.c.routes.Route()
	if err != nil {
		return // the copies go without: lookups still follow them
	}
	receiptID := messages.RoutedCallID(route, messages.RandomToken())
	receiptTo, err := w.c.names.Routes().CallSubject(receiptID)
	if err != nil {
		return
	}
	w.rc.receiptTo = receiptTo
	w.receipts, w.stopReceipts = w.c.routes.Await(receiptID, "")
}

// adopt follows the call under the name a coordinator from before quiet
// submits gave it, which answers.
func (w *routeWait) adopt(reply *messages.SubmitReply) {
	if reply.CallID != "" && reply.CallID != w.callID {
		w.done()
		w.callID = reply.CallID
		w.o.named(w.callID)
		w.answers, w.done = w.c.routes.Await(w.callID, w.ns)
	}
}

func (w *routeWait) resendSoon() {
	w.resends++
	armTimer(&w.resend, requestRetry.Delay(w.resends))
}

// sendCopies sends the next round of copies (1, 2, 4, then the submit as a
// request, whose reply comes on the client's own inbox whatever the
// coordinator, one that refuses this protocol version say, sends), and
// arms the round after it.
func (w *routeWait) sendCopies() {
	w.askReceipts()
	w.rc.hedges++
	if w.rc.hedges <= 3 {
		_ = w.rc.send(w.ctx, quietCopies(w.rc.hedges))
		armTimer(&w.copies, w.c.opts.HedgeAfter)
		return
	}
	if w.loud == nil {
		w.loud = make(chan loudAnswer, 1)
		ctx, stop := context.WithCancel(w.ctx)
		w.stopLoud = stop
		go func(req messages.SubmitRequest, loud chan<- loudAnswer) {
			req.Quiet = false
			reply, err := w.c.Submit(ctx, req)
			loud <- loudAnswer{reply, err}
		}(w.req, w.loud)
	}
}

// replied settles the call on a coordinator's reply to its submit, or
// takes it as queued.
func (w *routeWait) replied(reply *messages.SubmitReply) (*messages.CallResult, bool, error) {
	if res, settled, err := settle(reply); settled {
		return res, true, err
	}
	if w.o.holds(reply) {
		return nil, true, &ApprovalRequiredError{CallID: reply.CallID, Approval: reply.Approval}
	}
	return nil, false, nil
}

func (w *routeWait) receipt(msg *nats.Msg) {
	if msg.Header.Get(messages.HeaderReceipt) != messages.ReceiptSent {
		return
	}
	w.takenAt = time.Now()
	stopTimer(w.copies)
	if !w.confirmed {
		// A live coordinator has a copy and queues it: looked up later,
		// in case it stopped before it did.
		w.lookup.Reset(ledger.ResultCheckInterval)
	}
}

// answer takes a message on the call's route: its result, or a
// coordinator's answer to one of the copies.
func (w *routeWait) answer(msg *nats.Msg) (*messages.CallResult, bool, error) {
	if ledger.IsStoredEvent(msg) {
		if res := routedResult(msg, w.callID); res != nil {
			return res, true, nil
		}
		return nil, false, nil
	}
	if noCoordinatorListened(msg) {
		w.noCoordinatorAnswers++
		if w.noCoordinatorSince.IsZero() {
			w.noCoordinatorSince = time.Now()
		}
		if time.Since(w.noCoordinatorSince) < w.c.opts.NoCoordinatorWait || w.confirmed {
			w.resendSoon()
			return nil, false, nil
		}
		// No coordinator for so long: the call is reported refused,
		// unless a lookup finds it queued after all.
		// The status comes on the route; the subject no one answered is
		// the submit's.
		subject, err := w.c.names.APISubject(messages.EndpointCallsSubmit)
		if err != nil {
			subject = msg.Subject
		}
		w.refusal = noCoordinator(subject)
		w.lookup.Reset(0)
		return nil, false, nil
	}
	w.noCoordinatorSince = time.Time{}
	if msg.Header.Get(messages.HeaderReplyToken) != w.rc.token {
		return nil, false, nil // an answer to another request, sent to this route
	}
	var reply messages.SubmitReply
	if err := decodeReply(messages.EndpointCallsSubmit, msg, &reply); err != nil {
		switch {
		case mayPass(err):
			w.resendSoon()
		case w.rc.sent == 1:
			return nil, true, err // the only copy was refused: nothing was queued
		default:
			w.refusal = err
			if !w.confirmed {
				w.lookup.Reset(0)
			}
		}
		return nil, false, nil
	}
	if res, end, err := w.replied(&reply); end {
		return res, true, err
	}
	w.adopt(&reply)
	w.confirmed = true
	return nil, false, nil
}

// loudAnswered takes the reply to the submit sent as a request.
func (w *routeWait) loudAnswered(a loudAnswer) (*messages.CallResult, bool, error) {
	switch {
	case a.err == nil:
		if res, end, err := w.replied(a.reply); end {
			return res, true, err
		}
		w.adopt(a.reply)
		w.confirmed = true
	case mayPass(a.err) || w.ctx.Err() != nil:
	default:
		w.refusal = a.err
		if !w.confirmed {
			w.lookup.Reset(0)
		}
	}
	return nil, false, nil
}

// lookUp asks whether the call exists, while it is not known to be
// queued, and sends copies when no coordinator has one.
func (w *routeWait) lookUp() (*messages.CallResult, bool, error) {
	if w.confirmed {
		return nil, false, nil
	}
	reply, exists, err := w.c.reads.lookupCall(w.ctx, w.ns, w.callID)
	switch {
	case err != nil && w.refusal != nil && w.noCoordinatorAnswers >= w.rc.sent:
		// No copy reached a coordinator: the server said so of each, so
		// nothing was queued.
		return nil, true, w.refusal
	case err != nil:
		// The stream or the coordinators did not say: ask again later,
		// and send nothing meanwhile.
		w.lookup.Reset(ledger.ResultCheckInterval)
	case exists:
		if res, end, err := w.replied(reply); end {
			return res, true, err
		}
		w.confirmed = true
	case w.refusal != nil:
		return nil, true, w.refusal
	case !w.takenAt.IsZero() && time.Since(w.takenAt) < lostAfter:
		// The coordinator that has a copy may be waiting out an election
		// before it stores the call; it answers if it cannot.
		w.lookup.Reset(ledger.ResultCheckInterval)
	default:
		// No receipt, or the coordinator that sent one stopped before it
		// queued the call: copies, until one is taken.
		w.takenAt = time.Time{}
		w.sendCopies()
		w.lookup.Reset(ledger.ResultCheckInterval)
	}
	return nil, false, nil
}

// checkResult looks for a result whose copy on the route may have been
// missed, once the call is queued.
func (w *routeWait) checkResult() (*messages.CallResult, bool) {
	cctx, cancel := context.WithTimeout(w.ctx, ledger.ResultCheckInterval)
	defer cancel()
	if r := w.c.routes.Reconnects(); r != w.reconnects {
		// The result's copy may have been lost while the connection was
		// away: the next checks ask the stream's leader.
		w.reconnects = r
		w.checks.Restart()
	}
	confirm := w.checks.Next()
	res, err := w.c.reads.checkResult(cctx, messages.TurnBucket(w.req.Turn), w.ns, w.callID, confirm)
	if err != nil {
		w.checks.Failed(confirm)
	}
	return res, err == nil && res != nil
}

// lostAfter is how long after a coordinator's receipt a call may stay
// missing before its copy is taken for lost with that coordinator: longer
// than a coordinator waits for JetStream before it answers that it could
// not store the call (its UnavailableWait, 10s by default).
const lostAfter = 12 * time.Second

// armTimer has *t fire after d, made when first armed: most calls never
// need it.
func armTimer(t **time.Timer, d time.Duration) {
	if *t == nil {
		*t = time.NewTimer(d)
		return
	}
	(*t).Reset(d)
}

// timerC is t's channel; nil, which is never ready, for a timer never
// armed.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// stopTimer stops t, if it was ever armed.
func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// quietCopies is how many copies of a quiet submit the nth round sends:
// 1, then 2, then 4.
func quietCopies(n int) int { return 1 << min(n-1, 2) }

// loudAnswer is the reply to a submit sent as a request.
type loudAnswer struct {
	reply *messages.SubmitReply
	err   error
}

// routedCall is a call's quiet submit and its copies.
type routedCall struct {
	c      *Client
	req    messages.SubmitRequest
	token  string
	callID string
	ns     string
	// sent counts the copies sent; hedges the lookups that sent more.
	sent, hedges int
	// receiptTo is where the copies ask for a receipt; empty while they
	// ask for none.
	receiptTo string
}

// send publishes copies of the quiet submit, whose answers, if any, come
// on the call's route with the submit's token.
func (rc *routedCall) send(ctx context.Context, copies int) error {
	subject, err := rc.c.names.APISubject(messages.EndpointCallsSubmit)
	if err != nil {
		return err
	}
	reply, err := rc.c.names.Routes().CallSubject(rc.req.CallID)
	if err != nil {
		return err
	}
	data, err := rc.c.opts.Codec.Marshal(&rc.req)
	if err != nil {
		return fmt.Errorf("encode submit: %w", err)
	}
	for range copies {
		msg := &nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(rc.c.opts.Codec.NewHeader()), Data: data}
		msg.Header.Set(messages.HeaderReplyToken, rc.token)
		if rc.receiptTo != "" {
			msg.Header.Set(messages.HeaderReceipt, rc.receiptTo)
		}
		tracing.Inject(ctx, msg.Header)
		if err := rc.c.nc.PublishMsg(msg); err != nil {
			return fmt.Errorf("submit: %w", rc.c.api.tooLarge(messages.EndpointCallsSubmit, msg, err))
		}
		rc.sent++
	}
	return nil
}

// routedResult is the result a republished result event on the route
// carries, if it is the call's own.
func routedResult(msg *nats.Msg, callID string) *messages.CallResult {
	var ev messages.CallEvent
	if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err != nil {
		return nil
	}
	if ev.Kind != messages.EventResult || ev.CallID != callID || ev.Result == nil || ev.Result.CallID != callID {
		return nil
	}
	return ev.Result
}

// noCoordinatorListened reports the server's answer to a request that no
// subscriber received: a status message without a body.
func noCoordinatorListened(msg *nats.Msg) bool {
	return len(msg.Data) == 0 && msg.Header.Get("Status") == noRespondersStatus
}

// noRespondersStatus is the status of the message the server sends to a
// request's reply subject when nothing listens on its subject.
const noRespondersStatus = "503"

// mayPass reports a coordinator's answer that says nothing was decided:
// the call could not be stored for now, and may be submitted again.
func mayPass(err error) bool {
	switch messages.CodeOf(err) {
	case messages.CodeUnavailable, messages.CodeTimeout, messages.CodeNoResponders:
		return true
	}
	return false
}

// newReplyToken returns a token no one else can guess (HeaderReplyToken).
func newReplyToken() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
