package worker

import (
	"context"
	"errors"
	"math"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Causes with which a call's context ends; read them with context.Cause.
var (
	// ErrCancelled: somebody cancelled the call.
	ErrCancelled = errors.New("call cancelled")
	// ErrDeadline: the call's deadline passed.
	ErrDeadline = errors.New("call deadline exceeded")
	// ErrStopping: the worker is shutting down. An at-least-once call
	// runs again on another worker (or this one's next start); an
	// at-most-once call ends failed with outcome_unknown.
	ErrStopping = errors.New("worker stopping")
	// ErrSuperseded: the call got a result while this attempt ran, so
	// this attempt's result will not be kept: it was cancelled, or its
	// deadline was swept, or another worker took it over after this one
	// stopped renewing its lease (a process paused past AckWait) and
	// finished first.
	ErrSuperseded = errors.New("the call already has a result")
)

type callKey struct{}

type callScope struct {
	call     *Call
	progress *progressReporter
	log      func(level, message string)
}

func withScope(ctx context.Context, s *callScope) context.Context {
	return context.WithValue(ctx, callKey{}, s)
}

func scopeFrom(ctx context.Context) *callScope {
	s, _ := ctx.Value(callKey{}).(*callScope)
	return s
}

// CallFrom returns the call that ctx belongs to, or nil outside a call.
func CallFrom(ctx context.Context) *Call {
	if s := scopeFrom(ctx); s != nil {
		return s.call
	}
	return nil
}

// ReportProgress tells watchers of the call how far it got: progress of
// total units (total 0 when unknown; for a fraction pass total 1), with an
// optional message. Reports are coalesced to a few per second; the latest
// always reaches the ledger before the result. Outside a call it does nothing.
func ReportProgress(ctx context.Context, progress, total float64, message string) {
	if math.IsNaN(progress) || math.IsInf(progress, 0) || math.IsNaN(total) || math.IsInf(total, 0) {
		return // not a report a watcher can read
	}
	if s := scopeFrom(ctx); s != nil && s.progress != nil {
		s.progress.report(messages.Progress{Progress: progress, Total: total, Message: message})
	}
}

// Log records a log line with the call's events. Outside a call it does nothing.
func Log(ctx context.Context, level, message string) {
	if s := scopeFrom(ctx); s != nil && s.log != nil {
		s.log(level, message)
	}
}
