package coordinator

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// While a stream or bucket has no leader (a node died and its replicas
// elect another, which takes a few seconds), JetStream answers nothing,
// "no responders" or 503. A request does not refuse on that: it waits
// and tries again, within its own deadline and at most UnavailableWait.

// errCodeDuplicateInProcess is JetStream's answer to a publish whose
// Nats-Msg-Id another publish is storing at that moment: a duplicate, not
// a failure (JSStreamDuplicateMessageConflict).
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

// duplicateInProcess reports whether err is JetStream refusing a publish
// because another publish of the same message ID is being stored.
func duplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDuplicateInProcess
}

// transient reports whether err is JetStream being unavailable for a
// moment rather than refusing (transport.Transient: nothing answered, an
// attempt timed out, 503 or 408), or a publish of the same message ID in
// process.
func transient(err error) bool {
	return transport.Transient(err) || duplicateInProcess(err)
}

// retryPolicy is how long a request waits for JetStream to answer again.
type retryPolicy struct {
	// first is the pause after the first failed attempt; each pause
	// doubles, up to max, and is shortened by up to half at random so
	// that the coordinators waiting on one stream do not retry in step.
	first, max time.Duration
	// attempt bounds one attempt.
	attempt time.Duration
	// bound bounds all the attempts together; the request's context may
	// end them sooner.
	bound time.Duration
}

// Defaults of the retry policy. DefaultUnavailableWait is the default of
// Config.UnavailableWait; an election in a cluster takes a few seconds.
const (
	DefaultUnavailableWait = 10 * time.Second
	retryFirstPause        = 50 * time.Millisecond
	retryMaxPause          = time.Second
	// attemptTimeout bounds one read or write: a request that went to a
	// leader that died is not answered, and is sent again after this.
	attemptTimeout = 2 * time.Second
)

// retryWithin is the default policy bounded by bound.
func retryWithin(bound time.Duration) retryPolicy {
	return retryPolicy{first: retryFirstPause, max: retryMaxPause, attempt: attemptTimeout, bound: bound}
}

// retryTransient runs op until it succeeds, fails with an error that is
// not transient, ctx ends or bound passes, pausing between attempts with
// the default backoff. Each attempt's context ends after attemptTimeout.
func retryTransient(ctx context.Context, bound time.Duration, op func(ctx context.Context) error) error {
	return retryWithin(bound).do(ctx, op)
}

// do runs op as retryTransient describes. When the time runs out on a
// transient error it returns a coded unavailable error naming the last one.
func (p retryPolicy) do(ctx context.Context, op func(ctx context.Context) error) error {
	start := time.Now()
	b := backoff{next: p.first, max: p.max}
	for attempt := 1; ; attempt++ {
		err := p.try(ctx, op)
		if err == nil || !transient(err) {
			return err
		}
		pause := b.pause()
		if ctx.Err() != nil || time.Since(start)+pause >= p.bound {
			return gaveUp(attempt, time.Since(start), err)
		}
		if transport.Sleep(ctx, pause) != nil {
			return gaveUp(attempt, time.Since(start), err)
		}
	}
}

// try runs one attempt under its own bound.
func (p retryPolicy) try(ctx context.Context, op func(ctx context.Context) error) error {
	if p.attempt <= 0 {
		return op(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, p.attempt)
	defer cancel()
	return op(actx)
}

// gaveUp is the error of a retry that ran out of time.
func gaveUp(attempts int, waited time.Duration, last error) error {
	return messages.Errorf(messages.CodeUnavailable, "JetStream stayed unavailable for %v (%d attempts): %v", waited.Round(time.Millisecond), attempts, last)
}

// backoff yields pauses that double from a first one up to a maximum,
// each shortened by up to half at random ("equal jitter").
type backoff struct {
	next, max time.Duration
	// random returns a number in [0, 1); nil is math/rand.
	random func() float64
}

func (b *backoff) pause() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	r := rand.Float64
	if b.random != nil {
		r = b.random
	}
	return d/2 + time.Duration(r()*float64(d/2))
}
