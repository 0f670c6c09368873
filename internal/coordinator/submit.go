package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

func (c *Coordinator) submit(ctx context.Context, req *request) (any, error) {
	var sr messages.SubmitRequest
	if err := req.decode(&sr); err != nil {
		return nil, err
	}
	if !sr.Quiet {
		return c.Submit(ctx, &sr, req.Headers())
	}
	// A quiet submit is over for its caller once the call is on its way:
	// the outcome of the writes is awaited on the ledger's goroutine, and
	// only a failure is answered.
	done := req.later()
	reply, err := c.submitCall(ctx, &sr, req.Headers(), func(_ *messages.SubmitReply, err error) {
		if err != nil {
			c.respondError(req, err)
		}
		done()
	})
	if errors.Is(err, errQueueing) {
		return noReply{}, nil
	}
	done() // nothing goes on after this handler
	if err == nil && reply.State == messages.StateQueued {
		return noReply{}, nil
	}
	return reply, err
}

// errQueueing is what submitCall returns when its call is being queued and
// the outcome goes to the function it was given.
var errQueueing = errors.New("the call is being queued")

// Submit checks a call and queues it. It is the calls.submit endpoint;
// headers carry the caller's trace context.
func (c *Coordinator) Submit(ctx context.Context, sr *messages.SubmitRequest, headers map[string][]string) (*messages.SubmitReply, error) {
	return c.submitCall(ctx, sr, headers, nil)
}

