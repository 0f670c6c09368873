package client

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

// CallObserver follows a call made with CallObserved.
type CallObserver struct {
	// Named, if set, is called with the call's ID before the call is
	// submitted (and again should the coordinator name it otherwise), so
	// that the caller can cancel the call while it waits.
	Named func(callID string)
	// Held, if set, is called when the coordinator answers that the call
	// waits for an approval an operator decides (mode queue); when it
	// returns true, CallObserved returns an *ApprovalRequiredError at once
	// and the call goes on waiting for the decision.
	Held func(reply *messages.SubmitReply) bool
}

func (o *CallObserver) named(callID string) {
	if o != nil && o.Named != nil {
		o.Named(callID)
	}
}

// holds reports whether the caller stops waiting for a call held for an
// operator's approval.
func (o *CallObserver) holds(reply *messages.SubmitReply) bool {
	return o != nil && o.Held != nil && reply.State == messages.StateAwaitingApproval && reply.Approval != nil && o.Held(reply)
}

// CallObserved is Call for a request made whole by the caller (an agent
// and turn of its own, say), reporting to o: the call's ID before it is
// submitted (after it, from the submit's reply, when the request names no
// agent and the ID depends on the one the coordinator fills in), and, if
// o asks, a hold for an operator's approval. Like Call,
// it waits for the result on the client's route, with no consumer or
// subscription per call on the server.
func (c *Client) CallObserved(ctx context.Context, req messages.SubmitRequest, o *CallObserver) (*messages.CallResult, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	if req.IdempotencyKey == "" && (c.opts.Route != "" || !c.api.readsViaCoordinator()) {
		return c.callOnRoute(ctx, req, o)
	}
	// Without a route of its own, as Call: the call is made idempotent,
	// which names its ID before the submit, and awaited with calls.get
	// (or on an inbox).
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = messages.RandomToken()
	}
	// The ID derives from the agent and the key. Without an agent named,
	// the coordinator takes the user's own, which this client may not
	// know: the ID is then the one the submit's reply gives.
	if req.Agent != "" {
		o.named(messages.IdempotentCallID(req.Agent, req.IdempotencyKey))
	}
	reply, err := c.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Agent == "" {
		o.named(reply.CallID)
	}
	if res, settled, err := settle(reply); settled {
		return res, err
	}
	if o.holds(reply) {
		return nil, &ApprovalRequiredError{CallID: reply.CallID, Approval: reply.Approval}
	}
	return c.Wait(ctx, reply.CallID)
}
