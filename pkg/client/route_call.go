package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/tracing"
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

// hedgeCopies is how many copies of a quiet submit the nth lookup that
// found no call sends: 2, then 4, then one. With one coordinator of two
// not answering, the call is queued within about two HedgeAfter but for a
// chance of 1 in 128.
func hedgeCopies(n int) int {
	switch n {
	case 1:
		return 2
	case 2:
		return 4
	}
	return 1
}

// callOnRoute makes a call on the client's route (see above).
func (c *Client) callOnRoute(ctx context.Context, req messages.SubmitRequest, o *CallObserver) (*messages.CallResult, error) {
	route, err := c.routes.Route()
	if err != nil {
		return nil, err
	}
	req.Route, req.CallID, req.Quiet = route, messages.RoutedCallID(route, messages.RandomToken()), true
	callID := req.CallID
	o.named(callID)
	ns := toolNamespace(req.Tool)
	answers, done := c.routes.Await(callID, ns)
	defer func() { done() }()
	rc := &routedCall{c: c, req: req, token: newReplyToken(), callID: callID, ns: ns}
	// A coordinator from before quiet submits names the call itself, and
	// answers; the call is then followed under that name.
	adopt := func(reply *messages.SubmitReply) {
		if reply.CallID != "" && reply.CallID != callID {
			done()
			callID = reply.CallID
			o.named(callID)
			answers, done = c.routes.Await(callID, ns)
		}
	}
	// Every copy asks for a receipt on the route, which a coordinator
	// sends as soon as it has the copy.
	receiptID := messages.RoutedCallID(route, messages.RandomToken())
	if rc.receiptTo, err = c.names.CallRouteSubject(receiptID); err != nil {
		return nil, err
	}
	receipts, stopReceipts := c.routes.Await(receiptID, "")
	defer stopReceipts()
	sentAt := time.Now()
	if err := rc.send(ctx, 1); err != nil {
		return nil, err // nothing was sent
	}
	// lookup is when to look the call up next, while it is not known to
	// be queued: soon if no receipt comes, later if one came.
	lookup := time.NewTimer(c.hedgeDelay())
	defer lookup.Stop()
	// copies is when to send the next round of copies, while a lookup
	// found no call and no receipt came since.
	copies := time.NewTimer(time.Hour)
	copies.Stop()
	defer copies.Stop()
	// resend is a submit to send again after a pause: no coordinator
	// listened, or one could not store the call for now.
	resend := time.NewTimer(time.Hour)
	resend.Stop()
	defer resend.Stop()
	resends := 0
	resendSoon := func() {
		resends++
		resend.Reset(requestRetry.Delay(resends))
	}
	var (
		check     <-chan struct{}
		checks    ledger.LeaderChecks
		confirmed bool
		// takenAt is when the last receipt came; zero when none came since
		// the last lookup that found no call.
		takenAt time.Time
		// refusal is a coordinator's refusal of one of several copies,
		// reported once a lookup says the call does not exist.
		refusal error
		// noCoordinatorSince is when the copies began to find no
		// coordinator listening; noCoordinatorAnswers counts the copies
		// that found none.
		noCoordinatorSince   time.Time
		noCoordinatorAnswers int
		// loud is the outcome of a submit sent as a request, while one is.
		loud chan loudAnswer
		// reconnects is the route's count of reconnects at the last check.
		reconnects = c.routes.Reconnects()
	)
	// sendCopies sends the next round of copies (1, 2, 4, then the submit
	// as a request, whose reply comes on the client's own inbox whatever
	// the coordinator, one that refuses this protocol version say, sends),
	// and arms the round after it.
	sendCopies := func() {
		rc.hedges++
		if rc.hedges <= 3 {
			_ = rc.send(ctx, quietCopies(rc.hedges))
			copies.Reset(c.opts.HedgeAfter)
			return
		}
		if loud == nil {
			loud = make(chan loudAnswer, 1)
			go func(req messages.SubmitRequest) {
				req.Quiet = false
				reply, err := c.Submit(ctx, req)
				loud <- loudAnswer{reply, err}
			}(req)
		}
	}
	for {
		select {
		case msg := <-receipts:
			if msg.Header.Get(messages.HeaderReceipt) != messages.ReceiptSent {
				break
			}
			if takenAt.IsZero() && rc.hedges == 0 {
				c.observeAnswer(time.Since(sentAt))
			}
			takenAt = time.Now()
			copies.Stop()
			if !confirmed {
				// A live coordinator has a copy and queues it: looked up
				// later, in case it stopped before it did.
				lookup.Reset(ledger.ResultCheckInterval)
			}
		case msg := <-answers:
			if ledger.IsStoredEvent(msg) {
				if res := routedResult(msg, callID); res != nil {
					return res, nil
				}
				break
			}
			if noCoordinatorListened(msg) {
				noCoordinatorAnswers++
				if noCoordinatorSince.IsZero() {
					noCoordinatorSince = time.Now()
				}
				if time.Since(noCoordinatorSince) < c.opts.NoCoordinatorWait || confirmed {
					resendSoon()
					break
				}
				// No coordinator for so long: the call is reported
				// refused, unless a lookup finds it queued after all.
				refusal = noCoordinator(msg.Subject)
				lookup.Reset(0)
				break
			}
			noCoordinatorSince = time.Time{}
			if msg.Header.Get(messages.HeaderReplyToken) != rc.token {
				break // an answer to another request, sent to this route
			}
			var reply messages.SubmitReply
			if err := decodeReply(messages.EndpointCallsSubmit, msg, &reply); err != nil {
				switch {
				case mayPass(err):
					resendSoon()
				case rc.sent == 1:
					return nil, err // the only copy was refused: nothing was queued
				default:
					refusal = err
					if !confirmed {
						lookup.Reset(0)
					}
				}
				break
			}
			if res, settled, err := settle(&reply); settled {
				return res, err
			}
			if o.holds(&reply) {
				return nil, &ApprovalRequiredError{CallID: reply.CallID, Approval: reply.Approval}
			}
			adopt(&reply)
			confirmed = true
		case <-resend.C:
			_ = rc.send(ctx, 1)
		case <-copies.C:
			if takenAt.IsZero() && !confirmed {
				sendCopies()
			}
		case a := <-loud:
			loud = nil
			switch {
			case a.err == nil:
				if res, settled, err := settle(a.reply); settled {
					return res, err
				}
				if o.holds(a.reply) {
					return nil, &ApprovalRequiredError{CallID: a.reply.CallID, Approval: a.reply.Approval}
				}
				adopt(a.reply)
				confirmed = true
			case mayPass(a.err) || ctx.Err() != nil:
			default:
				refusal = a.err
				if !confirmed {
					lookup.Reset(0)
				}
			}
		case <-lookup.C:
			if confirmed {
				break
			}
			reply, exists, err := c.lookupCall(ctx, ns, callID)
			switch {
			case err != nil && refusal != nil && noCoordinatorAnswers >= rc.sent:
				// No copy reached a coordinator: the server said so of
				// each, so nothing was queued.
				return nil, refusal
			case err != nil:
				// The stream or the coordinators did not say: ask again
				// later, and send nothing meanwhile.
				lookup.Reset(ledger.ResultCheckInterval)
			case exists:
				if res, settled, err := settle(reply); settled {
					return res, err
				}
				if o.holds(reply) {
					return nil, &ApprovalRequiredError{CallID: reply.CallID, Approval: reply.Approval}
				}
				confirmed = true
			case refusal != nil:
				return nil, refusal
			case !takenAt.IsZero() && time.Since(takenAt) < lostAfter:
				// The coordinator that has a copy may be waiting out an
				// election before it stores the call; it answers if it
				// cannot.
				lookup.Reset(ledger.ResultCheckInterval)
			default:
				// No receipt, or the coordinator that sent one stopped
				// before it queued the call: copies, until one is taken.
				takenAt = time.Time{}
				sendCopies()
				lookup.Reset(ledger.ResultCheckInterval)
			}
		case <-check:
			check = nil
			cctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
			if r := c.routes.Reconnects(); r != reconnects {
				// The result's copy may have been lost while the connection
				// was away: the next checks ask the stream's leader.
				reconnects = r
				checks.Restart()
			}
			confirm := checks.Next()
			res, err := c.checkResult(cctx, messages.TurnBucket(req.Turn), ns, callID, confirm)
			cancel()
			if err == nil && res != nil {
				return res, nil
			}
			if err != nil {
				checks.Failed(confirm)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for call %s: %w", callID, ctx.Err())
		}
		if confirmed && check == nil {
			check = c.routes.Check()
		}
	}
}

// lostAfter is how long after a coordinator's receipt a call may stay
// missing before its copy is taken for lost with that coordinator: longer
// than a coordinator waits for JetStream before it answers that it could
// not store the call (its UnavailableWait, 10s by default).
const lostAfter = 12 * time.Second

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
	// receiptTo is where the copies ask for a receipt.
	receiptTo string
}