// submitCall is Submit. With then set and a call to queue without waiting
// for its result, it does not wait for the writes either: it returns
// errQueueing, and then gets the outcome. Otherwise then is not called.
func (c *Coordinator) submitCall(ctx context.Context, sr *messages.SubmitRequest, headers map[string][]string, then func(*messages.SubmitReply, error)) (_ *messages.SubmitReply, err error) {
	ctx, span := c.tracer.Start(tracing.Extract(ctx, headers), "toolbus.submit", trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.tool", sr.Tool), attribute.String("toolbus.agent", sr.Agent))
	}
	defer func() {
		if err != nil && err != errQueueing {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if sr.Tool == "" {
		return nil, messages.Errorf(messages.CodeBadRequest, "tool is required")
	}
	name, err := messages.ParseToolName(sr.Tool)
	if err != nil {
		return nil, err
	}
	if sr.Agent != "" {
		if err := messages.ValidateID("agent", sr.Agent); err != nil {
			return nil, err
		}
	}
	if sr.Turn != "" {
		if err := messages.ValidateID("turn", sr.Turn); err != nil {
			return nil, err
		}
	}
	if sr.Notify != "" {
		if err := messages.ValidateNotify(sr.Notify); err != nil {
			return nil, err
		}
	}
	if sr.Route != "" {
		if err := messages.ValidateRoute(sr.Route); err != nil {
			return nil, err
		}
		if sr.IdempotencyKey != "" {
			return nil, messages.Errorf(messages.CodeBadRequest, "route and idempotency_key exclude each other: an idempotent call's ID comes from its key; use notify for its result")
		}
	}
	if sr.CallID != "" {
		if sr.Route == "" {
			return nil, messages.Errorf(messages.CodeBadRequest, "call_id needs a route: a caller names the ID only of a call on its route")
		}
		if err := messages.ValidateRoutedCallID(sr.Route, sr.CallID); err != nil {
			return nil, err
		}
	}
	if sr.Quiet {
		if sr.CallID == "" {
			return nil, messages.Errorf(messages.CodeBadRequest, "quiet needs call_id: without a reply the caller learns the call's ID from nowhere else")
		}
		if sr.Wait {
			return nil, messages.Errorf(messages.CodeBadRequest, "quiet and wait exclude each other")
		}
	}
	if sr.TimeoutMS < 0 || sr.WaitMS < 0 {
		return nil, messages.Errorf(messages.CodeBadRequest, "timeout_ms and wait_ms must not be negative")
	}
	if len(sr.Arguments) > c.cfg.MaxArgumentsBytes {
		return nil, messages.Errorf(messages.CodePayloadTooLarge, "arguments are %d bytes; at most %d", len(sr.Arguments), c.cfg.MaxArgumentsBytes)
	}
	tool, ok, err := c.catalog.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
	}
	if off, reason := c.catalog.Disabled(name); off {
		return nil, messages.Errorf(messages.CodeToolDisabled, "tool %s is disabled: %s", name, reason)
	}
	if c.cfg.FailWhenUnavailable && !c.catalog.Available(name.Namespace) {
		return nil, messages.Errorf(messages.CodeToolUnavailable, "no live worker serves namespace %s", name.Namespace)
	}
	admission := c.resolver.Admission(sr.Agent, c.exposureCatalog())
	if sr.Agent != "" && admission.Excluded(name.String()) {
		return nil, messages.Errorf(messages.CodeNotAdmitted, "the exposure rules of agent %q exclude %s", sr.Agent, name)
	}
	// A schema shown with think augmentation makes the model send a
	// thought; it is not an argument of the tool.
	stripped, err := c.stripThought(tool, sr.Arguments)
	if err != nil {
		return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s: %v", name, err)
	}
	decoded, err := policy.DecodeArguments(stripped)
	if err != nil {
		return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not JSON: %v", name, err)
	}
	inst := decoded
	if string(bytes.TrimSpace(stripped)) == "null" {
		inst = nil // the digest counts null as {}; the schema sees what was sent
	}
	if err := c.validateArguments(tool, inst); err != nil {
		return nil, err
	}
	args, err := compactJSON(stripped)
	if err != nil {
		return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments are not JSON: %v", err)
	}
	digest := policy.DigestOf(decoded)

	now := time.Now().UTC()
	timeout := c.cfg.DefaultTimeout
	if sr.TimeoutMS > 0 {
		timeout = time.Duration(sr.TimeoutMS) * time.Millisecond
	}
	if t := tool.Definition.Metadata.TimeoutMS; t > 0 && time.Duration(t)*time.Millisecond < timeout {
		timeout = time.Duration(t) * time.Millisecond
	}
	call := &messages.CallRequest{
		Tool:            name.String(),
		Namespace:       name.Namespace,
		Method:          name.Method,
		Arguments:       args,
		Agent:           sr.Agent,
		Turn:            sr.Turn,
		ArgumentsDigest: digest,
		QueuedAt:        now,
		Deadline:        now.Add(timeout),
		Notify:          sr.Notify,
	}
	if sr.IdempotencyKey != "" {
		call.CallID = messages.IdempotentCallID(sr.Agent, sr.IdempotencyKey)
		if reply, err := c.existingCall(ctx, call, sr); reply != nil || err != nil {
			return reply, err
		}
	} else if sr.CallID != "" {
		call.CallID = sr.CallID
	} else if sr.Route != "" {
		call.CallID = messages.RoutedCallID(sr.Route, nuid.Next())
	} else {
		call.CallID = nuid.Next()
	}

	v, err := c.authorize(ctx, call, tool, admission)
	if err != nil {
		return nil, err
	}
	if v.approval != nil {
		if err := c.holdForApproval(ctx, call, v.approval); err != nil {
			return nil, err
		}
		c.audit(ctx, v.audit, call, &tool.Definition, v.decision, "")
		return &messages.SubmitReply{CallID: call.CallID, State: messages.StateAwaitingApproval, Approval: v.approval}, nil
	}
	if v.audit != "" {
		c.audit(ctx, v.audit, call, &tool.Definition, v.decision, "")
	}

	if then != nil && !sr.Wait {
		if err := c.queueCall(ctx, call, func(duplicate bool, err error) {
			if err != nil {
				then(nil, err)
				return
			}
			then(&messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued, Duplicate: duplicate}, nil)
		}); err != nil {
			return nil, err
		}
		return nil, errQueueing
	}

	var writes <-chan *nats.Msg
	if sr.Wait {
		// Subscribed before the call is published, so the result cannot slip past.
		var stop func()
		if writes, stop, err = c.resultWrites(call.CallID); err != nil {
			return nil, err
		}
		defer stop()
	}

	duplicate, err := c.publishCall(ctx, call)
	if err != nil {
		return nil, err
	}
	reply := &messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued, Duplicate: duplicate}
	if sr.Wait {
		return c.awaitResult(ctx, reply, writes, waitDuration(sr, call.Deadline, c.cfg.MaxWait))
	}
	return reply, nil
}

