package coordinator

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// callQueue puts calls in the calls stream for workers, with their queued
// event in the ledger and their place in their turn, and waits for their
// results.
type callQueue struct {
	names  messages.Names
	writes callWriter
	turns  *turns
	// reads is the ledger the results are awaited on; nil in tests of sending.
	reads *ledger.Ledger
	nc    *nats.Conn
	// maxWait bounds how long a submit with wait holds its reply.
	maxWait time.Duration
	log     *slog.Logger
}

// callWriter is what sending a call writes with: the ledger's events and
// JetStream's acknowledged publishes.
type callWriter interface {
	EventMsg(ev *messages.CallEvent) (*nats.Msg, error)
	PublishThen(msg *nats.Msg, timeout time.Duration, then func(seq uint64, duplicate bool, err error)) error
	Commit(ctx context.Context, res *messages.CallResult, notify string) (bool, error)
}

// ackTimeout bounds the wait for JetStream to acknowledge a write.
const ackTimeout = 10 * time.Second

// sendWait is send, waiting for the outcome: whether JetStream already had
// a call with this ID.
func (q *callQueue) sendWait(ctx context.Context, call *messages.CallRequest) (bool, error) {
	type outcome struct {
		duplicate bool
		err       error
	}
	done := make(chan outcome, 1)
	if err := q.send(ctx, call, func(duplicate bool, err error) { done <- outcome{duplicate, err} }); err != nil {
		return false, err
	}
	select {
	case o := <-done:
		return o.duplicate, o.err
	case <-ctx.Done():
		return false, messages.Errorf(messages.CodeUnavailable, "queue call %s: %v", call.CallID, ctx.Err())
	}
}

// send records the call in the ledger and queues it, both writes in
// flight at once, and files it under its turn. Nothing waits here: then
// gets the outcome (whether JetStream already had a call with this ID)
// once JetStream has answered both writes, from the ledger's goroutine or
// one of its own. If send returns an error, then is not called.
func (q *callQueue) send(ctx context.Context, call *messages.CallRequest, then func(duplicate bool, err error)) error {
	subject, err := q.names.CallSubject(call.ToolName())
	if err != nil {
		return err
	}
	msg, err := newMsg(subject, call)
	if err != nil {
		return messages.Errorf(messages.CodeBadRequest, "encode call: %v", err)
	}
	msg.Header.Set(messages.HeaderMsgID, call.CallID)
	tracing.Inject(ctx, msg.Header)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.call_id", call.CallID))
	}
	queuedMsg, err := q.writes.EventMsg(&messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call})
	if err != nil {
		return messages.Errorf(messages.CodeBadRequest, "encode call: %v", err)
	}
	s := &sending{q: q, call: call, then: then}
	s.parts.Store(2)
	if call.Turn != "" {
		s.parts.Add(1)
	}
	// Sent in this order on one connection, the queued event reaches the
	// events stream before a worker can see the call, so it comes before
	// the call's other events.
	if err := q.writes.PublishThen(queuedMsg, ackTimeout, s.recorded); err != nil {
		return messages.Errorf(messages.CodeUnavailable, "record call: %v", err)
	}
	if err := q.writes.PublishThen(msg, ackTimeout, s.queued); err != nil {
		s.queued(0, false, err)
	}
	if call.Turn != "" {
		go func() {
			s.turnErr = q.turns.fileCall(context.WithoutCancel(ctx), call)
			s.partDone()
		}()
	}
	return nil
}

// sending collects the outcomes of send's writes.
type sending struct {
	q     *callQueue
	call  *messages.CallRequest
	then  func(duplicate bool, err error)
	parts atomic.Int32

	recordErr, queueErr, turnErr error
	duplicate                    bool
}

func (s *sending) recorded(_ uint64, _ bool, err error) {
	s.recordErr = err
	s.partDone()
}

func (s *sending) queued(_ uint64, duplicate bool, err error) {
	s.duplicate, s.queueErr = duplicate, err
	s.partDone()
}

// partDone ends one part; the last one reports.
func (s *sending) partDone() {
	if s.parts.Add(-1) != 0 {
		return
	}
	q, call := s.q, s.call
	if s.turnErr != nil {
		q.log.Warn("call not filed under its turn", "call", call.CallID, "turn", call.Turn, "error", s.turnErr)
	}
	if s.queueErr != nil {
		// Off the ledger's goroutine: the failed result is a write to wait for.
		go func() {
			if s.recordErr == nil {
				// The ledger shows the call; it must not wait forever for a worker.
				res := endResult(call, messages.StateFailed, messages.ResultWorkerError, "the call could not be queued: "+s.queueErr.Error())
				ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
				defer cancel()
				if _, err := q.writes.Commit(ctx, &res, call.Notify); err != nil {
					q.log.Error("call recorded but neither queued nor failed", "call", call.CallID, "error", err)
				}
			}
			s.then(false, messages.Errorf(messages.CodeUnavailable, "queue call: %v", s.queueErr))
		}()
		return
	}
	if s.recordErr != nil {
		q.log.Warn("call queued without its queued event", "call", call.CallID, "error", s.recordErr)
	}
	s.then(s.duplicate, nil)
}

// existing answers a submit whose idempotency key names a call that
// already exists: the same call, or a conflict if the key was reused for
// another tool or other arguments. With no such call it returns no reply.
func (q *callQueue) existing(ctx context.Context, call *messages.CallRequest, sr *messages.SubmitRequest) (*messages.SubmitReply, error) {
	queued, err := q.reads.Last(ctx, call.CallID, messages.EventQueued)
	if err != nil {
		return nil, unavailable(err, "read call %s", call.CallID)
	}
	if queued == nil || queued.Request == nil {
		return nil, nil
	}
	prev := queued.Request
	snap, err := q.reads.Snapshot(ctx, call.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", call.CallID)
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
	writes, stop, err := q.resultWrites(call.CallID)
	if err != nil {
		return nil, err
	}
	defer stop()
	return q.awaitResult(ctx, reply, writes, waitDuration(sr, prev.Deadline, q.maxWait))
}

// resultWrites subscribes to the writes of a call's result.
func (q *callQueue) resultWrites(callID string) (<-chan *nats.Msg, func(), error) {
	subject, err := q.names.EventSubject(callID, messages.EventResult)
	if err != nil {
		return nil, nil, err
	}
	writes := make(chan *nats.Msg, 4)
	sub, err := q.nc.ChanSubscribe(subject, writes)
	if err != nil {
		return nil, nil, unavailable(err, "subscribe to result")
	}
	return writes, func() {
		if err := sub.Unsubscribe(); err != nil {
			q.log.Debug("unsubscribe from result", "call", callID, "error", err)
		}
	}, nil
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
func (q *callQueue) awaitResult(ctx context.Context, reply *messages.SubmitReply, writes <-chan *nats.Msg, wait time.Duration) (*messages.SubmitReply, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if res, err := q.reads.WaitForWrite(wctx, reply.CallID, writes); err == nil {
		reply.State, reply.Result = res.Status, res
		return reply, nil
	}
	if snap, err := q.reads.Snapshot(ctx, reply.CallID); err == nil {
		reply.State = snap.State()
		if snap.Result != nil {
			reply.Result = snap.Result.Result
		}
	}
	return reply, nil
}
