package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// awaitEvent waits until the call has an event of the kind.
func awaitEvent(t *testing.T, c *client.Client, callID string, kind messages.EventKind) {
	t.Helper()
	for ev, err := range c.Watch(testenv.Context(t), callID) {
		if err != nil {
			t.Fatalf("watch %s: %v", callID, err)
		}
		if ev.Kind == kind {
			return
		}
	}
	t.Fatalf("call %s ended without a %s event", callID, kind)
}

// collect watches a call to its result and returns every event.
func collect(t *testing.T, c *client.Client, callID string) []*messages.CallEvent {
	t.Helper()
	var evs []*messages.CallEvent
	for ev, err := range c.Watch(testenv.Context(t), callID) {
		if err != nil {
			t.Fatalf("watch %s: %v", callID, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestProgressReplaysAndFollows(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{ProgressInterval: time.Millisecond}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.5}`)})
	if err != nil {
		t.Fatal(err)
	}
	live := collect(t, c, r.CallID)
	replay := collect(t, c, r.CallID)
	if len(live) != len(replay) {
		t.Fatalf("live watch saw %d events, replay %d", len(live), len(replay))
	}
	var last float64 = -1
	var progress int
	for i, ev := range replay {
		if ev.Kind != live[i].Kind || !ev.Time.Equal(live[i].Time) {
			t.Fatalf("event %d differs: live %v, replay %v", i, live[i].Kind, ev.Kind)
		}
		if ev.Kind == messages.EventProgress {
			progress++
			if ev.Progress.Progress < last {
				t.Fatalf("progress went back from %v to %v", last, ev.Progress.Progress)
			}
			last = ev.Progress.Progress
		}
	}
	if replay[0].Kind != messages.EventQueued || replay[len(replay)-1].Kind != messages.EventResult {
		t.Fatalf("events start with %s and end with %s", replay[0].Kind, replay[len(replay)-1].Kind)
	}
	if progress < 2 || last != 10 {
		t.Fatalf("%d progress events, last %v; want several, ending at 10 of 10", progress, last)
	}
	if res := replay[len(replay)-1].Result; res.Status != messages.StateCompleted {
		t.Fatalf("result %+v", res)
	}
}

func TestCancelBeforeAWorkerTakesIt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	cnt := newCounter()
	ns := worker.Namespace{Name: "t", Tools: []worker.Tool{cnt.tool()}}
	first := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	if err := first.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"never"}`)})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Cancel(ctx, r.CallID, "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != messages.CancelDone || reply.Result == nil || reply.Result.Status != messages.StateCancelled {
		t.Fatalf("cancel reply %+v", reply)
	}
	info, err := c.Get(ctx, r.CallID)
	if err != nil || info.State != messages.StateCancelled || info.Result.Error.Code != messages.ResultCancelled {
		t.Fatalf("after cancel: %+v %v", info, err)
	}
	// The cancelled call stays in its namespace's queue, with its result.
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_t")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(ctx); err != nil || info.NumPending != 1 {
		t.Fatalf("the namespace's queue: %+v (%v), want the cancelled call in it", info, err)
	}
	// A worker that starts now runs the next call, never the cancelled
	// one: it finds its result, and acknowledges it.
	testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	if _, err := c.Call(ctx, "t-count", map[string]string{"label": "next"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the cancelled call to be acknowledged unrun", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Consumer == 2
	})
	if n := cnt.runs(r.CallID); n != 0 {
		t.Fatalf("cancelled call ran %d times", n)
	}
	// A second cancel says it is over.
	again, err := c.Cancel(ctx, r.CallID, "")
	if err != nil || again.Outcome != messages.CancelTooLate || again.State != messages.StateCancelled {
		t.Fatalf("second cancel %+v %v", again, err)
	}
}

func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	w := testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, g.started, "the call to start")
	// The tool may start before its start is stored; until then a cancel
	// treats the call as queued.
	awaitEvent(t, c, r.CallID, messages.EventStarted)
	reply, err := c.Cancel(ctx, r.CallID, "user pressed stop")
	if err != nil || reply.Outcome != messages.CancelSignalled {
		t.Fatalf("cancel: %+v %v", reply, err)
	}
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCancelled || res.Worker != w.ID() || res.Error == nil || res.Error.Code != messages.ResultCancelled {
		t.Fatalf("result %+v", res)
	}
	info, err := c.Get(ctx, r.CallID)
	if err != nil || !info.CancelRequested || info.State != messages.StateCancelled {
		t.Fatalf("info %+v %v", info, err)
	}
}