// publishCall records the call in the ledger and queues it, and files it
// under its turn (see queueCall). It reports whether JetStream already had
// a call with this ID.
func (c *Coordinator) publishCall(ctx context.Context, call *messages.CallRequest) (bool, error) {
	type outcome struct {
		duplicate bool
		err       error
	}
	done := make(chan outcome, 1)
	if err := c.queueCall(ctx, call, func(duplicate bool, err error) { done <- outcome{duplicate, err} }); err != nil {
		return false, err
	}
	select {
	case o := <-done:
		return o.duplicate, o.err
	case <-ctx.Done():
		return false, messages.Errorf(messages.CodeUnavailable, "queue call %s: %v", call.CallID, ctx.Err())
	}
}

// ackTimeout bounds the wait for JetStream to acknowledge a write.
const ackTimeout = 10 * time.Second

// queueCall records the call in the ledger and queues it, both writes in
// flight at once, and files it under its turn. Nothing waits here: then
// gets the outcome (whether JetStream already had a call with this ID)
// once JetStream has answered both writes, from the ledger's goroutine or
// one of its own. If queueCall returns an error, then is not called.
func (c *Coordinator) queueCall(ctx context.Context, call *messages.CallRequest, then func(duplicate bool, err error)) error {
	subject, err := c.names.CallSubject(call.ToolName())
	if err != nil {
		return err
	}
	msg, err := newMsg(subject, call)
	if err != nil {
		return fmt.Errorf("encode call: %w", err)
	}
	msg.Header.Set(messages.HeaderMsgID, call.CallID)
	tracing.Inject(ctx, msg.Header)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.call_id", call.CallID))
	}
	queuedMsg, err := c.ledger.EventMsg(&messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call})
	if err != nil {
		return err
	}
	q := &queueing{c: c, call: call, then: then}
	q.parts.Store(2)
	if call.Turn != "" {
		q.parts.Add(1)
	}
	// Sent in this order on one connection, the queued event reaches the
	// events stream before a worker can see the call, so it comes before
	// the call's other events.
	if err := c.ledger.PublishThen(queuedMsg, ackTimeout, q.recorded); err != nil {
		return messages.Errorf(messages.CodeUnavailable, "record call: %v", err)
	}
	if err := c.ledger.PublishThen(msg, ackTimeout, q.queued); err != nil {
		q.queued(0, false, err)
	}
	if call.Turn != "" {
		go func() {
			q.turnErr = c.fileUnderTurn(context.WithoutCancel(ctx), call)
			q.partDone()
		}()
	}
	return nil
}

// queueing collects the outcomes of queueCall's writes.
type queueing struct {
	c     *Coordinator
	call  *messages.CallRequest
	then  func(duplicate bool, err error)
	parts atomic.Int32

	recordErr, queueErr, turnErr error
	duplicate                    bool
}

func (q *queueing) recorded(_ uint64, _ bool, err error) {
	q.recordErr = err
	q.partDone()
}

func (q *queueing) queued(_ uint64, duplicate bool, err error) {
	q.duplicate, q.queueErr = duplicate, err
	q.partDone()
}

// partDone ends one part; the last one reports.
func (q *queueing) partDone() {
	if q.parts.Add(-1) != 0 {
		return
	}
	c, call := q.c, q.call
	if q.turnErr != nil {
		c.log.Warn("call not filed under its turn", "call", call.CallID, "turn", call.Turn, "error", q.turnErr)
	}
	if q.queueErr != nil {
		// Off the ledger's goroutine: the failed result is a write to wait for.
		go func() {
			if q.recordErr == nil {
				// The ledger shows the call; it must not wait forever for a worker.
				res := endResult(call, messages.StateFailed, messages.ResultWorkerError, "the call could not be queued: "+q.queueErr.Error())
				ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
				defer cancel()
				if _, err := c.ledger.Commit(ctx, &res, call.Notify); err != nil {
					c.log.Error("call recorded but neither queued nor failed", "call", call.CallID, "error", err)
				}
			}
			q.then(false, messages.Errorf(messages.CodeUnavailable, "queue call: %v", q.queueErr))
		}()
		return
	}
	if q.recordErr != nil {
		c.log.Warn("call queued without its queued event", "call", call.CallID, "error", q.recordErr)
	}
	q.then(q.duplicate, nil)
}

