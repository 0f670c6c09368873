package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// retryDelay is how long a call handed back with ErrRetry waits before its next delivery.
const retryDelay = time.Second

// callLog logs with a call's attributes, which it adds only when
// something is logged: most calls log nothing.
type callLog struct {
	log     *slog.Logger
	call    string
	tool    string
	attempt int
}

func (l *callLog) with() *slog.Logger {
	return l.log.With("call", l.call, "tool", l.tool, "attempt", l.attempt)
}

func (l *callLog) Info(msg string, args ...any)  { l.with().Info(msg, args...) }
func (l *callLog) Warn(msg string, args ...any)  { l.with().Warn(msg, args...) }
func (l *callLog) Error(msg string, args ...any) { l.with().Error(msg, args...) }

// execute runs one delivered call, in the slot the poller took for it, to
// its end: a committed result and an acknowledged message, or a message
// handed back for another attempt. The slot is released once, by whichever
// path ends the call: here, by the commit of the result (see finishThen),
// by a tool that outlived its call returning, or by Stop.
func (w *Worker) execute(ns *namespace, msg jetstream.Msg, s *slot) {
	// Unless handed on, the slot is released as execute returns, once the
	// call is no longer tracked.
	end, handedOn := slotSettled, false
	defer func() {
		if !handedOn {
			s.Release(end)
		}
	}()
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("call message without metadata", "error", err)
		acked(w.log, "terminated", msg.Term())
		end = slotRefused
		return
	}
	attempt := int(meta.NumDelivered)
	// The call's events go under the bucket of its turn, which the queued
	// event's subject names.
	bucket := w.names.EventBucket(msg.Subject())
	if msg.Headers().Get(messages.HeaderAwaiting) != "" {
		// The record of a call that waits for an approval: once approved,
		// it is queued again.
		acked(w.log, "acknowledged", msg.Ack())
		end = slotRefused
		return
	}
	// The message is the call's queued event, which carries its request.
	var queued messages.CallEvent
	if _, err := messages.Decode(msg.Headers(), msg.Data(), &queued); err != nil || queued.Request == nil || queued.Request.CallID == "" {
		if err == nil {
			err = errors.New("the queued event carries no call request")
		}
		w.rejectUnreadable(msg, bucket, ns.Name, attempt, err)
		end = slotRefused
		return
	}
	req := *queued.Request
	log := &callLog{log: w.log, call: req.CallID, tool: req.Tool, attempt: attempt}
	now := time.Now().UTC()
	base := messages.CallResult{
		CallID:   req.CallID,
		Tool:     req.Tool,
		Attempt:  attempt,
		Worker:   w.cfg.ID,
		QueuedAt: req.QueuedAt,
	}
	w.mu.Lock()
	tool := ns.tools[req.Method]
	w.mu.Unlock()
	atMostOnce := tool != nil && tool.Definition.Delivery == messages.DeliveryAtMostOnce
	if attempt > ns.MaxAttempts {
		if started, lastLog := w.startedBefore(log, bucket, ns.Name, req.CallID); started {
			// This extra delivery only records the failure: the attempts were the ones before it.
			base.Attempt = attempt - 1
			res := failure(base, messages.StateFailed, messages.ResultAttempts, messages.ExhaustedMessage(attempt-1, lastLog))
			if atMostOnce {
				res = outcomeUnknown(base, nil)
			}
			w.finish(msg, log, bucket, ns.Name, req.Notify, res)
			end = slotRefused
			return
		}
	}
	if tool == nil {
		// Another worker of the namespace may serve the tool (a rolling
		// deploy); after MaxAttempts the call fails with a clear reason.
		log.Warn("tool not served by this worker; handing the call back")
		acked(log, "handed back", msg.NakWithDelay(retryDelay))
		end = slotRefused
		return
	}
	if !req.Deadline.IsZero() && !now.Before(req.Deadline) {
		w.finish(msg, log, bucket, ns.Name, req.Notify, failure(base, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed before a worker could start it"))
		end = slotRefused
		return
	}

	spanCtx, span := w.startSpans(msg, ns.Name, &req, attempt)
	defer span.End()
	ctx, cancel := context.WithCancelCause(spanCtx)
	defer cancel(nil)
	if !req.Deadline.IsZero() {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadlineCause(ctx, req.Deadline, ErrDeadline)
		defer stop()
	}
	call := &Call{ID: req.CallID, Tool: req.Tool, Agent: req.Agent, Turn: req.Turn, Arguments: req.Arguments, Attempt: attempt, Deadline: req.Deadline}
	f := &inflight{call: call, ns: ns, bucket: bucket, msg: msg, cancel: cancel, started: now, log: log}
	if atMostOnce {
		// The start is written before the tool runs (see startOnce), never
		// by the sweep of recordStart.
		f.startRecorded.Store(true)
		f.startOnce.Do(func() {})
	}
	// Registered before the started event is stored, so that a cancel
	// signal sent as soon as the call shows as running finds it.
	w.track(f)
	defer w.untrack(f)
	recordStart := func() { w.recordStart(f) }
	base.StartedAt = now
	// A call cancelled while it was queued has its cancelled result (the
	// coordinator's first write wins) and stays in the namespace's queue;
	// an earlier attempt may have committed the result and stopped before
	// acknowledging the message. One read tells, before the tool runs.
	read, unread, ran := w.readBeforeRun, "whether the call already has a result could not be read; handing it back rather than running the tool",
		"the call has its result already (cancelled or ended while queued); acknowledged without running the tool"
	if attempt > 1 {
		read = func(ctx context.Context, log *callLog, bucket, ns, callID string) (*ledger.Snapshot, error) {
			return w.readBeforeRerun(ctx, log, bucket, ns, callID, atMostOnce)
		}
		// The ledger unreadable for readGiveUp: the call goes back without
		// its tool having run again; a result means running it again would
		// only repeat its effects.
		unread = "the call's earlier attempts could not be read; handing it back rather than running the tool again"
		ran = "the call already has its result; acknowledged without running the tool again"
	}
	snap, err := read(ctx, log, bucket, ns.Name, req.CallID)
	switch {
	case err != nil && ctx.Err() != nil:
		res, retry := w.interrupted(base, ctx)
		if retry {
			acked(log, "handed back", msg.Nak())
		} else {
			w.finish(msg, log, bucket, ns.Name, req.Notify, res)
		}
		end = slotRefused
		return
	case errors.Is(err, errStopping):
		acked(log, "handed back", msg.Nak())
		end = slotRefused
		return
	case err != nil:
		log.Warn(unread, "error", err)
		acked(log, "handed back", msg.NakWithDelay(retryDelay))
		end = slotRefused
		return
	case snap.Result != nil:
		log.Info(ran)
		acked(log, "acknowledged", msg.Ack())
		end = slotRefused
		return
	}
	if attempt > 1 {
		if atMostOnce && snap.Started != nil {
			log.Warn("an earlier attempt of this at-most-once call started its tool and did not report; it is not run again",
				"started_attempt", snap.Started.Attempt, "started_worker", snap.Started.Worker)
			w.finish(msg, log, bucket, ns.Name, req.Notify, outcomeUnknown(base, &snap.Started.CallEvent))
			end = slotRefused
			return
		}
		// A cancellation requested while an earlier attempt ran still holds.
		if snap.Cancel != nil {
			w.cancelCall(req.CallID, snap.Cancel.Cancel)
		}
		if !atMostOnce {
			// A rerun's start is recorded before its tool runs, not after
			// StartDelay, so that calls.get stops showing the earlier
			// attempt (its number and its progress) as the current one at
			// once. The write is not waited for, and reruns are rare: the
			// first attempt keeps its hot path without the write.
			w.recordStart(f)
		}
	}
	if atMostOnce {
		other, err := w.startOnce(ctx, f)
		switch {
		case other != nil:
			log.Warn("another attempt of this at-most-once call started its tool; it is not run again",
				"started_attempt", other.Attempt, "started_worker", other.Worker)
			w.finish(msg, log, bucket, ns.Name, req.Notify, outcomeUnknown(base, other))
			end = slotRefused
			return
		case err != nil && ctx.Err() != nil:
			// The tool has not run: a stopping worker hands the call back.
			res, retry := w.interrupted(base, ctx)
			if retry {
				acked(log, "handed back", msg.Nak())
			} else {
				w.finish(msg, log, bucket, ns.Name, req.Notify, res)
			}
			end = slotRefused
			return
		case err != nil:
			log.Warn("the start of this at-most-once call could not be recorded; handing it back without running the tool", "error", err)
			acked(log, "handed back", msg.NakWithDelay(retryDelay))
			end = slotRefused
			return
		}
	}

	reporter := &progressReporter{interval: w.cfg.ProgressInterval, publish: func(p messages.Progress) {
		recordStart()
		if err := w.ledger.AppendAsync(bucket, ns.Name, &messages.CallEvent{CallID: req.CallID, Kind: messages.EventProgress, Time: time.Now().UTC(), Attempt: attempt, Worker: w.cfg.ID, Progress: &p}); err != nil {
			log.Warn("progress event not stored", "error", err)
		}
	}}
	scope := &callScope{call: call, progress: reporter, log: func(level, message string) {
		recordStart()
		if err := w.ledger.AppendAsync(bucket, ns.Name, &messages.CallEvent{CallID: req.CallID, Kind: messages.EventLog, Time: time.Now().UTC(), Attempt: attempt, Worker: w.cfg.ID, Log: &messages.LogEntry{Level: level, Message: message}}); err != nil {
			log.Warn("log event not stored", "error", err)
		}
	}}

	// The tool runs on this goroutine. Its context ending decides the
	// call's outcome at once, from the context's own goroutine, even if
	// the tool ignores it; whichever of the two comes first decides.
	var decided atomic.Bool
	run := &toolRun{}
	stopWatching := context.AfterFunc(ctx, func() {
		run.deciding.Add(1)
		defer run.deciding.Done()
		if !decided.CompareAndSwap(false, true) {
			return
		}
		reporter.close()
		res, retry := w.interrupted(base, ctx)
		spanOutcome(span, &res)
		switch {
		case retry && atMostOnce:
			// Another delivery could only find the start and fail the call.
			w.finish(msg, log, bucket, ns.Name, req.Notify, outcomeUnknown(base, nil))
		case retry:
			recordStart() // the tool ran: this attempt counts (see startedBefore)
			acked(log, "handed back", msg.Nak())
		default:
			w.finish(msg, log, bucket, ns.Name, req.Notify, res)
		}
		w.untrack(f)
		w.straggling(req.CallID, run, s, log)
	})
	out := runTool(withScope(ctx, scope), tool, call)
	stopWatching()
	if !decided.CompareAndSwap(false, true) {
		// The context decided the outcome; the tool has now returned. The
		// slot was kept until then, unless Stop gave up on the tool.
		run.deciding.Wait()
		w.straggled(req.CallID, run)
		end = slotStraggled
		return
	}
	reporter.close()
	base.FinishedAt = time.Now().UTC()
	var perr *panicError
	switch {
	case out.err == nil:
		res := out.res
		if res == nil {
			res = &Result{}
		}
		base.Status = messages.StateCompleted
		base.IsError = res.IsError
		base.Content = res.Content
		base.StructuredContent = res.StructuredContent
		if res.IsError {
			base.Error = &messages.ResultError{Code: messages.ResultToolError, Message: firstText(res.Content)}
		}
		spanOutcome(span, &base)
		handedOn = true
		w.finishThen(msg, log, bucket, ns.Name, req.Notify, w.fit(ns.Name, base, &tool.Definition, log), s)
	case ctx.Err() != nil:
		res, retry := w.interrupted(base, ctx)
		spanOutcome(span, &res)
		switch {
		case retry && atMostOnce:
			w.finish(msg, log, bucket, ns.Name, req.Notify, outcomeUnknown(base, nil))
		case retry:
			recordStart() // the tool ran: this attempt counts (see startedBefore)
			acked(log, "handed back", msg.Nak())
		default:
			w.finish(msg, log, bucket, ns.Name, req.Notify, res)
		}
	case errors.As(out.err, &perr):
		log.Error("tool panicked", "panic", fmt.Sprint(perr.value), "stack", string(perr.stack))
		res := failure(base, messages.StateFailed, messages.ResultPanic, fmt.Sprintf("the tool panicked: %v", perr.value))
		spanOutcome(span, &res)
		w.finish(msg, log, bucket, ns.Name, req.Notify, res)
	case errors.Is(out.err, ErrRetry) && atMostOnce:
		cause := strings.TrimPrefix(out.err.Error(), ErrRetry.Error()+": ")
		log.Warn("an at-most-once tool asked for another attempt; refused, the call fails", "error", out.err)
		res := failure(base, messages.StateFailed, messages.ResultOutcomeUnknown,
			"the tool may or may not have run: it asked for another attempt, which an at-most-once tool does not get: "+cause)
		spanOutcome(span, &res)
		w.finish(msg, log, bucket, ns.Name, req.Notify, res)
	case errors.Is(out.err, ErrRetry):
		log.Info("tool asked for another attempt", "error", out.err)
		spanFailed(span, messages.LogRetry, out.err.Error())
		// Stored, so that the call's final failure can say why, should its attempts run out.
		scope.log(messages.LogRetry, strings.TrimPrefix(out.err.Error(), ErrRetry.Error()+": "))
		recordStart() // the tool ran: this attempt counts (see startedBefore)
		acked(log, "handed back", msg.NakWithDelay(retryDelay))
	default:
		base.Status = messages.StateCompleted
		base.IsError = true
		base.Content = []messages.ContentBlock{messages.TextBlock(out.err.Error())}
		base.Error = &messages.ResultError{Code: messages.ResultToolError, Message: out.err.Error()}
		spanOutcome(span, &base)
		handedOn = true
		w.finishThen(msg, log, bucket, ns.Name, req.Notify, base, s)
	}
}

// spanOutcome marks the delivery's spans, the tool's and the message's,
// with the attempt's result (tracing.Outcome).
func spanOutcome(span trace.Span, res *messages.CallResult) {
	if p, ok := span.(spanPair); ok {
		tracing.Outcome(p.outer, res)
	}
	tracing.Outcome(span, res)
}

// spanFailed marks the delivery's spans as ended in error (tracing.Failed).
func spanFailed(span trace.Span, errorType, description string) {
	if p, ok := span.(spanPair); ok {
		tracing.Failed(p.outer, errorType, description)
	}
	tracing.Failed(span, errorType, description)
}

type outcome struct {
	res *Result
	err error
}

// runTool runs the tool, a panic included in its outcome.
func runTool(ctx context.Context, tool *Tool, call *Call) (out outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = outcome{err: &panicError{value: p, stack: debug.Stack()}}
		}
	}()
	res, err := tool.Handler.Handle(ctx, call)
	return outcome{res, err}
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// readGiveUp bounds how long a worker retries reading a redelivered call's
// record before it hands the call back without running it.
const readGiveUp = time.Minute

