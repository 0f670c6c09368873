package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RetryPolicy says how an operation is bounded and retried: each attempt
// gets at most Attempt, and a failed attempt whose error Retryable accepts
// is tried again after a pause that doubles from Initial up to Max, each
// pause drawn at random between half of it and all of it (so that callers
// that failed together do not retry together). The caller's context bounds
// the whole: attempts and pauses end with it.
type RetryPolicy struct {
	// Attempt bounds each attempt, whatever the caller's deadline. Zero
	// leaves attempts bounded by the caller's context only.
	Attempt time.Duration
	// Initial is the pause after the first failure. Defaults to 50ms.
	Initial time.Duration
	// Max caps the pause. Defaults to 2s.
	Max time.Duration
	// MaxAttempts ends the retries after that many attempts; zero retries
	// for as long as the caller's context allows.
	MaxAttempts int
	// Retryable reports whether a failed attempt may be made again.
	// Defaults to Transient.
	Retryable func(error) bool
}

// ReadPolicy is the policy of reads that change nothing, such as direct
// gets: a bound of 2s per attempt (the server answers a direct get in
// milliseconds, so an attempt that takes longer went to a server or a
// replica that is not answering), and pauses from 50ms to 1s between
// attempts, for as long as the caller's context allows.
var ReadPolicy = RetryPolicy{Attempt: 2 * time.Second, Initial: 50 * time.Millisecond, Max: time.Second}

// Delay returns the pause after the given failed attempt (1 for the
// first): Initial doubled attempt-1 times, capped at Max, then drawn at
// random between half of it and all of it.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	initial, ceiling := p.Initial, p.Max
	if initial <= 0 {
		initial = 50 * time.Millisecond
	}
	if ceiling <= 0 {
		ceiling = 2 * time.Second
	}
	d := initial
	for i := 1; i < attempt && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d/2 + rand.N(d/2+1)
}

// Retry runs op until it succeeds, fails with an error that is not
// retryable, has made MaxAttempts attempts, or ctx ends. Each attempt's
// context ends after p.Attempt; an attempt cut short by that bound fails
// with context.DeadlineExceeded, which Transient accepts. Retry returns
// nil or the error of the last attempt; if ctx ended after a retryable
// failure, the error wraps both ctx.Err() and that failure.
func Retry(ctx context.Context, p RetryPolicy, op func(ctx context.Context) error) error {
	retryable := p.Retryable
	if retryable == nil {
		retryable = Transient
	}
	// failed is the last failure of an attempt that ctx did not end: when
	// ctx ends an attempt, what went wrong before is the news.
	var failed error
	for attempt := 1; ; attempt++ {
		err := attemptOnce(ctx, p.Attempt, op)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if failed != nil && errors.Is(err, ctx.Err()) {
				err = failed
			}
			return lastFailure(ctx, err)
		}
		failed = err
		if !retryable(err) || p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
			return err
		}
		if Sleep(ctx, p.Delay(attempt)) != nil {
			return lastFailure(ctx, err)
		}
	}
}

func attemptOnce(ctx context.Context, bound time.Duration, op func(context.Context) error) error {
	if bound <= 0 {
		return op(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return op(actx)
}

// lastFailure is the error of a retry that ctx ended: the last attempt's
// error if that was ctx's, or both.
func lastFailure(ctx context.Context, last error) error {
	if errors.Is(last, ctx.Err()) {
		return last
	}
	return fmt.Errorf("%w; the last attempt: %w", ctx.Err(), last)
}

// Transient reports whether err is a failure that may pass if the same
// request is made again: nothing answered (ErrNoResponders, which covers a
// stream without a leader at the moment), no answer in time
// (context.DeadlineExceeded, nats.ErrTimeout), a connection between
// servers or being re-established, JetStream's status 503 or 408, or a
// conditional write refused while another on its subject is in process
// (ErrWriteInProcess). It
// says nothing of whether making the request again is safe: a request that
// timed out may have been carried out.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoResponders) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, ErrWriteInProcess) {
		return true
	}
	var status *StatusError
	if errors.As(err, &status) {
		return status.Status == "503" || status.Status == "408"
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503 || api.Code == 408
	}
	return false
}
