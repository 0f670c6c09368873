package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// delivery is one delivered call, from its message to its end: what the
// steps of running it share, and the ways it ends. It ends once, through
// one of its methods: with a result committed (finish, or finishAsync for
// the result of a tool that returned), handed back for another attempt
// (handBack), or acknowledged without a result of its own (acknowledge).
type delivery struct {
	w    *Worker
	ns   *namespace
	msg  jetstream.Msg
	slot *slot
	// slotEnd is how the slot is released when the delivery returns,
	// unless the result's write took the slot over (handedOn).
	slotEnd  slotReason
	handedOn bool

	// Read from the message (read).
	attempt int
	// stored is when the server stored the call's queued event.
	stored time.Time
	// bucket is the call's events bucket: its turn's, which the queued
	// event's subject names.
	bucket     string
	req        messages.CallRequest
	log        *callLog
	received   time.Time
	tool       *Tool
	atMostOnce bool
	// base holds the fields of the call's result that every outcome shares.
	base messages.CallResult

	// Set once the tool may run (begin).
	ctx    context.Context
	span   trace.Span
	call   *Call
	flight *inflight
}

// execute runs one delivered call, in the slot the poller took for it, to
// its end: a committed result and an acknowledged message, or a message
// handed back for another attempt. The slot is released once, by whichever
// path ends the call: here, by the commit of the result (see finishThen),
// by a tool that outlived its call returning, or by Stop.
func (w *Worker) execute(ns *namespace, msg jetstream.Msg, s *slot) {
	d := &delivery{w: w, ns: ns, msg: msg, slot: s, slotEnd: slotSettled}
	defer d.releaseSlot()
	if !d.read() || !d.admit() {
		d.slotEnd = slotRefused
		return
	}
	defer d.begin()()
	if !d.checkRecord() || !d.claimStart() {
		d.slotEnd = slotRefused
		return
	}
	d.run()
}

// releaseSlot releases the slot as the delivery returns, once the call is
// no longer tracked, unless the result's write took it over.
func (d *delivery) releaseSlot() {
	if !d.handedOn {
		d.slot.Release(d.slotEnd)
	}
}

// read takes the call's request from its message. It is false, the
// message settled, when there is none to run: a message without
// metadata, the record of a call that waits for an approval, or one that
// cannot be read.
func (d *delivery) read() bool {
	w := d.w
	meta, err := d.msg.Metadata()
	if err != nil {
		w.log.Error("call message without metadata", "error", err)
		acked(w.log, "terminated", d.msg.Term())
		return false
	}
	d.attempt = int(meta.NumDelivered)
	d.stored = meta.Timestamp
	d.bucket = w.names.Events().Bucket(d.msg.Subject())
	if d.msg.Headers().Get(messages.HeaderAwaiting) != "" {
		// The record of a call that waits for an approval: once approved,
		// it is queued again.
		acked(w.log, "acknowledged", d.msg.Ack())
		return false
	}
	// The message is the call's queued event, which carries its request.
	var queued messages.CallEvent
	if _, err := messages.Decode(d.msg.Headers(), d.msg.Data(), &queued); err != nil || queued.Request == nil || queued.Request.CallID == "" {
		if err == nil {
			err = errors.New("the queued event carries no call request")
		}
		w.results.rejectUnreadable(d.msg, d.bucket, d.ns.Name, d.attempt, err)
		return false
	}
	d.req = *queued.Request
	d.log = &callLog{log: w.log, call: d.req.CallID, tool: d.req.Tool, attempt: d.attempt}
	d.received = time.Now().UTC()
	d.base = messages.CallResult{
		CallID:   d.req.CallID,
		Tool:     d.req.Tool,
		Attempt:  d.attempt,
		Worker:   w.cfg.ID,
		QueuedAt: d.req.QueuedAt,
	}
	w.mu.Lock()
	d.tool = d.ns.tools[d.req.Method]
	w.mu.Unlock()
	d.atMostOnce = d.tool != nil && d.tool.Definition.Delivery == messages.DeliveryAtMostOnce
	return true
}