// errStopping ends the read of a redelivered call's record when the
// worker stops taking calls.
var errStopping = errors.New("the worker is stopping")

// outcomeUnknown is the failure of an at-most-once call whose tool an
// attempt started and did not report on: started is that attempt's start,
// when this delivery read it, or nil when the attempt is this one or its
// start was not read.
func outcomeUnknown(base messages.CallResult, started *messages.CallEvent) messages.CallResult {
	message := messages.OutcomeUnknownMessage
	if started != nil {
		base.Attempt = started.Attempt
		base.StartedAt = started.Time
		message += fmt.Sprintf(" (attempt %d, on worker %s)", started.Attempt, started.Worker)
	}
	return failure(base, messages.StateFailed, messages.ResultOutcomeUnknown, message+"; an at-most-once tool is not run again")
}

// startOnce records, before an at-most-once tool runs, that this attempt
// starts it: a write the stream acknowledges, refused if an attempt
// started the call before (ledger.StartOnce). It returns that attempt's
// start if there is one, in which case the tool must not run, and an
// error if the start could not be recorded, in which case it must not run
// either. The write is retried as the ledger's writes are, within
// writeTimeout, while the call's lease is renewed (the call is tracked).
func (w *Worker) startOnce(ctx context.Context, f *inflight) (other *messages.CallEvent, err error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	ev := &messages.CallEvent{CallID: f.call.ID, Time: f.started, Attempt: f.call.Attempt, Worker: w.cfg.ID}
	err = w.ledger.StartOnce(ctx, f.bucket, f.ns.Name, ev)
	if !errors.Is(err, ledger.ErrChanged) {
		return nil, err
	}
	snap, err := w.ledger.ReadOwn(ctx, f.bucket, f.ns.Name, f.call.ID, messages.EventStarted)
	if err != nil {
		return nil, fmt.Errorf("read the start of call %s: %w", f.call.ID, err)
	}
	if snap.Started == nil {
		return nil, fmt.Errorf("the start of call %s was refused but cannot be read", f.call.ID)
	}
	if s := snap.Started; s.Attempt == ev.Attempt && s.Worker == ev.Worker {
		// This attempt's own write, stored by a try whose answer was lost.
		return nil, nil
	}
	return &snap.Started.CallEvent, nil
}

