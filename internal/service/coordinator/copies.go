package coordinator

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"

	"github.com/toolbus/toolbus/pkg/messages"
)

// submitsInHand keeps the submits a coordinator is handling that a copy
// could repeat: those that name their call (by a call ID or an
// idempotency key) and wait for an answer. A client copies a request that
// no coordinator has receipted to the reply subject of the first
// (docs/protocol.md, "Long waits and receipts"); a copy that reaches the
// coordinator that is handling the first needs nothing of its own, as the
// first's answer goes to the same subject. Handled, it would write the
// call's queued event again (refused), read the call, and, for a held
// submit, take a place until the result: coordinators slow to send
// receipts, loaded already, would do each request's work again for each
// of its copies.
type submitsInHand struct {
	mu      sync.Mutex
	submits map[string]*submitInHand
	// copies counts the copies left to their first's answer.
	copies atomic.Int64
}

type submitInHand struct {
	reply, caller string
	data          []byte
}

// take notes a submit of the call callID, sent to reply with the request
// body data by caller. It reports whether the submit is a copy of one in
// hand, the same request of the same caller to the same reply subject,
// which is then not to be handled; otherwise done is to be called once the
// submit's answer is decided.
func (s *submitsInHand) take(callID, reply, caller string, data []byte) (done func(), isCopy bool) {
	if callID == "" || reply == "" {
		return func() {}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if first, ok := s.submits[callID]; ok {
		if first.reply == reply && first.caller == caller && bytes.Equal(first.data, data) {
			s.copies.Add(1)
			return nil, true
		}
		// Another request for the call (a new attempt, another caller):
		// handled as before, answered as the call it names.
		return func() {}, false
	}
	if s.submits == nil {
		s.submits = make(map[string]*submitInHand)
	}
	mine := &submitInHand{reply: reply, caller: caller, data: data}
	s.submits[callID] = mine
	return func() {
		s.mu.Lock()
		if s.submits[callID] == mine {
			delete(s.submits, callID)
		}
		s.mu.Unlock()
	}, false
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