// admit tells whether the call may run on this delivery: its attempts
// have not run out, this worker serves its tool and its deadline has not
// passed. When not, the delivery has ended.
func (d *delivery) admit() bool {
	if d.attempt > d.ns.MaxAttempts {
		if started, lastLog := d.w.startedBefore(d.log, d.bucket, d.ns.Name, d.req.CallID); started {
			// This extra delivery only records the failure: the attempts were the ones before it.
			d.base.Attempt = d.attempt - 1
			res := failure(d.base, messages.StateFailed, messages.ResultAttempts, messages.ExhaustedMessage(d.attempt-1, lastLog))
			if d.atMostOnce {
				res = outcomeUnknown(d.base, nil)
			}
			d.finish(res)
			return false
		}
	}
	if d.tool == nil {
		// Another worker of the namespace may serve the tool (a rolling
		// deploy); after MaxAttempts the call fails with a clear reason.
		d.log.Warn("tool not served by this worker; handing the call back")
		d.handBack(retryDelay)
		return false
	}
	if !d.req.Deadline.IsZero() && !d.received.Before(d.req.Deadline) {
		d.finish(failure(d.base, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed before a worker could start it"))
		return false
	}
	return true
}

// begin starts what lasts while the tool may run: the delivery's spans,
// the call's context, which its deadline or a cancellation ends, and its
// entry among the calls in flight, whose lease the worker renews. The
// function it returns ends them.
func (d *delivery) begin() (end func()) {
	spanCtx, span := d.w.startSpans(d.msg, d.ns.Name, &d.req, d.attempt)
	ctx, cancel := context.WithCancelCause(spanCtx)
	stopDeadline := func() {}
	if !d.req.Deadline.IsZero() {
		ctx, stopDeadline = context.WithDeadlineCause(ctx, d.req.Deadline, ErrDeadline)
	}
	d.ctx, d.span = ctx, span
	d.call = &Call{ID: d.req.CallID, Tool: d.req.Tool, Agent: d.req.Agent, Turn: d.req.Turn, Arguments: d.req.Arguments, Attempt: d.attempt, Deadline: d.req.Deadline}
	d.flight = &inflight{call: d.call, ns: d.ns, bucket: d.bucket, msg: d.msg, cancel: cancel, started: d.received, log: d.log}
	if d.atMostOnce {
		// The start is written before the tool runs (see startOnce), never
		// by the sweep of recordStart.
		d.flight.startRecorded.Store(true)
		d.flight.startOnce.Do(func() {})
	}
	// Registered before the started event is stored, so that a cancel
	// signal sent as soon as the call shows as running finds it.
	d.w.leases.track(d.flight)
	d.base.StartedAt = d.received
	return func() {
		d.w.leases.untrack(d.flight)
		stopDeadline()
		cancel(nil)
		span.End()
	}
}

// checkRecord tells, before the call's tool runs, whether it is to run,
// and is false, the delivery ended, when not. A first delivery's call is
// not run if the namespace's cancel notices hold it (see cancelNotices):
// its cancelled result is written, first write winning. If the notices
// are complete for the call, that is all; otherwise the call's record is
// read: a call cancelled while it was queued has its cancelled result
// (the coordinator's first write wins) and stays in the namespace's
// queue, and an earlier attempt may have committed the result and
// stopped before acknowledging the message. A redelivered call's read
// also says whether a cancellation holds and, for an at-most-once tool,
// whether an attempt started it.
func (d *delivery) checkRecord() bool {
	var snap *ledger.Snapshot
	var err error
	unread, ran := "whether the call already has a result could not be read; handing it back rather than running the tool",
		"the call has its result already (cancelled or ended while queued); acknowledged without running the tool"
	if d.attempt > 1 {
		snap, err = d.w.readBeforeRerun(d.ctx, d.log, d.bucket, d.ns.Name, d.req.CallID, d.atMostOnce)
		// The ledger unreadable for readGiveUp: the call goes back without
		// its tool having run again; a result means running it again would
		// only repeat its effects.
		unread = "the call's earlier attempts could not be read; handing it back rather than running the tool again"
		ran = "the call already has its result; acknowledged without running the tool again"
	} else {
		if info, ok := d.ns.notices.heard(d.req.CallID); ok {
			d.cancelledBeforeStart(info)
			return false
		}
		if d.noticesComplete() {
			return true
		}
		snap, err = d.w.readBeforeRun(d.ctx, d.log, d.bucket, d.ns.Name, d.req.CallID)
	}
	switch {
	case err != nil && d.ctx.Err() != nil:
		d.interrupted(false)
		return false
	case errors.Is(err, errStopping):
		d.handBack(0)
		return false
	case err != nil:
		d.log.Warn(unread, "error", err)
		d.handBack(retryDelay)
		return false
	case snap.Result != nil:
		d.log.Info(ran)
		d.acknowledge()
		return false
	}
	if d.atMostOnce && snap.Started != nil && d.attempt > 1 {
		d.log.Warn("an earlier attempt of this at-most-once call started its tool and did not report; it is not run again",
			"started_attempt", snap.Started.Attempt, "started_worker", snap.Started.Worker)
		d.finish(outcomeUnknown(d.base, &snap.Started.CallEvent))
		return false
	}
	// A cancel stored while the call was held by a worker that did not
	// start it (a delivery lost with its connection), or while an earlier
	// attempt ran: the call is not run again. (A first delivery's read
	// holds no cancel event: its notice says so.)
	if snap.Cancel != nil {
		d.cancelledUnrun(snap.Cancel.Cancel, "the call was cancelled before this attempt", "it is not run again")
		return false
	}
	if d.attempt <= 1 {
		return true
	}
	if !d.atMostOnce {
		// A rerun's start is recorded before its tool runs, not after
		// StartDelay, so that calls.get stops showing the earlier
		// attempt (its number and its progress) as the current one at
		// once. The write is not waited for, and reruns are rare: the
		// first attempt keeps its hot path without the write.
		d.w.leases.recordStart(d.flight)
	}
	return true
}

// noticesComplete tells whether the namespace's cancel notices hold
// every notice of the call there can be: its coordinator sends notices
// first (its queued event's version), and the worker heard every notice
// since before the call was queued.
func (d *delivery) noticesComplete() bool {
	return messages.SendsNotices(d.msg.Headers().Get(messages.HeaderVersion)) && d.ns.notices.trusted(d.stored)
}

// cancelledBeforeStart ends a delivery whose call was cancelled before
// its tool ran: its cancelled result is committed, unless the coordinator
// committed it first.
func (d *delivery) cancelledBeforeStart(info *messages.CancelInfo) {
	d.cancelledUnrun(info, "the call was cancelled before it started", "it is not run")
}

// cancelledUnrun ends a delivery whose tool does not run because its call
// was cancelled (what says when; outcome what the worker does), with the
// call's cancelled result.
func (d *delivery) cancelledUnrun(info *messages.CancelInfo, what, outcome string) {
	reason := ""
	if info != nil {
		reason = info.Reason
	}
	if reason == "" {
		reason = "cancelled by request"
	}
	d.log.Info(what + "; " + outcome)
	res := failure(d.base, messages.StateCancelled, messages.ResultCancelled, what+": "+reason)
	res.Error.Message = reason
	res.StartedAt = time.Time{}
	d.finish(res)
}

// claimStart records, before an at-most-once tool runs, that this
// attempt starts it (see startOnce), and is false, the delivery ended,
// when the tool must not run. Other tools need no claim.
func (d *delivery) claimStart() bool {
	if !d.atMostOnce {
		return true
	}
	other, err := d.w.startOnce(d.ctx, d.flight)
	switch {
	case other != nil:
		d.log.Warn("another attempt of this at-most-once call started its tool; it is not run again",
			"started_attempt", other.Attempt, "started_worker", other.Worker)
		d.finish(outcomeUnknown(d.base, other))
		return false
	case err != nil && d.ctx.Err() != nil:
		// The tool has not run: a stopping worker hands the call back.
		d.interrupted(false)
		return false
	case err != nil:
		d.log.Warn("the start of this at-most-once call could not be recorded; handing it back without running the tool", "error", err)
		d.handBack(retryDelay)
		return false
	}
	return true
}

// run runs the tool, on this goroutine, and ends the delivery with its
// outcome. The call's context ending decides the outcome at once, from
// the context's own goroutine, even if the tool ignores it; whichever of
// the two comes first decides.
func (d *delivery) run() {
	scope, reporter := d.scope()
	var decided atomic.Bool
	run := &toolRun{}
	stopWatching := context.AfterFunc(d.ctx, func() {
		run.deciding.Add(1)
		defer run.deciding.Done()
		if !decided.CompareAndSwap(false, true) {
			return
		}
		reporter.close()
		d.interrupted(true)
		d.w.leases.untrack(d.flight)
		d.w.stragglers.straggling(d.req.CallID, run, d.slot, d.log)
	})
	out := runTool(withScope(d.ctx, scope), d.tool, d.call)
	stopWatching()
	if !decided.CompareAndSwap(false, true) {
		// The context decided the outcome; the tool has now returned. The
		// slot was kept until then, unless Stop gave up on the tool.
		run.deciding.Wait()
		d.w.stragglers.straggled(d.req.CallID, run)
		d.slotEnd = slotStraggled
		return
	}
	reporter.close()
	d.base.FinishedAt = time.Now().UTC()
	d.returned(out, scope)
}

// scope is what the tool reports through while it runs: its progress and
// its log, stored as the call's events. Either records the call's start
// first.
func (d *delivery) scope() (*callScope, *progressReporter) {
	event := func(ev *messages.CallEvent, what string) {
		d.w.leases.recordStart(d.flight)
		ev.CallID, ev.Time, ev.Attempt, ev.Worker = d.req.CallID, time.Now().UTC(), d.attempt, d.w.cfg.ID
		if err := d.w.ledger.AppendAsync(d.bucket, d.ns.Name, ev); err != nil {
			d.log.Warn(what+" event not stored", "error", err)
		}
	}
	reporter := &progressReporter{interval: d.w.cfg.ProgressInterval, publish: func(p messages.Progress) {
		event(&messages.CallEvent{Kind: messages.EventProgress, Progress: &p}, "progress")
	}}
	scope := &callScope{call: d.call, progress: reporter, log: func(level, message string) {
		event(&messages.CallEvent{Kind: messages.EventLog, Log: &messages.LogEntry{Level: level, Message: message}}, "log")
	}}
	return scope, reporter
}

// returned ends the delivery with the outcome of a tool that returned
// before the call's context ended it.
func (d *delivery) returned(out outcome, scope *callScope) {
	var perr *panicError
	switch {
	case out.err == nil:
		res := out.res
		if res == nil {
			res = &Result{}
		}
		d.base.Status = messages.StateCompleted
		d.base.IsError = res.IsError
		d.base.Content = res.Content
		d.base.StructuredContent = res.StructuredContent
		if res.IsError {
			d.base.Error = &messages.ResultError{Code: messages.ResultToolError, Message: firstText(res.Content)}
		}
		spanOutcome(d.span, &d.base)
		d.finishAsync(d.w.results.fit(d.ns.Name, d.base, &d.tool.Definition, d.log))
	case d.ctx.Err() != nil:
		d.interrupted(true)
	case errors.As(out.err, &perr):
		d.log.Error("tool panicked", "panic", fmt.Sprint(perr.value), "stack", string(perr.stack))
		res := failure(d.base, messages.StateFailed, messages.ResultPanic, fmt.Sprintf("the tool panicked: %v", perr.value))
		spanOutcome(d.span, &res)
		d.finish(res)
	case errors.Is(out.err, ErrRetry) && d.atMostOnce:
		cause := strings.TrimPrefix(out.err.Error(), ErrRetry.Error()+": ")
		d.log.Warn("an at-most-once tool asked for another attempt; refused, the call fails", "error", out.err)
		res := failure(d.base, messages.StateFailed, messages.ResultOutcomeUnknown,
			"the tool may or may not have run: it asked for another attempt, which an at-most-once tool does not get: "+cause)
		spanOutcome(d.span, &res)
		d.finish(res)
	case errors.Is(out.err, ErrRetry):
		d.log.Info("tool asked for another attempt", "error", out.err)
		spanFailed(d.span, messages.LogRetry, out.err.Error())
		// Stored, so that the call's final failure can say why, should its attempts run out.
		scope.log(messages.LogRetry, strings.TrimPrefix(out.err.Error(), ErrRetry.Error()+": "))
		d.w.leases.recordStart(d.flight) // the tool ran: this attempt counts (see startedBefore)
		d.handBack(retryDelay)
	default:
		d.base.Status = messages.StateCompleted
		d.base.IsError = true
		d.base.Content = []messages.ContentBlock{messages.TextBlock(out.err.Error())}
		d.base.Error = &messages.ResultError{Code: messages.ResultToolError, Message: out.err.Error()}
		spanOutcome(d.span, &d.base)
		d.finishAsync(d.base)
	}
}

// interrupted ends a delivery whose context ended: with the result that
// says why, or handed back when the worker is stopping. ran tells that
// the tool ran (or still runs): the attempt then counts, and an
// at-most-once call, which another delivery could only find started,
// fails with its outcome unknown.
func (d *delivery) interrupted(ran bool) {
	res, retry := interrupted(d.base, d.ctx)
	if ran {
		spanOutcome(d.span, &res)
	}
	switch {
	case retry && ran && d.atMostOnce:
		d.finish(outcomeUnknown(d.base, nil))
	case retry && ran:
		d.w.leases.recordStart(d.flight) // the tool ran: this attempt counts (see startedBefore)
		d.handBack(0)
	case retry:
		d.handBack(0)
	default:
		d.finish(res)
	}
}

// finish commits res and settles the message (results.finish).
func (d *delivery) finish(res messages.CallResult) {
	d.w.results.finish(d.msg, d.log, d.bucket, d.ns.Name, d.req.Notify, res)
}

// finishAsync commits res without waiting for the stream: the result's
// write takes the slot over and releases it once answered
// (results.finishThen).
func (d *delivery) finishAsync(res messages.CallResult) {
	d.handedOn = true
	d.w.results.finishThen(d.msg, d.log, d.bucket, d.ns.Name, d.req.Notify, res, d.slot)
}

// handBack returns the message for another delivery, after delay when
// it is not zero.
func (d *delivery) handBack(delay time.Duration) {
	if delay == 0 {
		acked(d.log, "handed back", d.msg.Nak())
		return
	}
	acked(d.log, "handed back", d.msg.NakWithDelay(delay))
}

// acknowledge settles the message of a call that has its result already.
func (d *delivery) acknowledge() {
	acked(d.log, "acknowledged", d.msg.Ack())
}
