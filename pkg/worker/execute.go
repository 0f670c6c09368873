package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// errSuperseded ends a tool's context when the call turns out to have a
// result already, e.g. because it was cancelled while queued.
var errSuperseded = errors.New("the call already has a result")

// writeTimeout bounds each write to the ledger.
const writeTimeout = 10 * time.Second

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

// execute runs one delivered call to its end: a committed result and an
// acknowledged message, or a message handed back for another attempt. It
// reports whether it left the commit of the result, and release, to the
// stream's acknowledgement (see finishThen).
func (w *Worker) execute(ns *namespace, msg jetstream.Msg, release func()) (later bool) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("call message without metadata", "error", err)
		_ = msg.Term()
		return
	}
	attempt := int(meta.NumDelivered)
	var req messages.CallRequest
	if _, err := messages.Decode(msg.Headers(), msg.Data(), &req); err != nil || req.CallID == "" {
		w.rejectUnreadable(msg, attempt, err)
		return
	}
	log := &callLog{log: w.log, call: req.CallID, tool: req.Tool, attempt: attempt}
	now := time.Now().UTC()
	base := messages.CallResult{
		CallID:   req.CallID,
		Tool:     req.Tool,
		Attempt:  attempt,
		Worker:   w.cfg.ID,
		QueuedAt: req.QueuedAt,
	}
	if attempt > ns.MaxAttempts {
		w.finish(msg, log, req.Notify, failure(base, messages.StateFailed, messages.ResultAttempts,
			fmt.Sprintf("the call was delivered %d times and no attempt finished: the workers that took it stopped, lost their lease, or do not serve the tool", ns.MaxAttempts)))
		return
	}
	w.mu.Lock()
	tool := ns.tools[req.Method]
	w.mu.Unlock()
	if tool == nil {
		// Another worker of the namespace may serve the tool (a rolling
		// deploy); after MaxAttempts the call fails with a clear reason.
		log.Warn("tool not served by this worker; handing the call back")
		_ = msg.NakWithDelay(retryDelay)
		return
	}
	if !req.Deadline.IsZero() && !now.Before(req.Deadline) {
		w.finish(msg, log, req.Notify, failure(base, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed before a worker could start it"))
		return
	}

	spanCtx, span := w.tracer.Start(tracing.Extract(context.Background(), msg.Headers()), "toolbus.execute "+req.Tool,
		trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.call_id", req.CallID), attribute.Int("toolbus.attempt", attempt), attribute.String("toolbus.worker", w.cfg.ID))
	}
	defer span.End()
	ctx, cancel := context.WithCancelCause(spanCtx)
	defer cancel(nil)
	if !req.Deadline.IsZero() {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadlineCause(ctx, req.Deadline, ErrDeadline)
		defer stop()
	}
	call := &Call{ID: req.CallID, Tool: req.Tool, Agent: req.Agent, Turn: req.Turn, Arguments: req.Arguments, Attempt: attempt, Deadline: req.Deadline}
	f := &inflight{call: call, ns: ns, msg: msg, cancel: cancel, started: now, log: log}
	// Registered before the started event is stored, so that a cancel
	// signal sent as soon as the call shows as running finds it.
	w.track(f)
	defer w.untrack(req.CallID)
	recordStart := func() { w.recordStart(f) }
	base.StartedAt = now
	if attempt > 1 {
		if snap, err := w.ledger.Snapshot(ctx, req.CallID); err == nil {
			if snap.Result != nil {
				// An earlier attempt committed the result and stopped before
				// acknowledging the message: running the tool again would
				// only repeat its effects.
				log.Info("the call already has its result; acknowledged without running the tool again")
				_ = msg.Ack()
				return
			}
			// A cancellation requested while an earlier attempt ran still holds.
			if snap.Cancel != nil {
				w.cancelCall(req.CallID, snap.Cancel.Cancel)
			}
		}
	}

	reporter := &progressReporter{interval: w.cfg.ProgressInterval, publish: func(p messages.Progress) {
		recordStart()
		if err := w.ledger.AppendAsync(&messages.CallEvent{CallID: req.CallID, Kind: messages.EventProgress, Time: time.Now().UTC(), Attempt: attempt, Worker: w.cfg.ID, Progress: &p}); err != nil {
			log.Warn("progress event not stored", "error", err)
		}
	}}
	scope := &callScope{call: call, progress: reporter, log: func(level, message string) {
		recordStart()
		if err := w.ledger.AppendAsync(&messages.CallEvent{CallID: req.CallID, Kind: messages.EventLog, Time: time.Now().UTC(), Attempt: attempt, Worker: w.cfg.ID, Log: &messages.LogEntry{Level: level, Message: message}}); err != nil {
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
		if retry {
			_ = msg.Nak()
		} else {
			w.finish(msg, log, req.Notify, res)
		}
		w.untrack(req.CallID)
		w.straggling(req.CallID, run, release, log)
	})
	out := runTool(withScope(ctx, scope), tool, call)
	stopWatching()
	if !decided.CompareAndSwap(false, true) {
		// The context decided the outcome; the tool has now returned. The
		// slot is kept until the call's message is settled.
		run.deciding.Wait()
		w.straggled(req.CallID, run)
		return
	}
	reporter.close()
	finished := time.Now().UTC()
	base.FinishedAt = finished
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
		w.finishThen(msg, log, req.Notify, w.fit(base, &tool.Definition, log), release)
		return true
	case ctx.Err() != nil:
		res, retry := w.interrupted(base, ctx)
		if retry {
			_ = msg.Nak()
			return
		}
		w.finish(msg, log, req.Notify, res)
	case errors.As(out.err, &perr):
		log.Error("tool panicked", "panic", fmt.Sprint(perr.value), "stack", string(perr.stack))
		w.finish(msg, log, req.Notify, failure(base, messages.StateFailed, messages.ResultPanic, fmt.Sprintf("the tool panicked: %v", perr.value)))
	case errors.Is(out.err, ErrRetry):
		log.Info("tool asked for another attempt", "error", out.err)
		_ = msg.NakWithDelay(retryDelay)
	default:
		base.Status = messages.StateCompleted
		base.IsError = true
		base.Content = []messages.ContentBlock{messages.TextBlock(out.err.Error())}
		base.Error = &messages.ResultError{Code: messages.ResultToolError, Message: out.err.Error()}
		w.finishThen(msg, log, req.Notify, base, release)
		return true
	}
	return false
}

// interrupted builds the result of a call whose context ended before the
// tool answered. retry is true when the worker is stopping: the call goes
// back to JetStream without a result.
func (w *Worker) interrupted(base messages.CallResult, ctx context.Context) (messages.CallResult, bool) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrStopping):
		return base, true
	case errors.Is(cause, errSuperseded):
		// The commit will find the result that already stands and drop this one.
		return failure(base, messages.StateCancelled, messages.ResultCancelled, cause.Error()), false
	case errors.Is(cause, ErrCancelled):
		return failure(base, messages.StateCancelled, messages.ResultCancelled, cause.Error()), false
	default:
		return failure(base, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed while the tool ran"), false
	}
}