// readBeforeRerun reads a redelivered call's record: whether an earlier
// attempt stored its result, or a cancellation, and for an at-most-once
// tool whether one started it. It reads with direct gets
// of the call's own namespace's event subjects (see ledger.ReadOwn), the
// only reads of the events stream a worker's user may make. Running the tool without
// knowing could repeat its effects, so a failed read is retried, with the
// policy of commitAgain (retryPolicy), while the call's lease is renewed (the call is
// tracked), until the call's context ends, the worker stops, or readGiveUp
// has passed.
func (w *Worker) readBeforeRerun(ctx context.Context, log *callLog, bucket, ns, callID string, atMostOnce bool) (*ledger.Snapshot, error) {
	kinds := []messages.EventKind{messages.EventCancel, messages.EventResult}
	if atMostOnce {
		kinds = append(kinds, messages.EventStarted)
	}
	return w.readRecord(ctx, log, bucket, ns, callID, kinds)
}

// readBeforeRun reads whether a call delivered for the first time already
// has a result, as readBeforeRerun reads a redelivered call's record.
func (w *Worker) readBeforeRun(ctx context.Context, log *callLog, bucket, ns, callID string) (*ledger.Snapshot, error) {
	return w.readRecord(ctx, log, bucket, ns, callID, []messages.EventKind{messages.EventResult})
}

