package coordinator

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/messages"
)

// requestsInHand keeps the requests a coordinator is handling that a
// copy could repeat: the submits that name their call (by a call ID or an
// idempotency key) and wait for an answer, and the requests held for a
// wait (calls.get, calls.events and calls.results with wait_ms, a batch
// with wait_ms). A client copies a request that no coordinator has
// receipted, answered where the first is (docs/protocol.md, "Long waits
// and receipts"); a copy that reaches the coordinator that is handling
// the first needs nothing of its own, as the first's answer reaches the
// client. Handled, a submit's copy would write the call's queued event
// again (refused) and read the call, and a held request's copy would take
// one of its user's waits until the first's answer: coordinators slow to
// send receipts, loaded already, would do each request's work again for
// each of its copies, and a user's own copies could take the waits its
// next requests need (too_many_requests).
type requestsInHand struct {
	mu       sync.Mutex
	requests map[string]*requestInHand
	// copies counts the copies left to their first's answer.
	copies atomic.Int64
}

type requestInHand struct {
	answer, caller string
	data           []byte
}

// answerKey says where a request's answer goes, as its copies share it:
// its reply token (messages.HeaderReplyToken) when it has a valid one,
// otherwise its reply subject. A request that crossed an account import
// has a reply subject the server made for it, a new one for each copy, so
// only the token tells that two such requests are answered in the same
// place; a request without either has no key.
func answerKey(reply string, headers map[string][]string) string {
	if token := nats.Header(headers).Get(messages.HeaderReplyToken); messages.ValidReplyToken(token) {
		return "token " + token
	}
	if reply == "" {
		return ""
	}
	return "reply " + reply
}

// take notes a request under key (a submit's call ID, or what takeHeld
// makes), answered at answer (answerKey) and sent with the body data by
// caller. It reports whether the request is a copy of one in hand, the
// same request of the same caller answered in the same place, which is
// then not to be handled; otherwise done is to be called once the
// request's answer is decided.
func (s *requestsInHand) take(key, answer, caller string, data []byte) (done func(), isCopy bool) {
	if key == "" || answer == "" {
		return func() {}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if first, ok := s.requests[key]; ok {
		if first.answer == answer && first.caller == caller && bytes.Equal(first.data, data) {
			s.copies.Add(1)
			return nil, true
		}
		// Another request for the call (a new attempt, another caller):
		// handled as before, answered as the call it names.
		return func() {}, false
	}
	if s.requests == nil {
		s.requests = make(map[string]*requestInHand)
	}
	mine := &requestInHand{answer: answer, caller: caller, data: data}
	s.requests[key] = mine
	return func() {
		s.mu.Lock()
		if s.requests[key] == mine {
			delete(s.requests, key)
		}
		s.mu.Unlock()
	}, false
}

// holdsAWait tells whether a decoded request is held for a wait, taking
// one of its user's waits.
func holdsAWait(v any) bool {
	switch r := v.(type) {
	case *messages.GetCallRequest:
		return r.WaitMS > 0
	case *messages.CallEventsRequest:
		return r.WaitMS > 0
	case *messages.ResultsRequest:
		return r.WaitMS > 0
	}
	return false
}

// takeSubmit notes a submit of the call callID (see requestsInHand).
func (r *request) takeSubmit(ctx context.Context, callID string) (done func(), isCopy bool) {
	return r.inHand.take(callID, answerKey(r.Reply(), r.Headers()), callerKey(ctx), r.Data())
}

// takeHeld notes a request held for a wait (see requestsInHand), under its
// endpoint and where it is answered: isCopy when it is a copy of one in
// hand, otherwise done is to be called once its answer is decided. A NUL
// cannot be in an endpoint's name or a call ID. A request answered nowhere
// (no answer key) is never taken for a copy (see take).
func (r *request) takeHeld(ctx context.Context) (done func(), isCopy bool) {
	answer := answerKey(r.Reply(), r.Headers())
	return r.inHand.take(r.endpoint+"\x00"+answer, answer, callerKey(ctx), r.Data())
}

// namedCallID is the ID of the call a submit names, "" when the
// coordinator gives it one.
func namedCallID(sr *messages.SubmitRequest) string {
	switch {
	case sr.IdempotencyKey != "":
		return messages.IdempotentCallID(sr.Agent, sr.IdempotencyKey)
	default:
		return sr.CallID
	}
}

// callerKey names the authenticated caller of a request, "" when there is
// none.
func callerKey(ctx context.Context) string {
	if id := identityOf(ctx); id != nil && id.caller != nil {
		return id.caller.String()
	}
	return ""
}
