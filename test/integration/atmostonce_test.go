package integration

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// effectTool is a tool with an effect: each run counts, in a counter that
// the workers of a test share, and waits until released.
type effectTool struct {
	runs    *atomic.Int32
	started chan string
	release chan struct{}
}

func newEffectTool(runs *atomic.Int32) *effectTool {
	return &effectTool{runs: runs, started: make(chan string, 10), release: make(chan struct{})}
}

func (e *effectTool) tool(opts ...worker.ToolOption) worker.Tool {
	return worker.Func("effect", "Has an effect each time it runs.", func(ctx context.Context, in struct{}) (string, error) {
		e.runs.Add(1)
		e.started <- worker.CallFrom(ctx).ID
		select {
		case <-e.release:
			return "done", nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}, opts...)
}

// runWhoseWorkerDies runs a call of t-effect, made with opts, on a worker
// that is cut off the network while the tool runs (it stops without
// acknowledging anything), then starts a second worker of the namespace,
// and returns the call's result, the number of runs of the tool when the
// result was there, and the tool's definition as tools.list shows it.
func runWhoseWorkerDies(t *testing.T, opts ...worker.ToolOption) (*messages.CallResult, int32, *messages.ToolEntry) {
	t.Helper()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	var runs atomic.Int32
	first := newEffectTool(&runs)
	testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, proxy.URL()), AckWait: liveLeaseAckWait},
		worker.Namespace{Name: "t", Tools: []worker.Tool{first.tool(opts...)}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	list, err := c.ListTools(ctx, messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list.Tools, func(e messages.ToolEntry) bool { return e.Name == "t-effect" })
	if i < 0 {
		t.Fatal("tools.list does not list t-effect")
	}
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-effect"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, first.started, "the first attempt to start")
	proxy.Cut()
	t.Cleanup(func() {
		// The first worker comes back and its tool ends: its result, if
		// it has one, is refused, as the call has one already.
		proxy.Restore()
		close(first.release)
	})
	second := newEffectTool(&runs)
	close(second.release)
	testenv.Worker(t, srv.URL(), worker.Config{AckWait: liveLeaseAckWait},
		worker.Namespace{Name: "t", Tools: []worker.Tool{second.tool(opts...)}, Slots: 1})
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	return res, runs.Load(), &list.Tools[i]
}

// TestAtMostOnceCallIsNotRunAgainWhenItsWorkerDies: a worker killed while
// an at-most-once tool runs leaves the call to the next delivery, which
// finds the call's start and no result: the call fails with
// outcome_unknown and the tool has run once.
func TestAtMostOnceCallIsNotRunAgainWhenItsWorkerDies(t *testing.T) {
	t.Parallel()
	res, runs, def := runWhoseWorkerDies(t, worker.AtMostOnce())
	if def.Delivery != messages.DeliveryAtMostOnce {
		t.Errorf("tools.list shows delivery %q", def.Delivery)
	}
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown {
		t.Fatalf("result %+v", res)
	}
	if !strings.HasPrefix(res.Error.Message, messages.OutcomeUnknownMessage) || res.Attempt != 1 {
		t.Errorf("the failure says %q, attempt %d; want the documented message and the attempt that started the tool", res.Error.Message, res.Attempt)
	}
	if runs != 1 {
		t.Fatalf("the tool ran %d times", runs)
	}
}

// TestAtLeastOnceCallRunsAgainWhenItsWorkerDies: the same with a tool that
// is at least once (the default of a tool not tagged destructive): the
// next delivery runs the tool again and completes the call.
func TestAtLeastOnceCallRunsAgainWhenItsWorkerDies(t *testing.T) {
	t.Parallel()
	res, runs, def := runWhoseWorkerDies(t)
	if def.Delivery != messages.DeliveryAtLeastOnce {
		t.Errorf("tools.list shows delivery %q", def.Delivery)
	}
	if res.Status != messages.StateCompleted || res.IsError || res.Attempt != 2 {
		t.Fatalf("result %+v", res)
	}
	if runs != 2 {
		t.Fatalf("the tool ran %d times", runs)
	}
}

// TestDestructiveToolIsAtMostOnceByDefault: a tool tagged destructive that
// chooses no delivery is at most once.
func TestDestructiveToolIsAtMostOnceByDefault(t *testing.T) {
	t.Parallel()
	res, runs, def := runWhoseWorkerDies(t, worker.WithTags(messages.TagDestructive))
	if def.Delivery != messages.DeliveryAtMostOnce {
		t.Errorf("tools.list shows delivery %q", def.Delivery)
	}
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown || runs != 1 {
		t.Fatalf("result %+v after %d runs", res, runs)
	}
}
