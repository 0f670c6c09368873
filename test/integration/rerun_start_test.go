package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestARerunShowsAsCurrentBeforeItReports: an at-least-once call's second
// attempt shows in calls.get as the current one (its number, without the
// first attempt's progress) as soon as its tool runs, though it neither
// reports anything nor runs for the worker's StartDelay, which here is
// longer than the test.
func TestARerunShowsAsCurrentBeforeItReports(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	firstReported := make(chan struct{})
	firstMayEnd := make(chan struct{})
	secondRuns := make(chan struct{})
	secondMayEnd := make(chan struct{})
	tool := worker.Func("rerun", "Reports progress, asks for another attempt, then waits.", func(ctx context.Context, in struct{}) (string, error) {
		if worker.CallFrom(ctx).Attempt == 1 {
			worker.ReportProgress(ctx, 1, 2, "halfway on attempt 1")
			close(firstReported)
			<-firstMayEnd
			return "", worker.Retry(errors.New("try again"))
		}
		close(secondRuns)
		<-secondMayEnd
		return "done", nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{StartDelay: time.Hour},
		worker.Namespace{Name: "rr", Tools: []worker.Tool{tool}, MaxAttempts: 2})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "rr-rerun"})
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
	testenv.Eventually(t, "calls.get to show the second attempt", func() bool {
		info, err := c.Get(ctx, r.CallID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Attempt == 2 && (info.Progress != nil || info.State != messages.StateRunning) {
			t.Fatalf("attempt 2 shows as %+v", info)
		}
		return info.Attempt == 2
	})
	close(secondMayEnd)
	res, err := c.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateCompleted || res.Attempt != 2 {
		t.Fatalf("result %+v %v", res, err)
	}
}
