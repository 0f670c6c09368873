package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestCommandsStopOnSIGTERM checks docs/operations.md's "each command
// stops on SIGINT or SIGTERM" and the worker's --drain: a worker told to
// stop while a call runs past its drain hands the call back and exits
// within the drain, and another worker runs the call to its end; the
// coordinator and the indexer stop cleanly too.
func TestCommandsStopOnSIGTERM(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	coord := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", url)
	coord.WaitLine(t, "coordinator started")
	indexer := testenv.Start(t, testenv.Binary(t, "./cmd/indexer"), "--server", url)
	indexer.WaitLine(t, "indexer started")
	const drain = 300 * time.Millisecond
	first := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", url, "--demo", "--id", "leaving", "--drain", drain.String())
	first.WaitLine(t, "worker leaving ready")

	c := testenv.Client(t, url, client.Options{})
	ctx := testenv.Context(t)
	reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range c.Watch(ctx, reply.CallID) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == messages.EventStarted {
			break
		}
	}

	if err := first.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, testenv.Patience)
	defer cancel()
	if err := first.Wait(waitCtx); waitCtx.Err() != nil {
		t.Fatalf("the worker did not stop on SIGTERM: %v", err)
	} else if err != nil {
		t.Errorf("the worker stopped on SIGTERM with %v", err)
	}
	// The drain ends before the call does, so the worker hands the call
	// back instead of finishing it: the call has no result when the worker
	// is gone, and the second worker's result below is the only one. How
	// soon the process exits after the drain is not promised, and on a
	// busy machine may be later than the call's end: the order of events
	// is what is checked, not the time.
	if info, err := c.Get(ctx, reply.CallID); err != nil || info.Result != nil {
		t.Fatalf("the call when the worker with --drain %v had stopped: %+v %v, want no result", drain, info, err)
	}

	second := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", url, "--demo", "--id", "staying")
	second.WaitLine(t, "worker staying ready")
	res, err := c.Wait(ctx, reply.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted || res.Worker != "staying" {
		t.Fatalf("the handed-back call ended %+v, want completed by the second worker", res)
	}

	for name, p := range map[string]*testenv.Process{"coordinator": coord, "indexer": indexer, "worker": second} {
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, testenv.Patience)
		err := p.Wait(waitCtx)
		cancel()
		if err != nil {
			t.Errorf("the %s on SIGTERM: %v", name, err)
		}
	}
}