type outcome struct {
	res *Result
	err error
}

// stragglerWarning is how long after its call ended a tool that ignores its
// context runs before the worker logs it.
const stragglerWarning = 10 * time.Second

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

// toolRun is what the two deciders of a call share about its tool.
type toolRun struct {
	mu       sync.Mutex
	returned bool
	warn     *time.Timer
	// deciding is held while the context's end settles the call.
	deciding sync.WaitGroup
}

// straggling records a tool that outlived its call: it keeps its slot
// until it returns, so that the worker never runs more tools than it has
// slots, unless Stop gives up on it and releases the slot.
func (w *Worker) straggling(callID string, run *toolRun, release func(), log interface{ Warn(string, ...any) }) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.returned {
		return
	}
	w.mu.Lock()
	select {
	case <-w.abandon:
		// Stop has given up on tools that ignore their context.
		w.mu.Unlock()
		release()
		return
	default:
	}
	w.stragglers[callID] = release
	w.mu.Unlock()
	run.warn = time.AfterFunc(stragglerWarning, func() {
		log.Warn("tool still running after its call ended; it ignores its context and holds a slot")
	})
}

// straggled forgets a tool that outlived its call once it returned.
func (w *Worker) straggled(callID string, run *toolRun) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.returned = true
	if run.warn != nil {
		run.warn.Stop()
	}
	w.mu.Lock()
	delete(w.stragglers, callID)
	w.mu.Unlock()
}

// track registers a call that is about to run, and makes sure its start
// gets recorded if it runs for StartDelay.
func (w *Worker) track(f *inflight) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight[f.call.ID] = f
	f.ns.busy++
	if !w.startSweepArmed {
		w.startSweepArmed = true
		if w.startSweep == nil {
			w.startSweep = time.AfterFunc(w.cfg.StartDelay, w.sweepStarts)
		} else {
			w.startSweep.Reset(w.cfg.StartDelay)
		}
	}
}

// recordStart stores the call's started event, once. It is recorded once
// the tool has run for StartDelay or reports something, whichever comes
// first; a call that finishes sooner goes from queued to its result
// without it, which spares the hot path a write. The result write is
// conditional anyway, and a call that already has a result (cancelled
// while queued) is stopped by the cancel signal or when the lease loop
// checks it.
func (w *Worker) recordStart(f *inflight) {
	f.startOnce.Do(func() {
		f.startRecorded.Store(true)
		if err := w.ledger.Start(&messages.CallEvent{CallID: f.call.ID, Time: f.started, Attempt: f.call.Attempt, Worker: w.cfg.ID}); err != nil {
			f.log.Warn("start of the call not recorded", "error", err)
		}
	})
}

