package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// Pauses double from Initial up to Max, each drawn between half of its
// step and all of it.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	p := transport.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second}
	for _, tc := range []struct {
		attempt int
		step    time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {40, time.Second}} {
		for range 100 {
			if d := p.Delay(tc.attempt); d < tc.step/2 || d > tc.step {
				t.Fatalf("delay after attempt %d: %v, want within [%v, %v]", tc.attempt, d, tc.step/2, tc.step)
			}
		}
	}
	if d := (transport.RetryPolicy{}).Delay(1); d < 25*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("default first delay %v", d)
	}
}

// NoJitter pauses take the whole doubled step.
func TestRetryDelayWithoutJitter(t *testing.T) {
	t.Parallel()
	p := transport.RetryPolicy{Initial: 250 * time.Millisecond, Max: time.Second, NoJitter: true}
	for attempt, want := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second} {
		if d := p.Delay(attempt + 1); d != want {
			t.Errorf("delay after attempt %d: %v, want %v", attempt+1, d, want)
		}
	}
}

// Within ends the retries before a pause would reach past it, and GaveUp
// makes the error then, from the attempts and the time waited; a failure
// that is not retryable is returned as it is.
func TestRetryWithin(t *testing.T) {
	t.Parallel()
	p := transport.RetryPolicy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Within: 50 * time.Millisecond,
		GaveUp: func(attempts int, waited time.Duration, last error) error {
			return &gaveUpError{attempts, waited, last}
		}}
	n := 0
	start := time.Now()
	err := transport.Retry(context.Background(), p, func(context.Context) error { n++; return transport.ErrNoResponders })
	var g *gaveUpError
	if !errors.As(err, &g) || g.attempts != n || n < 2 || !errors.Is(g.last, transport.ErrNoResponders) {
		t.Fatalf("%d attempts, error %v", n, err)
	}
	if g.waited > time.Since(start) || g.waited < 40*time.Millisecond {
		t.Errorf("waited %v of a bound of %v", g.waited, p.Within)
	}
	n = 0
	err = transport.Retry(context.Background(), p, func(context.Context) error { n++; return transport.ErrNotFound })
	if err != transport.ErrNotFound || n != 1 {
		t.Fatalf("%d attempts, error %v, want the refusal as it is after 1", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Within = time.Hour
	n = 0
	err = transport.Retry(ctx, p, func(context.Context) error {
		if n++; n == 3 {
			cancel()
		}
		return transport.ErrNoResponders
	})
	if !errors.As(err, &g) || g.attempts != 3 {
		t.Fatalf("%d attempts, error %v, want GaveUp's after 3", n, err)
	}
	// An attempt that the cancelled context ends fails with an error that
	// is not retryable, returned as it is, whatever failed before.
	ctx, cancel = context.WithCancel(context.Background())
	n = 0
	err = transport.Retry(ctx, p, func(ctx context.Context) error {
		if n++; n < 3 {
			return transport.ErrNoResponders
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.As(err, &g) || n != 3 {
		t.Fatalf("%d attempts, error %v, want the cancellation as it is after 3", n, err)
	}
}

type gaveUpError struct {
	attempts int
	waited   time.Duration
	last     error
}

func (e *gaveUpError) Error() string {
	return fmt.Sprintf("gave up after %d attempts: %v", e.attempts, e.last)
}

// The asynchronous form: a loop asks the Retrier after each failure; it
// stops on a lasting failure, at MaxAttempts and at Within, bounds each
// attempt by the time left, and starts over after Reset.
func TestRetrier(t *testing.T) {
	t.Parallel()
	t.Run("pauses and stops", func(t *testing.T) {
		t.Parallel()
		r := transport.RetryPolicy{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, MaxAttempts: 4, NoJitter: true}.Start()
		for _, want := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
			if pause, again := r.Failed(transport.ErrNoResponders); !again || pause != want {
				t.Fatalf("after %d failures: pause %v, again %v; want %v", r.Attempts(), pause, again, want)
			}
		}
		if _, again := r.Failed(transport.ErrNoResponders); again || r.GiveUp(transport.ErrNoResponders) != transport.ErrNoResponders {
			t.Fatalf("a fifth attempt after MaxAttempts 4")
		}
		r.Reset()
		if pause, again := r.Failed(transport.ErrNoResponders); !again || pause != 10*time.Millisecond || r.Attempts() != 1 {
			t.Fatalf("after Reset: pause %v, again %v, %d attempts", pause, again, r.Attempts())
		}
		if _, again := r.Failed(transport.ErrNotFound); again {
			t.Fatal("a lasting failure is retried")
		}
	})
	t.Run("within", func(t *testing.T) {
		t.Parallel()
		p := transport.RetryPolicy{Attempt: time.Hour, Initial: time.Hour, Max: time.Hour, Within: time.Minute,
			GaveUp: func(attempts int, _ time.Duration, last error) error {
				return fmt.Errorf("gave up after %d: %w", attempts, last)
			}}
		r := p.Start()
		if d := r.AttemptTimeout(); d > time.Minute || d < 50*time.Second {
			t.Fatalf("attempt timeout %v, want the minute left", d)
		}
		if _, again := r.Failed(transport.ErrNoResponders); again {
			t.Fatal("a pause past Within allowed")
		}
		if err := r.GiveUp(transport.ErrNoResponders); !errors.Is(err, transport.ErrNoResponders) || !strings.HasPrefix(err.Error(), "gave up after 1:") {
			t.Fatalf("GiveUp: %v", err)
		}
		if d := (transport.RetryPolicy{Within: time.Nanosecond}).Start().AttemptTimeout(); d != time.Millisecond {
			t.Fatalf("attempt timeout %v once Within passed, want 1ms", d)
		}
	})
	t.Run("an unanswered attempt doubles the next one's bound", func(t *testing.T) {
		t.Parallel()
		r := transport.RetryPolicy{Attempt: time.Second, Initial: time.Millisecond, Within: time.Hour}.Start()
		// A failure that came in time leaves the bound as it was.
		r.Failed(transport.ErrNoResponders)
		if d := r.AttemptTimeout(); d != time.Second {
			t.Fatalf("after an answered failure: attempt timeout %v, want 1s", d)
		}
		for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
			r.Failed(fmt.Errorf("publish: %w", context.DeadlineExceeded))
			if d := r.AttemptTimeout(); d > want || d < want-time.Second {
				t.Fatalf("after %d attempts: attempt timeout %v, want %v", r.Attempts(), d, want)
			}
		}
		r.Reset()
		if d := r.AttemptTimeout(); d > time.Second {
			t.Fatalf("after Reset: attempt timeout %v, want 1s", d)
		}
	})
}

// Retry gives an attempt after one cut short by its bound twice as long.
func TestRetryDoublesTheBoundOfAnAttemptAfterAnUnansweredOne(t *testing.T) {
	t.Parallel()
	var bounds []time.Duration
	err := transport.Retry(context.Background(), transport.RetryPolicy{Attempt: 20 * time.Millisecond, Initial: time.Millisecond, MaxAttempts: 4}, func(ctx context.Context) error {
		deadline, _ := ctx.Deadline()
		bounds = append(bounds, time.Until(deadline))
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || len(bounds) != 4 {
		t.Fatalf("Retry = %v after %d attempts, want deadline exceeded after 4", err, len(bounds))
	}
	for i, want := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond} {
		if bounds[i] > want || bounds[i] < want/2 {
			t.Errorf("attempt %d had %v, want about %v", i+1, bounds[i], want)
		}
	}
}

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{transport.ErrNoResponders, true},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("read: %w", jetstream.ErrNoStreamResponse), true},
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{&transport.StatusError{Status: "503"}, true},
		{&transport.StatusError{Status: "408"}, true},
		{&transport.StatusError{Status: "400"}, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{transport.ErrNotFound, false},
		{transport.ErrWrongLastSequence, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	} {
		if got := transport.Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Retry makes a transiently failed attempt again, returns a lasting
// failure at once, stops after MaxAttempts, and cuts an attempt at its
// bound whatever the caller's deadline.
func TestRetry(t *testing.T) {
	t.Parallel()
	fast := transport.RetryPolicy{Initial: time.Millisecond, Max: 4 * time.Millisecond}
	ctx := testenv.Context(t)
	t.Run("transient then success", func(t *testing.T) {
		t.Parallel()
		n := 0
		err := transport.Retry(ctx, fast, func(context.Context) error {
			if n++; n < 4 {
				return transport.ErrNoResponders
			}
			return nil
		})
		if err != nil || n != 4 {
			t.Fatalf("%d attempts, error %v", n, err)
		}
	})
	t.Run("lasting failure", func(t *testing.T) {
		t.Parallel()
		n := 0
		err := transport.Retry(ctx, fast, func(context.Context) error { n++; return transport.ErrNotFound })
		if !errors.Is(err, transport.ErrNotFound) || n != 1 {
			t.Fatalf("%d attempts, error %v", n, err)
		}
	})
	t.Run("max attempts", func(t *testing.T) {
		t.Parallel()
		n := 0
		p := fast
		p.MaxAttempts = 3
		err := transport.Retry(ctx, p, func(context.Context) error { n++; return transport.ErrNoResponders })
		if !errors.Is(err, transport.ErrNoResponders) || n != 3 {
			t.Fatalf("%d attempts, error %v", n, err)
		}
	})
	t.Run("attempt bound", func(t *testing.T) {
		t.Parallel()
		p := fast
		p.Attempt = 20 * time.Millisecond
		n := 0
		start := time.Now()
		err := transport.Retry(ctx, p, func(actx context.Context) error {
			if n++; n == 1 {
				<-actx.Done() // a request nobody answers
				return actx.Err()
			}
			return nil
		})
		if err != nil || n != 2 {
			t.Fatalf("%d attempts, error %v", n, err)
		}
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Fatalf("took %v", elapsed)
		}
	})
	t.Run("caller's deadline", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		err := transport.Retry(cctx, fast, func(context.Context) error { return transport.ErrNoResponders })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want the caller's deadline", err)
		}
		if !errors.Is(err, transport.ErrNoResponders) && err != context.DeadlineExceeded {
			t.Fatalf("error %v does not say what failed", err)
		}
	})
}

// A direct get that nobody answered (here a responder that swallows the
// first request and answers the second, standing for a replica that hangs)
// is made again after the policy's attempt bound, well before the
// caller's deadline; and a batch the same way.
func TestDirectGetRetriesAnUnansweredAttempt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	var requests atomic.Int32
	responder := testenv.Connect(t, srv.URL())
	answer := func(m *nats.Msg) {
		n := requests.Add(1)
		if n%2 == 1 {
			return
		}
		stored := nats.NewMsg(m.Reply)
		stored.Header.Set(jetstream.SequenceHeader, strconv.Itoa(int(n)))
		stored.Header.Set(jetstream.SubjectHeader, "hung.a")
		stored.Data = []byte("x")
		_ = m.RespondMsg(stored)
		if m.Subject == "$JS.API.DIRECT.GET.HUNG" { // a batch: its end
			end := nats.NewMsg(m.Reply)
			end.Header.Set("Status", "204")
			_ = m.RespondMsg(end)
		}
	}
	for _, subject := range []string{"$JS.API.DIRECT.GET.HUNG", "$JS.API.DIRECT.GET.HUNG.>"} {
		if _, err := responder.Subscribe(subject, answer); err != nil {
			t.Fatal(err)
		}
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	s := transport.NewStream(nc, nil, "HUNG").WithPolicy(transport.RetryPolicy{Attempt: 200 * time.Millisecond, Initial: time.Millisecond})
	ctx, cancel := context.WithTimeout(testenv.Context(t), 30*time.Second)
	defer cancel()
	start := time.Now()
	msg, seq, err := s.GetLast(ctx, "hung.a")
	if err != nil || seq != 2 || string(msg.Data) != "x" {
		t.Fatalf("GetLast: %v seq %d error %v", msg, seq, err)
	}
	var got []uint64
	if err := s.GetBatch(ctx, transport.BatchRequest{MultiLast: []string{"hung.>"}}, func(seq uint64, _ *nats.Msg) bool {
		got = append(got, seq)
		return true
	}); err != nil || fmt.Sprint(got) != "[4]" {
		t.Fatalf("GetBatch: %v error %v", got, err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("two reads with one unanswered attempt each took %v", elapsed)
	}
}

// TestPlacementPending: only JetStream's refusal to place replicas for
// want of peers online (10005), wrapped or not, is a placement pending.
func TestPlacementPending(t *testing.T) {
	pending := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
	if !transport.PlacementPending(pending) || !transport.PlacementPending(fmt.Errorf("stream TOOLBUS_EVENTS: %w", pending)) {
		t.Error("10005 is not taken for a placement pending")
	}
	for _, err := range []error{nil, errors.New("no suitable peers"), &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}} {
		if transport.PlacementPending(err) {
			t.Errorf("%v is taken for a placement pending", err)
		}
	}
}

// TestRetryAttemptsEndWithinTheWhole: no attempt of Retry is given more
// time than Within leaves, however its bound has doubled after attempts
// that went unanswered: the retries together end within Within.
func TestRetryAttemptsEndWithinTheWhole(t *testing.T) {
	t.Parallel()
	policy := transport.RetryPolicy{Attempt: 2 * time.Second, Initial: time.Millisecond, Max: time.Millisecond, Within: 3 * time.Second,
		Retryable: func(error) bool { return true }}
	start := time.Now()
	var deadlines []time.Time
	err := transport.Retry(context.Background(), policy, func(ctx context.Context) error {
		deadline, _ := ctx.Deadline()
		deadlines = append(deadlines, deadline)
		// Unanswered: as an attempt that waited out its bound reports,
		// without waiting.
		return context.DeadlineExceeded
	})
	if err == nil || len(deadlines) < 2 {
		t.Fatalf("Retry: %v after %d attempts", err, len(deadlines))
	}
	for i, d := range deadlines {
		if d.IsZero() || d.After(start.Add(policy.Within+time.Second)) {
			t.Errorf("attempt %d may run until %v after the start, past the whole's %v", i+1, d.Sub(start), policy.Within)
		}
	}
}
