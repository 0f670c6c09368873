package integration

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCancelAroundDeliveryNeverRunsACancelledCall cancels calls of a
// tool that does nothing at random moments around their delivery to a
// worker, which runs first deliveries without reading the call's record
// (docs/reliability.md, "Cancel before run"), 10,000 times. A call whose
// cancel answered `cancelled`, or whose result says it was cancelled
// before it started, must never have run; a call whose tool ran ran once,
// and ends completed or cancelled as its cancel's answer says.
func TestCancelAroundDeliveryNeverRunsACancelledCall(t *testing.T) {
	t.Parallel()
	calls := 10000
	if testing.Short() {
		calls = 1000
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var mu sync.Mutex
	ran := map[string]int{}
	noop := worker.Func("noop", "Does nothing.", func(ctx context.Context, in struct{}) (string, error) {
		mu.Lock()
		ran[worker.CallFrom(ctx).ID]++
		mu.Unlock()
		return "", nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "race", Slots: 64, Tools: []worker.Tool{noop}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)

	type outcome struct {
		id    string
		reply *messages.CancelReply
	}
	outcomes := make([]outcome, calls)
	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 20))
			for i := g; i < calls; i += callers {
				r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "race-noop"})
				if err != nil {
					errs <- err
					return
				}
				// At once, after a few yields, after a pause of up to half a
				// millisecond, or of up to 20 ms: before, during and after
				// delivery. The long pauses let the tool run first however
				// slow a loaded machine makes the worker, so that the race
				// has calls on both sides of it.
				switch rng.IntN(4) {
				case 1:
					for range rng.IntN(200) {
						runtime.Gosched()
					}
				case 2:
					for start, d := time.Now(), time.Duration(rng.IntN(500))*time.Microsecond; time.Since(start) < d; {
						runtime.Gosched()
					}
				case 3:
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
				reply, err := c.Cancel(ctx, r.CallID, "raced")
				if err != nil {
					errs <- err
					return
				}
				outcomes[i] = outcome{id: r.CallID, reply: reply}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	assertConsumerDrained(t, srv.URL(), "race")

	counts := map[string]int{}
	for _, o := range outcomes {
		info, err := c.Get(ctx, o.id)
		if err != nil {
			t.Fatalf("get %s: %v", o.id, err)
		}
		res := info.Result
		if res == nil {
			t.Fatalf("call %s has no result after its namespace's queue drained: %+v (cancel said %+v)", o.id, info, o.reply)
		}
		mu.Lock()
		n := ran[o.id]
		mu.Unlock()
		notStarted := res.Status == messages.StateCancelled && res.StartedAt.IsZero()
		switch {
		case n > 1:
			t.Errorf("call %s ran %d times", o.id, n)
		case n == 1 && o.reply.Outcome == messages.CancelDone:
			t.Errorf("call %s ran although its cancel answered %q (%+v)", o.id, o.reply.Outcome, res)
		case n == 1 && notStarted:
			t.Errorf("call %s ran although its result says it was cancelled before it started: %+v", o.id, res)
		case n == 0 && res.Status != messages.StateCancelled:
			t.Errorf("call %s never ran but ended %s: %+v", o.id, res.Status, res)
		case o.reply.Outcome == messages.CancelTooLate && o.reply.Result != nil && o.reply.Result.Status != res.Status:
			t.Errorf("call %s: its cancel answered %s, its result is %s", o.id, o.reply.Result.Status, res.Status)
		}
		counts[string(o.reply.Outcome)+"/"+string(res.Status)+"/"+map[bool]string{true: "ran", false: "not run"}[n > 0]]++
	}
	t.Logf("cancel's answer / final state / tool: %v", counts)
	if t.Failed() {
		return
	}
	var cancelledUnrun, runs int
	for k, n := range counts {
		// Cancelled unrun: in the queue (cancelled), or held by a worker
		// that heard its notice (cancelling).
		if strings.HasSuffix(k, "/"+string(messages.StateCancelled)+"/not run") {
			cancelledUnrun += n
		}
		if len(k) > 4 && k[len(k)-3:] == "ran" {
			runs += n
		}
	}
	if cancelledUnrun == 0 || runs == 0 {
		t.Fatalf("the cancels did not straddle delivery (%d cancelled unrun, %d run): nothing was raced", cancelledUnrun, runs)
	}
}