// sweepStarts records the starts that are due, and waits for the next one.
// One timer for all calls costs less than one per call, which most calls
// would stop unfired.
func (w *Worker) sweepStarts() {
	now := time.Now()
	var due []*inflight
	var next time.Duration
	w.mu.Lock()
	for _, f := range w.inflight {
		if f.startRecorded.Load() {
			continue
		}
		if wait := w.cfg.StartDelay - now.Sub(f.started); wait <= 0 {
			due = append(due, f)
		} else if next == 0 || wait < next {
			next = wait
		}
	}
	if next > 0 {
		w.startSweep.Reset(next)
	} else {
		w.startSweepArmed = false
	}
	w.mu.Unlock()
	for _, f := range due {
		w.recordStart(f)
	}
}

func (w *Worker) untrack(callID string) {
	w.mu.Lock()
	if f, ok := w.inflight[callID]; ok {
		delete(w.inflight, callID)
		f.ns.busy--
	}
	w.mu.Unlock()
}

// maxResultContent bounds a result's content whatever the tool says, so
// that its event stays under the 1 MiB message limit.
const maxResultContent = 768 << 10

// fit keeps a result within the tool's size limit: a larger one is stored
// whole in the results object store, and the result the caller and the
// model get is cut down to the limit, saying where the whole one is.
func (w *Worker) fit(res messages.CallResult, def *messages.ToolDefinition, log interface{ Warn(string, ...any) }) messages.CallResult {
	limit := def.Metadata.MaxResultSize
	if limit <= 0 {
		limit = messages.DefaultMaxResultSize
	}
	limit = min(limit, maxResultContent)
	size := messages.ContentSize(&res)
	if size <= limit {
		return res
	}
	var ref *messages.ObjectRef
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if data, err := json.Marshal(&res); err == nil {
		if obj, err := w.js.ObjectStore(ctx, w.names.ResultsBucket()); err != nil {
			log.Warn("results store unavailable; the result is cut without a copy", "error", err)
		} else if info, err := obj.PutBytes(ctx, res.CallID, data); err != nil {
			log.Warn("whole result not stored; the result is cut without a copy", "error", err)
		} else {
			ref = &messages.ObjectRef{Bucket: w.names.ResultsBucket(), Name: info.Name, Size: int64(info.Size)}
		}
	}
	cut, _ := messages.Truncate(res, limit, ref)
	return cut
}

func failure(base messages.CallResult, status messages.CallState, code, message string) messages.CallResult {
	base.Status = status
	base.IsError = true
	base.Content = []messages.ContentBlock{messages.TextBlock(message)}
	base.Error = &messages.ResultError{Code: code, Message: message}
	if base.FinishedAt.IsZero() {
		base.FinishedAt = time.Now().UTC()
	}
	return base
}

// finish commits the result and removes the call from the queue. A result
// already committed by another attempt stands; this one is dropped.
func (w *Worker) finish(msg jetstream.Msg, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}, notify string, res messages.CallResult) {
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	won, err := w.ledger.Commit(ctx, &res, notify)
	settle(msg, log, res.Status, won, err)
}

// finishThen is finish without waiting for the stream: the message is
// settled, and done called, once the stream has answered the result's
// write, on the ledger's goroutine. The slot stays taken until then.
func (w *Worker) finishThen(msg jetstream.Msg, log *callLog, notify string, res messages.CallResult, done func()) {
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	status := res.Status
	err := w.ledger.CommitThen(&res, notify, writeTimeout, func(won bool, err error) {
		settle(msg, log, status, won, err)
		done()
	})
	if err != nil {
		settle(msg, log, status, false, err)
		done()
	}
}

// settle acknowledges a call's message once its result is committed,
// terminates it when another attempt's result stands or the call was
// cancelled, and hands it back when the result could not be stored.
func settle(msg jetstream.Msg, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}, status messages.CallState, won bool, err error) {
	if err != nil {
		// The message stays unacknowledged and is delivered again; the next
		// attempt sees whether this result was stored after all.
		log.Warn("result not stored; the call will be delivered again", "error", err)
		_ = msg.NakWithDelay(retryDelay)
		return
	}
	if !won {
		log.Info("another attempt already committed the result; this one is discarded")
	}
	if status == messages.StateCancelled || !won {
		_ = msg.Term()
		return
	}
	_ = msg.Ack()
}

// rejectUnreadable fails a call whose message cannot be decoded: no
// attempt could run it.
func (w *Worker) rejectUnreadable(msg jetstream.Msg, attempt int, decodeErr error) {
	callID := msg.Headers().Get(messages.HeaderMsgID)
	w.log.Error("unreadable call message", "call", callID, "error", decodeErr)
	if messages.ValidateID("call ID", callID) == nil {
		res := failure(messages.CallResult{CallID: callID, Attempt: attempt, Worker: w.cfg.ID}, messages.StateFailed, messages.ResultInvalidRequest,
			fmt.Sprintf("the call message could not be read: %v", decodeErr))
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if _, err := w.ledger.Commit(ctx, &res, ""); err != nil {
			w.log.Warn("result of unreadable call not stored", "call", callID, "error", err)
		}
	}
	_ = msg.TermWithReason("unreadable call message")
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

func firstText(blocks []messages.ContentBlock) string {
	for _, b := range blocks {
		if b.Type == messages.ContentText {
			return b.Text
		}
	}
	return ""
}