// fileUnderTurn records that the call belongs to its turn.
func (c *Coordinator) fileUnderTurn(ctx context.Context, call *messages.CallRequest) error {
	if call.Turn == "" {
		return nil
	}
	key, err := messages.TurnCallKey(call.Turn, call.CallID)
	if err != nil {
		return err
	}
	rec, _ := json.Marshal(messages.TurnCallRecord{CallID: call.CallID, Tool: call.Tool, QueuedAt: call.QueuedAt})
	_, err = c.turns.Put(ctx, key, rec)
	return err
}

// existingCall answers a submit whose idempotency key names a call that
// already exists: the same call, or a conflict if the key was reused for
// another tool or other arguments.
func (c *Coordinator) existingCall(ctx context.Context, call *messages.CallRequest, sr *messages.SubmitRequest) (*messages.SubmitReply, error) {
	queued, err := c.ledger.Last(ctx, call.CallID, messages.EventQueued)
	if err != nil {
		return nil, err
	}
	if queued == nil || queued.Request == nil {
		return nil, nil
	}
	prev := queued.Request
	snap, err := c.ledger.Snapshot(ctx, call.CallID)
	if err != nil {
		return nil, err
	}
	if prev.Tool != call.Tool || prev.ArgumentsDigest != call.ArgumentsDigest {
		return nil, messages.Errorf(messages.CodeIdempotencyConflict,
			"idempotency key %q was used for call %s of %s with other arguments", sr.IdempotencyKey, call.CallID, prev.Tool)
	}
	reply := &messages.SubmitReply{CallID: call.CallID, State: snap.State(), Duplicate: true}
	if snap.Approval != nil && reply.State == messages.StateAwaitingApproval {
		reply.Approval = snap.Approval.Approval
		return reply, nil
	}
	if snap.Result != nil {
		reply.Result = snap.Result.Result
		return reply, nil
	}
	if !sr.Wait {
		return reply, nil
	}
	writes, stop, err := c.resultWrites(call.CallID)
	if err != nil {
		return nil, err
	}
	defer stop()
	return c.awaitResult(ctx, reply, writes, waitDuration(sr, prev.Deadline, c.cfg.MaxWait))
}

// resultWrites subscribes to the writes of a call's result.
func (c *Coordinator) resultWrites(callID string) (<-chan *nats.Msg, func(), error) {
	subject, err := c.names.EventSubject(callID, messages.EventResult)
	if err != nil {
		return nil, nil, err
	}
	writes := make(chan *nats.Msg, 4)
	sub, err := c.nc.ChanSubscribe(subject, writes)
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to result: %w", err)
	}
	return writes, func() { _ = sub.Unsubscribe() }, nil
}

func waitDuration(sr *messages.SubmitRequest, deadline time.Time, max time.Duration) time.Duration {
	d := time.Until(deadline) + time.Second
	if sr.WaitMS > 0 {
		d = min(d, time.Duration(sr.WaitMS)*time.Millisecond)
	}
	return min(d, max)
}

// awaitResult waits for the result to be published. If it does not come in
// time the reply carries the call's current state instead.
func (c *Coordinator) awaitResult(ctx context.Context, reply *messages.SubmitReply, writes <-chan *nats.Msg, wait time.Duration) (*messages.SubmitReply, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if res, err := c.ledger.WaitForWrite(wctx, reply.CallID, writes); err == nil {
		reply.State, reply.Result = res.Status, res
		return reply, nil
	}
	if snap, err := c.ledger.Snapshot(ctx, reply.CallID); err == nil {
		reply.State = snap.State()
		if snap.Result != nil {
			reply.Result = snap.Result.Result
		}
	}
	return reply, nil
}

// compactJSON returns the arguments without insignificant whitespace; an
// absent value is the empty object.
func compactJSON(v messages.JSON) (messages.JSON, error) {
	if len(v) == 0 {
		return messages.JSON(`{}`), nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