// workerBehindProxy starts a server, a coordinator and namespace t's only
// worker (cfg, its connection through a proxy the test can cut) with a
// counting tool, and a client that made one call of it.
func workerBehindProxy(t *testing.T, cfg worker.Config) (*natsserver.Server, *testenv.Proxy, *counter, *client.Client) {
	t.Helper()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	cnt := newCounter()
	cfg.Conn = testenv.Connect(t, proxy.URL())
	testenv.Worker(t, "", cfg, worker.Namespace{Name: "t", Tools: []worker.Tool{cnt.tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	if _, err := c.Call(testenv.Context(t), "t-count", map[string]string{"label": "before"}); err != nil {
		t.Fatal(err)
	}
	return srv, proxy, cnt, c
}

// TestCancelWhileTheWorkerIsAwayIsNotRun: a call cancelled while its
// namespace's only worker is cut off from the server (its notice is lost)
// is not run when the worker comes back and takes it: the worker's
// notices are not complete for a call queued before it confirmed its
// subscription again, so it reads the call's record first. The calls
// queued after that run as usual.
func TestCancelWhileTheWorkerIsAwayIsNotRun(t *testing.T) {
	t.Parallel()
	srv, proxy, cnt, c := workerBehindProxy(t, worker.Config{})
	ctx := testenv.Context(t)
	proxy.Cut()
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"while away"}`)})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Cancel(ctx, r.CallID, "while the worker was away")
	if err != nil || (reply.Outcome != messages.CancelDone && reply.Outcome != messages.CancelSignalled) {
		t.Fatalf("cancel: %+v %v", reply, err)
	}
	proxy.Restore()
	res, err := c.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("the cancelled call's result: %+v %v", res, err)
	}
	// The worker is back: it runs the next call, and has acknowledged the
	// cancelled one unrun.
	if _, err := c.Call(ctx, "t-count", map[string]string{"label": "after"}); err != nil {
		t.Fatal(err)
	}
	assertConsumerDrained(t, srv.URL(), "t")
	if n := cnt.runs(r.CallID); n != 0 {
		t.Fatalf("the call cancelled while the worker was away ran %d times", n)
	}
}

// TestACancelledCallWhoseDeliveryWasLostIsNotRunAgain: when the consumer
// had delivered a call and the delivery was lost (its worker's connection
// went down with it), a cancel answers cancelling and stores a cancel
// event; the worker that takes the call again after AckWait finds the
// event and does not run the call. The test takes the first delivery
// itself, and never acknowledges it, to lose it without a race.
func TestACancelledCallWhoseDeliveryWasLostIsNotRunAgain(t *testing.T) {
	t.Parallel()
	srv, proxy, cnt, c := workerBehindProxy(t, worker.Config{AckWait: time.Second})
	ctx := testenv.Context(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := names.Consumers().Durable("t")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, names.EventsStream(), consumer)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	// The server has let the worker's pulls go: the next delivery is ours.
	testenv.Eventually(t, "the worker's pull requests to end", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting == 0
	})
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"cancelled, delivery lost"}`)})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(testenv.Patience))
	if err != nil {
		t.Fatal(err)
	}
	if msg := <-batch.Messages(); msg == nil || !strings.Contains(msg.Subject(), r.CallID) {
		t.Fatalf("the first delivery: %v %v", msg, batch.Error())
	}
	reply, err := c.Cancel(ctx, r.CallID, "its delivery was lost")
	if err != nil || reply.Outcome != messages.CancelSignalled {
		t.Fatalf("cancel of a delivered call: %+v %v; want cancelling", reply, err)
	}
	proxy.Restore()
	res, err := c.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("the cancelled call's result: %+v %v", res, err)
	}
	if n := cnt.runs(r.CallID); n != 0 {
		t.Fatalf("the call cancelled after its delivery was lost ran %d times", n)
	}
}