// readRecord reads the latest events of kinds of a call of namespace ns
// under bucket, retrying as readBeforeRerun says.
func (w *Worker) readRecord(ctx context.Context, log *callLog, bucket, ns, callID string, kinds []messages.EventKind) (*ledger.Snapshot, error) {
	retry := w.retryPolicy(readGiveUp).Start()
	var timer *time.Timer
	for tries := 1; ; tries++ {
		readCtx, cancel := context.WithTimeout(ctx, w.commitTimeout())
		snap, err := w.ledger.ReadOwn(readCtx, bucket, ns, callID, kinds...)
		cancel()
		if err == nil {
			if tries > 1 {
				log.Info("the call's record was read after retrying", "tries", tries)
			}
			return snap, nil
		}
		if tries == 1 {
			log.Warn("the call's record could not be read; retrying before the tool runs again", "error", err)
		}
		pause, again := retry.Failed(err)
		if !again {
			return nil, fmt.Errorf("read the record of call %s (%d tries): %w", callID, tries, err)
		}
		if timer == nil {
			timer = time.NewTimer(pause)
			defer timer.Stop()
		} else {
			timer.Reset(pause)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-w.fetchCtx.Done():
			return nil, errStopping
		}
	}
}

// startedBefore reports whether an earlier delivery of the call started
// its tool, as far as the call's record says, on the consumer's extra
// delivery past MaxAttempts. JetStream counts every delivery, including
// those no worker ran (a worker that stopped while holding it, a call
// handed back by a worker that does not serve the tool, a delivery to a
// request whose worker is gone), so that count alone would fail calls
// that never ran. A call with no started event runs on this last delivery
// instead. A start is recorded once a tool has run for StartDelay, and
// before a call whose tool ran is handed back (an at-most-once tool's
// before it runs, see startOnce); a worker that died sooner
// leaves none: its call may run once more, within
// the consumer's MaxDeliver. A record that cannot be read counts as
// started. It also returns the call's latest log event, whose cause (see
// messages.ExhaustedMessage) the call's failure gives.
func (w *Worker) startedBefore(log *callLog, bucket, ns, callID string) (started bool, lastLog *messages.CallEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), w.commitTimeout())
	defer cancel()
	snap, err := w.ledger.ReadOwn(ctx, bucket, ns, callID, messages.EventStarted, messages.EventResult, messages.EventLog)
	if err != nil {
		log.Warn("the call's record could not be read on its last delivery", "error", err)
		return true, nil
	}
	if snap.Log != nil {
		lastLog = &snap.Log.CallEvent
	}
	if snap.Started != nil || snap.Result != nil {
		return true, lastLog
	}
	log.Info("no earlier delivery of the call started its tool; it runs on its last delivery")
	return false, nil
}
