package coordinator

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// While a stream or bucket has no leader (a node died and its replicas
// elect another, which takes a few seconds), JetStream answers nothing,
// "no responders" or 503. A request does not refuse on that: it waits
// and tries again, within its own deadline and at most UnavailableWait.

// transient reports whether err is JetStream being unavailable for a
// moment rather than refusing (transport.Transient: nothing answered, an
// attempt timed out, 503 or 408), or a publish of the same message ID in
// process.
func transient(err error) bool {
	return transport.Transient(err) || transport.DuplicateInProcess(err)
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

// retryWithin is the policy of every read and write on a request's path,
// bounded by bound in all (the request's context may end it sooner; a
// bound of zero or less allows one attempt): attempts of attemptTimeout,
// pauses from retryFirstPause doubling to retryMaxPause, transient errors
// retried, and a coded unavailable error, naming the last failure, when
// the time runs out.
func retryWithin(bound time.Duration) transport.RetryPolicy {
	return transport.RetryPolicy{
		Attempt:   attemptTimeout,
		Initial:   retryFirstPause,
		Max:       retryMaxPause,
		Within:    max(bound, time.Nanosecond),
		Retryable: transient,
		GaveUp:    gaveUp,
	}
}

// retryTransient runs op under retryWithin(bound) (transport.Retry).
func retryTransient(ctx context.Context, bound time.Duration, op func(ctx context.Context) error) error {
	return transport.Retry(ctx, retryWithin(bound), op)
}

// gaveUp is the error of a retry that ran out of time.
func gaveUp(attempts int, waited time.Duration, last error) error {
	return messages.Errorf(messages.CodeUnavailable, "JetStream stayed unavailable for %v (%d attempts): %v", waited.Round(time.Millisecond), attempts, last)
}
