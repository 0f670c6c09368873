package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
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
	retry := w.results.retryPolicy(readGiveUp).Start()
	var timer *time.Timer
	for tries := 1; ; tries++ {
		readCtx, cancel := context.WithTimeout(ctx, w.results.commitTimeout())
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
	ctx, cancel := context.WithTimeout(context.Background(), w.results.commitTimeout())
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