// send publishes copies of the quiet submit, whose answers, if any, come
// on the call's route with the submit's token.
func (rc *routedCall) send(ctx context.Context, copies int) error {
	subject, err := rc.c.names.APISubject(messages.EndpointCallsSubmit)
	if err != nil {
		return err
	}
	reply, err := rc.c.names.CallRouteSubject(rc.req.CallID)
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
		msg.Header.Set(messages.HeaderReceipt, rc.receiptTo)
		tracing.Inject(ctx, msg.Header)
		if err := rc.c.nc.PublishMsg(msg); err != nil {
			return fmt.Errorf("submit: %w", rc.c.tooLarge(messages.EndpointCallsSubmit, msg, err))
		}
		rc.sent++
	}
	return nil
}

// lookupCall tells whether the call exists, as the events stream's leader
// or a coordinator says, with what a reply to its submit would hold; an
// error when neither answered.
func (c *Client) lookupCall(ctx context.Context, ns, callID string) (*messages.SubmitReply, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
	defer cancel()
	if c.readsViaCoordinator() {
		info, err := c.Get(cctx, callID)
		switch {
		case errors.Is(err, messages.ErrCallNotFound):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return &messages.SubmitReply{CallID: callID, State: info.State, Result: info.Result, Approval: info.Approval}, true, nil
	}
	snap, err := c.ledger.SnapshotIn(cctx, ns, callID)
	if err != nil {
		return nil, false, err
	}
	if !snap.Exists() {
		return nil, false, nil
	}
	reply := &messages.SubmitReply{CallID: callID, State: snap.State()}
	if snap.Result != nil {
		reply.Result = snap.Result.Result
	}
	return reply, true, nil
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