func TestCancelAfterItFinished(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"done"}`), Wait: true})
	if err != nil || r.Result == nil {
		t.Fatalf("%+v %v", r, err)
	}
	reply, err := c.Cancel(ctx, r.CallID, "too late")
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != messages.CancelTooLate || reply.State != messages.StateCompleted || reply.Result.Content[0].Text != "done" {
		t.Fatalf("cancel reply %+v", reply)
	}
	if _, err := c.Cancel(ctx, "nosuchcall", ""); !errors.Is(err, messages.ErrCallNotFound) {
		t.Fatalf("cancel of an unknown call: %v", err)
	}
}

// TestCancelReachesADisconnectedWorker: the signal is lost while the
// worker is off the network; the durable cancel record is not.
func TestCancelReachesADisconnectedWorker(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	g := newGate()
	testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, proxy.URL())}, worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, g.started, "the call to start")
	awaitEvent(t, c, r.CallID, messages.EventStarted)
	proxy.Cut()
	reply, err := c.Cancel(ctx, r.CallID, "while you were away")
	if err != nil || reply.Outcome != messages.CancelSignalled {
		t.Fatalf("cancel: %+v %v", reply, err)
	}
	proxy.Restore()
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCancelled || res.Attempt != 1 {
		t.Fatalf("result %+v", res)
	}
}

// stubbornDeadline is the deadline of a call whose tool ignores it: long
// enough for a busy machine's worker to start the tool first.
const stubbornDeadline = 10 * time.Second

func TestDeadlineEndsACallWhoseToolIgnoresIt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	returned := make(chan struct{})
	stubborn := worker.Func("stubborn", "Ignores its context.", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		<-release
		close(returned)
		return "too late", nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{stubborn}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	// The deadline leaves the worker time to start the tool on a busy
	// machine: a call that expired before it started would not test the
	// tool that ignores it.
	res, err := c.Call(ctx, "t-stubborn", nil, client.WithTimeout(stubbornDeadline))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateTimedOut || res.Error.Code != messages.ResultTimedOut || !res.IsError {
		t.Fatalf("result %+v", res)
	}
	receive(t, started, "the tool to have started before the deadline")
	select {
	case <-returned:
		t.Fatal("the result came only after the tool returned")
	default:
	}
	close(release)
	receive(t, returned, "the tool to return")
	// The late return changes nothing.
	info, err := c.Get(ctx, res.CallID)
	if err != nil || info.Result.Status != messages.StateTimedOut {
		t.Fatalf("after the tool returned: %+v %v", info, err)
	}
}

// TestStopGivesUpOnAToolThatIgnoresItsContext: a tool that outlived its
// call holds its slot, but a Stop whose context ends does not wait for it.
func TestStopGivesUpOnAToolThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	stubborn := worker.Func("stubborn", "Ignores its context.", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		<-release
		return "too late", nil
	})
	defer close(release)
	w := testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{stubborn}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "t-stubborn", nil, client.WithTimeout(stubbornDeadline))
	if err != nil || res.Status != messages.StateTimedOut {
		t.Fatalf("result %+v %v", res, err)
	}
	receive(t, started, "the tool to have started before the deadline")
	stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("Stop waits for a tool that ignores its context")
	}
}

func TestToolDeadlineCapsTheCallers(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{
		worker.Func("sleep", "Sleeps.", demo.Sleep, worker.WithTimeout(200*time.Millisecond)),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	res, err := c.Call(testenv.Context(t), "t-sleep", map[string]float64{"seconds": 30}, client.WithTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateTimedOut {
		t.Fatalf("result %+v", res)
	}
}

func TestRetriesEndInAFailureThatSaysWhy(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var mu sync.Mutex
	var attempts []int
	flaky := worker.Func("flaky", "Always asks for another attempt.", func(ctx context.Context, in struct{}) (string, error) {
		mu.Lock()
		attempts = append(attempts, worker.CallFrom(ctx).Attempt)
		mu.Unlock()
		return "", worker.Retry(errors.New("upstream unavailable"))
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{flaky}, MaxAttempts: 2})
	c := testenv.Client(t, srv.URL(), client.Options{})
	res, err := c.Call(testenv.Context(t), "t-flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two attempts ran; the failure gives the cause the tool reported on the last.
	if res.Status != messages.StateFailed || res.Error.Code != messages.ResultAttempts || res.Attempt != 2 ||
		!strings.Contains(res.Error.Message, "delivered 2 times") || !strings.Contains(res.Error.Message, "attempt 2 asked for another because: upstream unavailable") {
		t.Fatalf("result %+v (error %+v)", res, res.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("tool ran on attempts %v, want [1 2]", attempts)
	}
}

// TestLostDeliveriesEndInAFailure: every delivery of a call is taken by a
// worker that never answers (here: pulled by hand and left unacknowledged);
// the coordinator fails the call when JetStream gives up.
func TestLostDeliveriesEndInAFailure(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	w := testenv.Worker(t, srv.URL(), worker.Config{AckWait: 300 * time.Millisecond}, worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}, MaxAttempts: 1})
	ctx := testenv.Context(t)
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{})
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience)); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	// A waiting pull lets JetStream try a third delivery, which it refuses and reports.
	go func() { _, _ = cons.Next(jetstream.FetchMaxWait(testenv.Patience)) }()
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateFailed || res.Error.Code != messages.ResultAttempts {
		t.Fatalf("result %+v", res)
	}
}

// TestStaleWorkerCannotOverwriteTheResult: a worker cut off the network
// loses its lease; another worker runs the call again and commits; the
// first worker's late result is discarded.
func TestStaleWorkerCannotOverwriteTheResult(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	stale := newGate()
	staleWorker := testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, proxy.URL()), AckWait: liveLeaseAckWait},
		worker.Namespace{Name: "t", Tools: []worker.Tool{stale.tool()}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, stale.started, "the first attempt to start")
	proxy.Cut()
	fresh := newGate()
	close(fresh.release)
	freshWorker := testenv.Worker(t, srv.URL(), worker.Config{AckWait: liveLeaseAckWait}, worker.Namespace{Name: "t", Tools: []worker.Tool{fresh.tool()}, Slots: 1})
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Worker != freshWorker.ID() || res.Attempt != 2 || res.Status != messages.StateCompleted {
		t.Fatalf("result %+v", res)
	}
	if err := freshWorker.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	close(stale.release)
	// The stale worker has one slot: once it runs the next call, it has
	// finished the first one, result write included.
	next, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, next.CallID); err != nil || res.Worker != staleWorker.ID() {
		t.Fatalf("next call: %+v %v", res, err)
	}
	info, err := c.Get(ctx, r.CallID)
	if err != nil || info.Result.Worker != freshWorker.ID() || info.Result.Attempt != 2 {
		t.Fatalf("the stale worker replaced the result: %+v %v", info.Result, err)
	}
}

// TestCommittedCallIsNotRunAgain: an attempt that committed its result and
// was cut off before acknowledging the message leaves a call that is
// delivered again; the next worker acknowledges it without running the tool.
func TestCommittedCallIsNotRunAgain(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	first := newGate()
	testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, proxy.URL()), AckWait: liveLeaseAckWait},
		worker.Namespace{Name: "t", Tools: []worker.Tool{first.tool()}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, first.started, "the first attempt to start")
	proxy.Cut()
	// The first attempt's commit, written as that worker would have just before it was cut off.
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(nc, js, messages.MustNames(""))
	committed := messages.CallResult{CallID: r.CallID, Tool: "t-gate", Status: messages.StateCompleted, Attempt: 1, Worker: "first",
		Content: []messages.ContentBlock{messages.TextBlock("done before the cut")}, FinishedAt: time.Now().UTC()}
	if won, err := l.Commit(ctx, messages.TurnBucket(""), "t", &committed, ""); err != nil || !won {
		t.Fatalf("commit: %v %v", won, err)
	}
	second := newGate()
	close(second.release)
	testenv.Worker(t, srv.URL(), worker.Config{AckWait: liveLeaseAckWait}, worker.Namespace{Name: "t", Tools: []worker.Tool{second.tool()}, Slots: 1})
	// The second worker acknowledges the message once it has decided not to run it.
	consumer, err := js.Consumer(ctx, "TOOLBUS_EVENTS", "ns_t")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the redelivered call to be acknowledged", func() bool {
		info, err := consumer.Info(ctx)
		return err == nil && info.NumRedelivered == 0 && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= 2
	})
	select {
	case id := <-second.started:
		t.Fatalf("the tool ran again for %s", id)
	default:
	}
	if res, err := c.Wait(ctx, r.CallID); err != nil || res.Worker != "first" {
		t.Fatalf("result %+v %v", res, err)
	}
	proxy.Restore() // so that the first worker stops at once
	close(first.release)
}

// TestManyConcurrentCallsCompleteExactlyOnce runs 1,000 sleeping calls
// with progress at once; each caller sees one result, and each tool ran
// once. A sample of the calls is also watched event by event.
func TestManyConcurrentCallsCompleteExactlyOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var mu sync.Mutex
	runs := map[string]int{}
	sleepy := worker.Func("sleep", "Sleeps with progress.", func(ctx context.Context, in demo.SleepArgs) (string, error) {
		mu.Lock()
		runs[worker.CallFrom(ctx).ID]++
		mu.Unlock()
		return demo.Sleep(ctx, in)
	})
	ns := worker.Namespace{Name: "t", Tools: []worker.Tool{sleepy}, Slots: 300}
	testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	const n, watched = 1000, 50
	clients := make([]*client.Client, 8)
	for i := range clients {
		clients[i] = testenv.Client(t, srv.URL(), client.Options{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type outcome struct {
		id       string
		results  int
		progress int
		err      error
	}
	out := make(chan outcome, n)
	for i := range n {
		go func() {
			c := clients[i%len(clients)]
			if i >= watched {
				res, err := c.Call(ctx, "t-sleep", messages.JSON(`{"seconds":0.3}`))
				if err == nil && res.Status != messages.StateCompleted {
					err = fmt.Errorf("result %+v", res)
				}
				out <- outcome{id: fmt.Sprint(i), results: 1, progress: 1, err: err}
				return
			}
			r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-sleep", Arguments: messages.JSON(`{"seconds":0.3}`)})
			if err != nil {
				out <- outcome{err: err}
				return
			}
			o := outcome{id: r.CallID}
			for ev, err := range c.Watch(ctx, r.CallID) {
				if err != nil {
					o.err = err
					break
				}
				switch ev.Kind {
				case messages.EventResult:
					o.results++
					if ev.Result.Status != messages.StateCompleted {
						o.err = fmt.Errorf("result %+v", ev.Result)
					}
				case messages.EventProgress:
					o.progress++
				}
			}
			out <- o
		}()
	}
	for range n {
		o := <-out
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.results != 1 || o.progress == 0 {
			t.Fatalf("call %s: %d results, %d progress events", o.id, o.results, o.progress)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Fatalf("%d calls ran, want %d", len(runs), n)
	}
	for id, k := range runs {
		if k != 1 {
			t.Fatalf("call %s ran %d times", id, k)
		}
	}
}

// TestLargeResultIsCutAndKeptWhole: a result over the tool's size limit
// reaches the caller cut to the limit, and the whole of it can be read back.
func TestLargeResultIsCutAndKeptWhole(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	big := strings.Repeat("0123456789", 300_000) // 3 MB, beyond any message
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{
		worker.Func("big", "Returns a lot.", func(ctx context.Context, in struct{}) (string, error) { return big, nil }, worker.WithMaxResultSize(4096)),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "t-big", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted || !res.Truncated || res.FullResult == nil || messages.ContentSize(res) > 4096 {
		t.Fatalf("result: status %s truncated %v ref %+v size %d", res.Status, res.Truncated, res.FullResult, messages.ContentSize(res))
	}
	if text := res.Content[0].Text; !strings.HasPrefix(text, "0123456789") || !strings.HasSuffix(text, "0123456789") || !strings.Contains(text, "bytes cut") {
		t.Fatalf("cut text %q…", text[:100])
	}
	whole, err := c.FullResult(ctx, res.FullResult)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Content[0].Text != big {
		t.Fatalf("the whole result has %d bytes, want %d", len(whole.Content[0].Text), len(big))
	}
}

// A call queued for a namespace whose workers are all gone waits in the
// namespace's consumer; once its deadline has passed by the grace, the
// sweep ends it as timed out, and a worker that comes back later
// acknowledges it without running it.
func TestSweepEndsACallNoWorkerTook(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.SweepInterval = 100 * time.Millisecond
		cfg.SweepGrace = time.Millisecond
	})
	cnt := newCounter()
	ns := worker.Namespace{Name: "t", Tools: []worker.Tool{cnt.tool()}}
	first := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	if err := first.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"late"}`), TimeoutMS: 300})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateTimedOut || res.Error == nil || res.Error.Code != messages.ResultTimedOut {
		t.Fatalf("result %+v, want timed out by the sweep", res)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_t")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the swept call to be acknowledged unrun", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Consumer >= 1
	})
	if n := cnt.runs(r.CallID); n != 0 {
		t.Fatalf("the swept call ran %d times", n)
	}
}

// TestACallNoWorkerTookSaysNoneServesItsNamespace: a call of a tool whose
// namespace lost its last worker is queued (the coordinator does not
// refuse it without FailWhenUnavailable) and ended by the sweep at its
// deadline, with a message that names the likeliest cause.
func TestACallNoWorkerTookSaysNoneServesItsNamespace(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.SweepInterval, cfg.SweepGrace = 50*time.Millisecond, time.Millisecond
	})
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in struct{}) (string, error) { return "", nil })
	w := testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "gone", Tools: []worker.Tool{echo}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	if _, err := c.Call(ctx, "gone-echo", nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(ctx, "gone-echo", nil, client.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateTimedOut || !strings.Contains(res.Error.Message, "no live worker serves namespace gone") {
		t.Fatalf("a call no worker took: %+v", res)
	}
}
