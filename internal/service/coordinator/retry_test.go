package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

func TestTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no responders (transport)", fmt.Errorf("publish: %w", transport.ErrNoResponders), true},
		{"no responders (nats)", nats.ErrNoResponders, true},
		{"no response from stream", jetstream.ErrNoStreamResponse, true},
		{"no response from stream (legacy)", nats.ErrNoStreamResponse, true},
		{"nats timeout", nats.ErrTimeout, true},
		{"attempt timed out", fmt.Errorf("read: %w", context.DeadlineExceeded), true},
		{"cluster not available", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"jetstream not enabled", jetstream.ErrJetStreamNotEnabled, true},
		{"duplicate message id in process", fmt.Errorf("queue: %w", &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}), true},
		{"status 503", &transport.StatusError{Status: "503"}, true},
		{"status 408", &transport.StatusError{Status: "408"}, true},
		{"status 400", &transport.StatusError{Status: "400"}, false},
		{"wrong last sequence", transport.ErrWrongLastSequence, false},
		{"stream refusal", &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, false},
		{"not found", transport.ErrNotFound, false},
		{"cancelled", context.Canceled, false},
		{"coded", messages.Errorf(messages.CodeBadRequest, "no"), false},
		{"other", errors.New("disk on fire"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := transient(tc.err); got != tc.want {
				t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestDuplicateInProcessIsMatchedByCode(t *testing.T) {
	if !transport.DuplicateInProcess(fmt.Errorf("queue call: %w", &jetstream.APIError{ErrorCode: 10158, Description: "something else entirely"})) {
		t.Error("err_code 10158 with another text is not matched")
	}
	if transport.DuplicateInProcess(errors.New("nats: API error: code=409 err_code=10158 description=duplicate message id is in process")) {
		t.Error("the text alone is matched")
	}
}

func TestRetryTransient(t *testing.T) {
	unavailableErr := fmt.Errorf("publish: %w", transport.ErrNoResponders)
	quick := retryWithin(time.Second)
	quick.Initial, quick.Max = time.Millisecond, 4*time.Millisecond
	t.Run("retries until it succeeds", func(t *testing.T) {
		calls := 0
		err := transport.Retry(context.Background(), quick, func(context.Context) error {
			calls++
			if calls < 4 {
				return unavailableErr
			}
			return nil
		})
		if err != nil || calls != 4 {
			t.Errorf("err %v after %d attempts, want success on the 4th", err, calls)
		}
	})
	t.Run("an error that is not transient ends it", func(t *testing.T) {
		refused := &jetstream.APIError{Code: 400, ErrorCode: 10054}
		calls := 0
		err := transport.Retry(context.Background(), quick, func(context.Context) error { calls++; return refused })
		if !errors.Is(err, refused) || calls != 1 {
			t.Errorf("err %v after %d attempts, want the refusal after 1", err, calls)
		}
	})
	t.Run("stops at the bound", func(t *testing.T) {
		p := quick
		p.Within = 50 * time.Millisecond
		// Without the bound the attempts would go on until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		calls := 0
		err := transport.Retry(ctx, p, func(context.Context) error { calls++; return unavailableErr })
		if messages.CodeOf(err) != messages.CodeUnavailable || calls < 2 {
			t.Errorf("err %v after %d attempts, want unavailable after several", err, calls)
		}
		// It stops at the bound rather than going on: the slack is for a
		// busy machine's late wake-ups, not for another round of attempts.
		if waited := time.Since(start); waited > 10*time.Second {
			t.Errorf("waited %v, bound %v", waited, p.Within)
		}
	})
	t.Run("a bound of zero allows one attempt", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		calls := 0
		err := retryTransient(ctx, 0, func(context.Context) error { calls++; return unavailableErr })
		if messages.CodeOf(err) != messages.CodeUnavailable || calls != 1 {
			t.Errorf("err %v after %d attempts, want unavailable after 1", err, calls)
		}
	})
	t.Run("stops when ctx ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p := quick
		p.Within = time.Hour
		calls := 0
		err := transport.Retry(ctx, p, func(context.Context) error {
			calls++
			if calls == 3 {
				cancel()
			}
			return unavailableErr
		})
		if messages.CodeOf(err) != messages.CodeUnavailable || calls != 3 {
			t.Errorf("err %v after %d attempts, want unavailable after 3", err, calls)
		}
	})
	t.Run("each attempt is bounded", func(t *testing.T) {
		p := quick
		p.Attempt = 5 * time.Millisecond
		calls := 0
		err := transport.Retry(context.Background(), p, func(ctx context.Context) error {
			calls++
			if calls == 1 {
				<-ctx.Done() // an attempt that is never answered
				return ctx.Err()
			}
			return nil
		})
		if err != nil || calls != 2 {
			t.Errorf("err %v after %d attempts, want success on the 2nd", err, calls)
		}
	})
}
