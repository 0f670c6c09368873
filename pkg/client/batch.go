package client

import (
	"context"
	"time"

	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/pkg/messages"
)

// SubmitBatch submits the tool calls of one model iteration, in the
// provider's shape (calls.submit_batch): each is checked and queued as a
// Submit would be, and the reply lists each call's ID or refusal in the
// order of the model's calls. req.Turn is required. Every call's
// idempotency key is its provider's tool-call ID within the turn, so the
// batch is sent again after an attempt that went unanswered, and a batch
// sent twice runs nothing twice.
//
// With req.WaitMS, the reply also carries the calls' results as the
// provider's next input (SubmitBatchReply.Results), as Results would
// render them after waiting up to WaitMS: one request for the iteration.
func (c *Client) SubmitBatch(ctx context.Context, req messages.SubmitBatchRequest) (*messages.SubmitBatchReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.SubmitBatchReply
	return &out, c.api.request(ctx, messages.EndpointCallsSubmitBatch, &req, &out, repeatable, time.Duration(req.WaitMS)*time.Millisecond)
}

// Results renders calls, usually a batch's reply, as the provider's next
// input (calls.results): it waits up to req.WaitMS for the calls that are
// queued or running, then returns the messages to append to the
// conversation and each call's state. A call that waits for an approval
// is rendered as such, with its approval ID, without being waited for.
func (c *Client) Results(ctx context.Context, req messages.ResultsRequest) (*messages.ResultsReply, error) {
	var out messages.ResultsReply
	return &out, c.api.request(ctx, messages.EndpointCallsResults, &req, &out, read, time.Duration(req.WaitMS)*time.Millisecond)
}

// RunToolCalls runs the tool calls of one model iteration and returns
// their results as the provider's next input: ResultsReply.Messages, to
// append to the conversation after the model's message. format is the
// provider's (the format tools.list gave the model its tools in), and
// toolCalls its calls as the provider returned them (see SubmitBatch):
// raw JSON, or any value that encodes to it.
//
// Of opts, WithAgent, WithTurn and WithTimeout count (an idempotency key
// has no meaning for a batch, whose keys are its tool-call IDs). Without
// WithTurn, the calls go under a turn of their own, and are idempotent
// only within this RunToolCalls.
//
// RunToolCalls submits the calls and waits for their results in one
// request (calls.submit_batch with wait_ms), and asks again (calls.results)
// only for calls that outlast the coordinator's maximum wait. It waits
// until every call has ended, was refused or waits
// for an approval, or until ctx ends, whichever is first; calls still
// queued or running then are rendered as such (Complete is false). Calls
// awaiting an approval are rendered as such, with their approval IDs in
// ResultsReply.Calls, so the agent can tell its user.
//
// An agent that runs the calls itself, with Call, reads and renders them
// with package [github.com/toolbus/toolbus/pkg/toolformat], which the
// coordinator runs for RunToolCalls: the same calls give the same
// messages (see the example of Call).
func (c *Client) RunToolCalls(ctx context.Context, format string, toolCalls any, opts ...CallOption) (*messages.ResultsReply, error) {
	raw, err := toJSON(toolCalls)
	if err != nil {
		return nil, err
	}
	var scratch messages.SubmitRequest
	for _, opt := range opts {
		opt(&scratch)
	}
	if scratch.Turn == "" {
		scratch.Turn = nuid.Next()
	}
	wait := c.opts.resultsWait(ctx)
	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: format, ToolCalls: raw, Agent: scratch.Agent, Turn: scratch.Turn, TimeoutMS: scratch.TimeoutMS, WaitMS: max(wait.Milliseconds(), 1)})
	if err != nil {
		return nil, err
	}
	out := batch.Results
	if out == nil {
		// A coordinator of before wait_ms answers with the calls alone.
		return c.AwaitResults(ctx, format, batch.Calls)
	}
	if settled(out.Calls) || wait < 10*time.Millisecond || ctx.Err() != nil {
		return out, nil
	}
	return c.AwaitResults(ctx, format, out.Calls)
}

// resultsWait is how long one request may wait for results: the client's
// maximum wait, within three quarters of what is left of ctx (a quarter
// is for the reply to come back in), or, without a deadline, half of
// DefaultTimeout, which bounds the request.
func (o *Options) resultsWait(ctx context.Context) time.Duration {
	wait := o.MaxWait
	if d, ok := ctx.Deadline(); ok {
		return min(wait, time.Until(d)*3/4)
	}
	return min(wait, o.DefaultTimeout/2)
}

// AwaitResults is Results, asked again until every call has ended, was
// refused or waits for an approval, or until ctx ends: a coordinator
// holds one request for at most its maximum wait.
func (c *Client) AwaitResults(ctx context.Context, format string, calls []messages.BatchCall) (*messages.ResultsReply, error) {
	for {
		wait := c.opts.resultsWait(ctx)
		out, err := c.Results(ctx, messages.ResultsRequest{Format: format, Calls: calls, WaitMS: max(wait.Milliseconds(), 0)})
		if err != nil {
			return nil, err
		}
		if settled(out.Calls) || wait < 10*time.Millisecond || ctx.Err() != nil {
			return out, nil
		}
		calls = out.Calls
	}
}

// settled tells whether no call is queued or running.
func settled(calls []messages.BatchCall) bool {
	for _, bc := range calls {
		if bc.Error == nil && (bc.State == messages.StateQueued || bc.State == messages.StateRunning) {
			return false
		}
	}
	return true
}
