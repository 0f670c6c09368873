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
// the whole, and Within, MaxAttempts and the context end the retries,
// whichever comes first.
//
// A policy is used in one of two forms: Retry runs a function until it
// succeeds or the policy gives up; Start returns a Retrier, which a loop
// of its own asks, after each failure, how long to pause or whether to
// stop (a write answered through a callback, a reconnection that also
// watches its connection).
type RetryPolicy struct {
	// Attempt bounds each attempt, whatever the caller's deadline. Zero
	// leaves attempts bounded by the caller's context only. An attempt
	// after one that went unanswered within its bound gets twice that
	// bound, up to four times Attempt: a server that is slow rather than
	// gone is not sent the same request again every Attempt, which would
	// add to what makes it slow.
	Attempt time.Duration
	// Initial is the pause after the first failure. Defaults to 50ms.
	Initial time.Duration
	// Max caps the pause. Defaults to 2s.
	Max time.Duration
	// NoJitter makes every pause the whole doubled step, for a client
	// that waits for a server of its own, where no crowd retries in step.
	NoJitter bool
	// MaxAttempts ends the retries after that many attempts; zero retries
	// for as long as the caller's context and Within allow.
	MaxAttempts int
	// Within bounds the retries together, from the start of the first
	// attempt: no attempt is begun whose pause would end at or past it.
	// Zero leaves them bounded by the caller's context and MaxAttempts.
	Within time.Duration
	// Retryable reports whether a failed attempt may be made again.
	// Defaults to Transient.
	Retryable func(error) bool
	// GaveUp, when set, is the error of retries that ran out of time after
	// a retryable failure (the caller's context ended, or Within passed),
	// made from the number of attempts, the time since the first began
	// and the last failure; a failure that is not retryable is then
	// returned as it is. Without GaveUp the error is the last failure,
	// wrapped with the context's error when the context ended the retries.
	GaveUp func(attempts int, waited time.Duration, last error) error
}

// ReadPolicy is the policy of reads that change nothing, such as direct
// gets: a bound of 2s per attempt (the server answers a direct get in
// milliseconds, so an attempt that takes longer went to a server or a
// replica that is not answering), and pauses from 50ms to 1s between
// attempts, for as long as the caller's context allows.
var ReadPolicy = RetryPolicy{Attempt: 2 * time.Second, Initial: 50 * time.Millisecond, Max: time.Second}

