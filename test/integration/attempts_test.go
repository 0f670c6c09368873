package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestAnotherAttemptDoesNotShowTheFirstsProgress: while a call runs again
// after an attempt that reported progress and asked for another, calls.get
// shows the running attempt without the earlier attempt's progress; when
// the attempts run out, the failure counts the attempts that ran and gives
// the cause the tool reported.
func TestAnotherAttemptDoesNotShowTheFirstsProgress(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	firstReported := make(chan struct{})
	firstMayEnd := make(chan struct{})
	secondRuns := make(chan struct{})
	secondMayEnd := make(chan struct{})
	tool := worker.Func("flaky", "Reports progress, then loses its transport.", func(ctx context.Context, in struct{}) (string, error) {
		switch worker.CallFrom(ctx).Attempt {
		case 1:
			worker.ReportProgress(ctx, 1, 2, "halfway on attempt 1")
			close(firstReported)
			<-firstMayEnd
		case 2:
			close(secondRuns)
			<-secondMayEnd
		}
		return "", worker.Retry(errors.New("transport error: transport closed"))
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{tool}, MaxAttempts: 2})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-flaky"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, firstReported, "the first attempt's progress")
	testenv.Eventually(t, "the first attempt's progress to be stored", func() bool {
		info, err := c.Get(ctx, r.CallID)
		return err == nil && info.Progress != nil && info.Attempt == 1
	})
	close(firstMayEnd)
	receive(t, secondRuns, "the second attempt")
	testenv.Eventually(t, "the second attempt's start to be stored", func() bool {
		info, err := c.Get(ctx, r.CallID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Attempt == 2 && info.Progress != nil {
			t.Fatalf("attempt 2 shows attempt 1's progress: %+v", info.Progress)
		}
		return info.Attempt == 2
	})
	close(secondMayEnd)

	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateFailed || res.Error.Code != messages.ResultAttempts || res.Attempt != 2 {
		t.Fatalf("result %+v", res)
	}
	for _, want := range []string{"delivered 2 times", "attempt 2", "transport error: transport closed"} {
		if !strings.Contains(res.Error.Message, want) {
			t.Errorf("the failure %q does not say %q", res.Error.Message, want)
		}
	}
	info, err := c.Get(ctx, r.CallID)
	if err != nil || info.Attempt != 2 {
		t.Fatalf("calls.get after the failure: %+v %v", info, err)
	}
}
