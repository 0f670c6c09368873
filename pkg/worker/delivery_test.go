package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestAtMostOnceToolCannotAskForARetry: an at-most-once tool that returns
// worker.Retry does not run again; its call fails with outcome_unknown,
// quoting the tool's error.
func TestAtMostOnceToolCannotAskForARetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	tool := worker.Func("flaky", "Asks for another attempt.", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		return "", worker.Retry(errors.New("server away"))
	}, worker.AtMostOnce())
	testenv.Worker(t, b.url, worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{tool}})
	res := b.wait(t, b.submit(t, "t-flaky"))
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown || res.Attempt != 1 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(res.Error.Message, "server away") {
		t.Errorf("the failure %q does not quote the tool's error", res.Error.Message)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestStopEndsARunningAtMostOnceCall: a worker stopped while an
// at-most-once tool runs ends the call itself, failed with
// outcome_unknown, rather than handing it back.
func TestStopEndsARunningAtMostOnceCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	tool := worker.Func("block", "Waits until its context ends.", func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", context.Cause(ctx)
	}, worker.AtMostOnce())
	w := testenv.Worker(t, b.url, worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{tool}})
	id := b.submit(t, "t-block")
	receive(t, started, "the call to start")
	stopCtx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	res := b.wait(t, id)
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown || res.Attempt != 1 || res.Worker != w.ID() {
		t.Fatalf("result %+v", res)
	}
}

// TestServeRefusesAnUnknownDelivery: a delivery other than the two
// guarantees is a configuration error naming the field.
func TestServeRefusesAnUnknownDelivery(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{Conn: testenv.Connect(t, testenv.Server(t).URL())})
	if err != nil {
		t.Fatal(err)
	}
	tool := worker.Func("twice", "Runs twice.", func(ctx context.Context, _ struct{}) (string, error) { return "", nil },
		worker.WithDelivery("exactly_once"))
	err = w.Serve(worker.Namespace{Name: "t", Tools: []worker.Tool{tool}})
	if !errors.Is(err, worker.ErrInvalidConfig) || !strings.Contains(err.Error(), "Delivery") || !strings.Contains(err.Error(), "exactly_once") {
		t.Fatalf("Serve: %v", err)
	}
}