// Delay returns the pause after the given failed attempt (1 for the
// first): Initial doubled attempt-1 times, capped at Max, then drawn at
// random between half of it and all of it (all of it with NoJitter).
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
	if p.NoJitter {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func (p RetryPolicy) retryable(err error) bool {
	if p.Retryable == nil {
		return Transient(err)
	}
	return p.Retryable(err)
}

// Retry runs op until it succeeds, fails with an error that is not
// retryable, has made MaxAttempts attempts, Within has passed, or ctx
// ends. Each attempt's context ends after p.Attempt; an attempt cut short
// by that bound fails with context.DeadlineExceeded, which Transient
// accepts. Retry returns nil or the error of the last attempt; if ctx or
// Within ended the retries after a retryable failure, the error is
// GaveUp's, or else the failure, wrapped with ctx.Err() when ctx ended
// them.
func Retry(ctx context.Context, p RetryPolicy, op func(ctx context.Context) error) error {
	r := p.Start()
	// failed is the last failure of an attempt that ctx did not end: when
	// ctx ends an attempt, what went wrong before is the news (unless
	// GaveUp makes the error).
	var failed error
	for {
		err := attemptOnce(ctx, r.AttemptTimeout(), op)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			r.attempts++
			return r.stopped(ctx, err, failed)
		}
		failed = err
		pause, ok := r.Failed(err)
		if !ok {
			return r.GiveUp(err)
		}
		if Sleep(ctx, pause) != nil {
			return r.stopped(ctx, err, err)
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

// stopped is the error of retries that ctx ended: last is the last
// attempt's error, failed the last failure that ctx did not cause (nil if
// none). With GaveUp, the last attempt's error decides: one that is not
// retryable (the context cancelled) is returned as it is.
func (r *Retrier) stopped(ctx context.Context, last, failed error) error {
	if r.policy.GaveUp != nil {
		if !r.policy.retryable(last) {
			return last
		}
		return r.policy.GaveUp(r.attempts, r.Waited(), last)
	}
	if failed != nil && errors.Is(last, ctx.Err()) {
		last = failed
	}
	if errors.Is(last, ctx.Err()) {
		return last
	}
	return fmt.Errorf("%w; the last attempt: %w", ctx.Err(), last)
}

// Start begins the retries of an operation under the policy, for a loop
// that makes its attempts itself (the asynchronous form; Retry is the
// synchronous one). The time Within bounds starts now.
func (p RetryPolicy) Start() *Retrier { return &Retrier{policy: p, start: time.Now()} }

// Retrier follows one operation's attempts under a RetryPolicy: after each
// failure the loop that makes them calls Failed, which says how long to
// pause before the next attempt, or that there is to be none. It is not
// safe for concurrent use; a loop's attempts are made one after another.
type Retrier struct {
	policy   RetryPolicy
	start    time.Time
	attempts int
	// outOfTime is set when Failed refused another attempt because of
	// Within.
	outOfTime bool
	// unanswered counts the failed attempts that ran out of time.
	unanswered int
}

// maxAttemptDoublings is how often an attempt's bound doubles after
// attempts that went unanswered (see RetryPolicy.Attempt).
const maxAttemptDoublings = 2

// attemptBound is the policy's Attempt, doubled for each attempt that
// went unanswered, at most maxAttemptDoublings times.
func (r *Retrier) attemptBound() time.Duration {
	return r.policy.Attempt << min(r.unanswered, maxAttemptDoublings)
}

// Failed records a failed attempt and returns the pause before the next
// one, or false when no other is to be made: err is not retryable,
// MaxAttempts attempts were made, or the pause would end at or past
// Within. GiveUp then makes the error to return.
func (r *Retrier) Failed(err error) (pause time.Duration, again bool) {
	r.attempts++
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		r.unanswered++
	}
	p := r.policy
	if !p.retryable(err) || p.MaxAttempts > 0 && r.attempts >= p.MaxAttempts {
		return 0, false
	}
	pause = p.Delay(r.attempts)
	if p.Within > 0 && r.Waited()+pause >= p.Within {
		r.outOfTime = true
		return 0, false
	}
	return pause, true
}

// GiveUp returns the error to end with after Failed refused another
// attempt: GaveUp's when it is set and Within ran out, else last.
func (r *Retrier) GiveUp(last error) error {
	if r.outOfTime && r.policy.GaveUp != nil {
		return r.policy.GaveUp(r.attempts, r.Waited(), last)
	}
	return last
}

// Attempts returns how many attempts failed so far.
func (r *Retrier) Attempts() int { return r.attempts }

// Waited returns the time since the retries started (Start or Reset).
func (r *Retrier) Waited() time.Duration { return time.Since(r.start) }

// AttemptTimeout bounds the next attempt: the policy's Attempt (doubled
// after attempts that went unanswered), cut to the time left Within, and
// never under a millisecond. Zero when neither bounds it.
func (r *Retrier) AttemptTimeout() time.Duration {
	d := r.attemptBound()
	if w := r.policy.Within; w > 0 {
		left := w - r.Waited()
		if d <= 0 || left < d {
			d = left
		}
		d = max(d, time.Millisecond)
	}
	return d
}

// Reset starts the retries again from the first pause, as if the next
// attempt were the first: for an operation that succeeded for a while (a
// connection that lasted) and fails anew.
func (r *Retrier) Reset() {
	r.start, r.attempts, r.outOfTime, r.unanswered = time.Now(), 0, false, 0
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

// noSuitablePeers is JetStream's refusal to place a replicated stream or
// consumer: too few servers it counts online (JSClusterNoPeersErr).
const noSuitablePeers jetstream.ErrorCode = 10005

// PlacementPending reports a refusal to place replicas for want of peers
// online (10005, "no suitable peers for placement"). A cluster that has
// just formed answers it until every server has told the meta leader it
// is up, so a process starting with the cluster may try again; on a
// cluster that lacks the servers it stays.
func PlacementPending(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == noSuitablePeers
}
