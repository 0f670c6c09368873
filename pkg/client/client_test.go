package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestMain checks that the client, and the stack each test starts for it,
// leave no goroutine behind.
func TestMain(m *testing.M) {
	leaks.Main(m)
}

// bundle is one test's Toolbus: an embedded server, and the tools of
// namespace "t" that a worker serves once serve is called.
type bundle struct {
	srv *natsserver.Server
	ctx context.Context

	mu    sync.Mutex
	runs  map[string]int // runs of t-count by call ID
	steps chan struct{}  // lets t-steps take its next step
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{srv: testenv.Server(t), ctx: testenv.Context(t), runs: map[string]int{}, steps: make(chan struct{})}
}

type labelArgs struct {
	Label string `json:"label"`
}

// serve starts a worker of namespace "t": t-count counts its runs and
// answers its label; t-steps logs "step 1" to "step 3", each once the
// test sends on steps, and answers "done".
func (b *bundle) serve(t *testing.T) {
	t.Helper()
	count := worker.Func("count", "Counts its runs.", func(ctx context.Context, in labelArgs) (string, error) {
		b.mu.Lock()
		b.runs[worker.CallFrom(ctx).ID]++
		b.mu.Unlock()
		return in.Label, nil
	})
	steps := worker.Func("steps", "Takes three steps.", func(ctx context.Context, in struct{}) (string, error) {
		for i := 1; i <= 3; i++ {
			select {
			case <-b.steps:
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
			worker.Log(ctx, "info", fmt.Sprintf("step %d", i))
		}
		return "done", nil
	})
	testenv.Worker(t, b.srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{count, steps}})
}

func (b *bundle) runsOf(callID string) (of, all int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.runs {
		all += n
	}
	return b.runs[callID], all
}

// newClient returns a client on conn, closed when the test ends.
func newClient(t *testing.T, nc *nats.Conn, opts client.Options) *client.Client {
	t.Helper()
	if opts.Agent == "" {
		opts.Agent = "a"
	}
	c, err := client.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// withoutDeadline is the test's context without its deadline, so that the
// client's RequestTimeout bounds each request.
func withoutDeadline(t *testing.T, ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t.Cleanup(func() { stop(); cancel() })
	return ctx
}

func receive[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// With no coordinator, nothing received the request: every request fails
// with the code no_responders, which says so, and not with text to parse.
func TestNoCoordinatorIsNoResponders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A submit that names its call is sent again while no coordinator
	// listens, for NoCoordinatorWait, before it reports none.
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{NoCoordinatorWait: 300 * time.Millisecond})
	_, err := c.Submit(b.ctx, messages.SubmitRequest{Tool: "t-count"})
	if !errors.Is(err, messages.ErrNoResponders) {
		t.Fatalf("Submit: %v, want %s", err, messages.CodeNoResponders)
	}
	if _, err := c.Get(b.ctx, "c1"); !errors.Is(err, messages.ErrNoResponders) {
		t.Fatalf("Get: %v, want %s", err, messages.CodeNoResponders)
	}
	// Call sends its quiet submit again for NoCoordinatorWait, then reports the same,
	// naming the subject no one answered: the submit's, not the route's.
	if _, err := c.Call(b.ctx, "t-count", labelArgs{"x"}); !errors.Is(err, messages.ErrNoResponders) || !strings.Contains(err.Error(), "toolbus.api.calls.submit") {
		t.Fatalf("Call: %v, want %s naming toolbus.api.calls.submit", err, messages.CodeNoResponders)
	}
	if _, err := c.Call(b.ctx, "t-count", labelArgs{"x"}, client.WithIdempotencyKey("k")); !errors.Is(err, messages.ErrNoResponders) {
		t.Fatalf("idempotent Call: %v, want %s", err, messages.CodeNoResponders)
	}
}

// A failed reply's code is the one its body carries: each kind of "not
// found" keeps its own code.
func TestNotFoundKeepsItsCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	if _, err := c.Get(b.ctx, "nosuchcall"); !errors.Is(err, messages.ErrCallNotFound) || errors.Is(err, messages.ErrToolNotFound) {
		t.Fatalf("Get of an unknown call: %v, want %s", err, messages.CodeCallNotFound)
	}
	if _, err := c.Turn(b.ctx, "nosuchturn"); !errors.Is(err, messages.ErrTurnNotFound) {
		t.Fatalf("Turn of an unknown turn: %v, want %s", err, messages.CodeTurnNotFound)
	}
	if _, err := c.Call(b.ctx, "t-nosuchtool", nil); !errors.Is(err, messages.ErrToolNotFound) {
		t.Fatalf("Call of an unknown tool: %v, want %s", err, messages.CodeToolNotFound)
	}
}

// A 404 that carries no code of its own (here from a responder that is not
// a coordinator) is not taken for tool_not_found.
func TestStatusWithoutCodeIsNotToolNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	responder := testenv.Connect(t, b.srv.URL())
	if _, err := responder.Subscribe("toolbus.api.calls.get", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Nats-Service-Error-Code", "404")
		reply.Header.Set("Nats-Service-Error", "not found")
		_ = m.RespondMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	_, err := c.Get(b.ctx, "c1")
	if messages.CodeOf(err) != messages.CodeInternal {
		t.Fatalf("a 404 without a code: %v, want %s", err, messages.CodeInternal)
	}
}

// A submit whose reply is lost (here the first goes to a subscriber that
// is not a coordinator; it hands the submit to the coordinator once one
// runs and drops the answer) is sent again by an idempotent Call, and the
// tool runs once for the two submits.
func TestIdempotentCallRetriesALostSubmitAndRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t)
	hole := testenv.Connect(t, b.srv.URL())
	swallowed := make(chan *nats.Msg, 1)
	sub, err := hole.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		select {
		case swallowed <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{RequestTimeout: 500 * time.Millisecond})
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(withoutDeadline(t, b.ctx), "t-count", labelArgs{"once"}, client.WithIdempotencyKey("order-1"))
		done <- outcome{res, err}
	}()
	lost := receive(t, b.ctx, swallowed, "submit")
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, b.srv.URL())
	// The coordinator handles the lost submit too; its answer goes
	// elsewhere. (Which of it and the client's own copies comes first is
	// the race this test is about; the coordinator may leave the later
	// ones to the first one's answer, so nothing waits for this one's.)
	again := nats.NewMsg(lost.Subject)
	again.Header, again.Data, again.Reply = lost.Header, lost.Data, hole.NewRespInbox()
	if err := hole.PublishMsg(again); err != nil {
		t.Fatal(err)
	}
	o := receive(t, b.ctx, done, "result")
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.IsError || o.res.Content[0].Text != "once" {
		t.Fatalf("result %+v, want the echo", o.res)
	}
	if of, all := b.runsOf(o.res.CallID); of != 1 || all != 1 {
		t.Fatalf("the tool ran %d times for the call, %d in all; want once", of, all)
	}
}

// Calls with one idempotency key, one after the other and at once, are one
// call: one run, one result for all.
func TestIdempotentCallsRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	first, err := c.Call(b.ctx, "t-count", labelArgs{"x"}, client.WithIdempotencyKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	results := make(chan *messages.CallResult, callers)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			res, err := c.Call(b.ctx, "t-count", labelArgs{"x"}, client.WithIdempotencyKey("k1"))
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	for range callers {
		select {
		case res := <-results:
			if res.CallID != first.CallID || res.Content[0].Text != "x" {
				t.Fatalf("result %+v, want that of call %s", res, first.CallID)
			}
		case err := <-errs:
			t.Fatal(err)
		case <-b.ctx.Done():
			t.Fatal("no result")
		}
	}
	if of, all := b.runsOf(first.CallID); of != 1 || all != 1 {
		t.Fatalf("the tool ran %d times for the call, %d in all; want once", of, all)
	}
}

// With wait, the coordinator answers once the call has ended, so the copy
// of the result reaches the client before the submit's reply does: Call
// returns the result once, and a next call is not confused by the late reply.
func TestResultBeforeTheSubmitsReply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	wait := func(r *messages.SubmitRequest) { r.Wait = true }
	for i := range 3 {
		label := fmt.Sprintf("w%d", i)
		res, err := c.Call(b.ctx, "t-count", labelArgs{label}, client.WithIdempotencyKey(label), wait)
		if err != nil {
			t.Fatal(err)
		}
		if res.Content[0].Text != label {
			t.Fatalf("call %d: result %+v", i, res)
		}
	}
}

// On a route, the stored result can come before the coordinator's answer
// to the submit (here an answer held back until the result is stored and
// then delivered on the call's route): Call returns the result, and the
// late answer disturbs neither it nor the client's next call.
func TestRoutedResultBeforeTheSubmitsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t)
	relay := testenv.Connect(t, b.srv.URL())
	held := make(chan *nats.Msg, 1)
	sub, err := relay.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		select {
		case held <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(b.ctx, "t-count", labelArgs{"routed"})
		done <- outcome{res, err}
	}()
	m := receive(t, b.ctx, held, "submit")
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, b.srv.URL())
	// The submit, made loud, goes to the coordinator; its answer is held.
	var req messages.SubmitRequest
	codec, err := messages.Decode(messages.Header(m.Header), m.Data, &req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Route == "" || !req.Quiet {
		t.Fatalf("Call's submit is not a quiet one on a route: %+v", req)
	}
	req.Quiet = false
	data, err := codec.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := relay.RequestMsgWithContext(b.ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	o := receive(t, b.ctx, done, "result")
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.CallID != req.CallID || o.res.Content[0].Text != "routed" {
		t.Fatalf("result %+v, want the echo of call %s", o.res, req.CallID)
	}
	// The answer arrives late, on the call's route.
	answer.Subject, answer.Reply = m.Reply, ""
	if err := relay.PublishMsg(answer); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	next, err := c.Call(b.ctx, "t-count", labelArgs{"next"})
	if err != nil || next.Content[0].Text != "next" || next.CallID == req.CallID {
		t.Fatalf("the next call: %+v %v", next, err)
	}
	if of, _ := b.runsOf(req.CallID); of != 1 {
		t.Fatalf("the tool ran %d times for the call; want once", of)
	}
}

// connectVia connects through the proxy, reporting when the connection
// drops and when it is back.
func connectVia(t *testing.T, p *testenv.Proxy) (nc *nats.Conn, dropped, back <-chan struct{}) {
	d, r := make(chan struct{}, 8), make(chan struct{}, 8)
	nc = testenv.Connect(t, p.URL(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { d <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { r <- struct{}{} }))
	return nc, d, r
}

// A watch goes on after the client's connection drops and comes back:
// the events stored meanwhile follow, each once, up to the result.
func TestWatchGoesOnAfterAReconnect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	direct := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	proxy := testenv.NewProxy(t, b.srv.Addr().String())
	nc, dropped, back := connectVia(t, proxy)
	c := newClient(t, nc, client.Options{})

	sub, err := c.Submit(b.ctx, messages.SubmitRequest{Tool: "t-steps"})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan *messages.CallEvent, 64)
	watchErr := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range c.Watch(b.ctx, sub.CallID) {
			if err != nil {
				watchErr <- err
				return
			}
			events <- ev
		}
	}()
	var seen []string
	next := func() *messages.CallEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended after %v: %v", seen, <-watchErr)
			}
			name := string(ev.Kind)
			if ev.Log != nil {
				name += " " + ev.Log.Message
			}
			seen = append(seen, name)
			return ev
		case <-b.ctx.Done():
			t.Fatalf("the watch stopped after %v", seen)
		}
		return nil
	}
	b.steps <- struct{}{}
	for ev := next(); ev.Log == nil; ev = next() {
	}
	proxy.Cut()
	receive(t, b.ctx, dropped, "disconnection")
	b.steps <- struct{}{}
	b.steps <- struct{}{}
	if _, err := direct.Wait(b.ctx, sub.CallID); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	receive(t, b.ctx, back, "reconnection")
	for ev := next(); ev.Kind != messages.EventResult; ev = next() {
	}
	want := []string{"queued", "started", "log step 1", "log step 2", "log step 3", "result"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the watch yielded %v, want %v", seen, want)
	}
	if _, ok := <-events; ok {
		t.Fatal("the watch went on after the result")
	}
}

// A call's routed result published while the client was disconnected is
// not lost: Call finds it in the events stream once the connection is back.
func TestCallGetsAResultMissedDuringADisconnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	direct := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	proxy := testenv.NewProxy(t, b.srv.Addr().String())
	nc, dropped, back := connectVia(t, proxy)
	c := newClient(t, nc, client.Options{})
	// Follow the call's start from outside, to know its ID.
	observer := testenv.Connect(t, b.srv.URL())
	started := make(chan string, 1)
	if _, err := observer.Subscribe("toolbus.events.*.*.queued.*.*", func(m *nats.Msg) {
		var ev messages.CallEvent
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &ev); err == nil {
			started <- ev.CallID
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := observer.Flush(); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(b.ctx, "t-steps", nil)
		done <- outcome{res, err}
	}()
	callID := receive(t, b.ctx, started, "queued call")
	proxy.Cut()
	receive(t, b.ctx, dropped, "disconnection")
	for range 3 {
		b.steps <- struct{}{}
	}
	if _, err := direct.Wait(b.ctx, callID); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	receive(t, b.ctx, back, "reconnection")
	o := receive(t, b.ctx, done, "result")
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.CallID != callID || o.res.Content[0].Text != "done" {
		t.Fatalf("result %+v, want that of call %s", o.res, callID)
	}
}

// A request that went unanswered (here to a subscriber that is not a
// coordinator and never answers, standing for a hung one) is not waited
// for until the caller's deadline: an attempt ends after RequestTimeout.
// A request that is not safe to send twice (an approval's decision) then
// fails with timeout, sent once; requests that are safe to repeat, every
// submit among them, are sent again until the caller's deadline.
func TestUnansweredRequestsEndAtTheirBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hole := testenv.Connect(t, b.srv.URL())
	var mu sync.Mutex
	seen := map[string]int{}
	if _, err := hole.Subscribe("toolbus.api.>", func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	sent := func(subject string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[subject]
	}
	const bound = 200 * time.Millisecond
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{RequestTimeout: bound, CoordinatorWait: bound})

	// The caller's deadline is far beyond the attempt's bound: an attempt
	// that waited for it would end there, with the caller's error. The
	// slack below it is for a busy machine.
	decideCtx, cancelDecide := context.WithTimeout(b.ctx, time.Minute)
	defer cancelDecide()
	start := time.Now()
	// An approval's decision cannot be sent again: a second one is refused.
	_, err := c.Operator().Decide(decideCtx, messages.DecideRequest{ApprovalID: "a1", Decision: messages.DecisionApprove, By: "op"})
	if !errors.Is(err, messages.ErrTimeout) {
		t.Fatalf("unanswered decision: %v, want %s", err, messages.CodeTimeout)
	}
	if elapsed := time.Since(start); elapsed < 2*bound || elapsed > 30*time.Second {
		t.Fatalf("unanswered decision took %v with a bound of %v and as long again for the coordinator's wait", elapsed, bound)
	}
	if n := sent("toolbus.api.approvals.decide"); n != 1 {
		t.Fatalf("a decision was sent %d times", n)
	}

	// Requests safe to repeat are sent again and again within window: many
	// times its bound, so that a busy machine's slowness still leaves
	// room for a few attempts.
	const window = 5 * time.Second

	ctx, cancel := context.WithTimeout(b.ctx, window)
	defer cancel()
	if _, err := c.Get(ctx, "c1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered get: %v, want the caller's deadline", err)
	}
	if n := sent("toolbus.api.calls.get"); n < 3 {
		t.Fatalf("a read was sent %d times in %v with a bound of %v", n, window, bound)
	}
	ctx, cancel = context.WithTimeout(b.ctx, window)
	defer cancel()
	if _, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", IdempotencyKey: "k"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered idempotent submit: %v, want the caller's deadline", err)
	}
	if n := sent("toolbus.api.calls.submit"); n < 4 {
		t.Fatalf("an idempotent submit was sent %d times in %v with a bound of %v", n-1, window, bound)
	}
	// A plain submit is given a call ID by the SDK, and so is safe to repeat.
	before := sent("toolbus.api.calls.submit")
	ctx, cancel = context.WithTimeout(b.ctx, window)
	defer cancel()
	if _, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered plain submit: %v, want the caller's deadline", err)
	}
	if n := sent("toolbus.api.calls.submit") - before; n < 3 {
		t.Fatalf("a plain submit was sent %d times in %v with a bound of %v", n, window, bound)
	}
}

// A call that lasts longer than the client's request bounds (here a tool
// that waits for the test, which lets it go once both bounds have passed)
// is waited for: the bounds are for requests, not for a call's result.
func TestCallOutlastsTheRequestBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	const bound = 100 * time.Millisecond
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{RequestTimeout: bound, DefaultTimeout: 3 * bound})
	type outcome struct {
		res *messages.CallResult
		err error
	}
	for name, opts := range map[string][]client.CallOption{"routed": nil, "idempotent": {client.WithIdempotencyKey("long")}} {
		t.Run(name, func(t *testing.T) {
			done := make(chan outcome, 1)
			go func() {
				res, err := c.Call(withoutDeadline(t, b.ctx), "t-steps", nil, opts...)
				done <- outcome{res, err}
			}()
			// Time itself is what must pass here: the call outlasts both bounds.
			<-time.After(5 * bound)
			for range 3 {
				b.steps <- struct{}{}
			}
			o := receive(t, b.ctx, done, "result")
			if o.err != nil || o.res.Content[0].Text != "done" {
				t.Fatalf("result %+v, error %v", o.res, o.err)
			}
		})
	}
}

// CallStats, a read that costs the coordinator a scan, is sent once: not
// in copies while its answer takes longer than HedgeAfter, once a
// coordinator's receipt says it has it, nor again when it takes longer
// than RequestTimeout (its attempt gets 25s more). Here the responder
// standing in for a busy coordinator sends its receipt at once, as
// coordinators do, and answers after three times HedgeAfter and
// RequestTimeout. HedgeAfter is long enough for the receipt to come
// first on a busy machine.
func TestCallStatsIsSentOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	busy := testenv.Connect(t, b.srv.URL())
	var mu sync.Mutex
	received := 0
	if _, err := busy.Subscribe("toolbus.api.stats.calls", func(m *nats.Msg) {
		mu.Lock()
		received++
		mu.Unlock()
		if to := m.Header.Get(messages.HeaderReceipt); to != "" {
			receipt := nats.NewMsg(to)
			receipt.Header.Set(messages.HeaderReceipt, messages.ReceiptSent)
			_ = busy.PublishMsg(receipt)
		}
		go func() {
			time.Sleep(3 * time.Second) // the scan
			_ = m.Respond([]byte{0x80}) // an empty MessagePack map
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := busy.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{HedgeAfter: time.Second, RequestTimeout: time.Second})
	if _, err := c.Operator().CallStats(b.ctx, messages.CallStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if received != 1 {
		t.Fatalf("stats.calls was sent %d times, want once", received)
	}
}

// routeWatch records, from a connection of its own, the submits that
// reach the coordinators' subject and the receipts sent to routes.
type routeWatch struct {
	mu       sync.Mutex
	submits  []nats.Header
	receipts int
	results  chan struct{}
}

func watchRoutes(t *testing.T, url string) *routeWatch {
	t.Helper()
	w := &routeWatch{results: make(chan struct{}, 16)}
	nc := testenv.Connect(t, url)
	if _, err := nc.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.submits = append(w.submits, m.Header)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("toolbus.results.>", func(m *nats.Msg) {
		switch {
		case m.Header.Get(messages.HeaderReceipt) == messages.ReceiptSent:
			w.mu.Lock()
			w.receipts++
			w.mu.Unlock()
		case m.Header.Get("Nats-Sequence") != "":
			w.results <- struct{}{}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// A call that ends before anyone looks for it costs its submit and its
// result, and no receipt: the first submit asks for none, and no
// coordinator sends one.
func TestACallThatEndsSoonAsksForNoReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	watch := watchRoutes(t, b.srv.URL())
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{HedgeAfter: 5 * time.Second})
	res, err := c.Call(b.ctx, "t-count", labelArgs{"soon"})
	if err != nil || res.Content[0].Text != "soon" {
		t.Fatalf("result %+v, error %v", res, err)
	}
	// The coordinator would have sent a receipt before it queued the
	// call, so before the result: once the watch has the result, it has
	// any receipt.
	receive(t, b.ctx, watch.results, "result on the route")
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(watch.submits) != 1 {
		t.Fatalf("%d submits, want 1", len(watch.submits))
	}
	if to := watch.submits[0].Get(messages.HeaderReceipt); to != "" {
		t.Fatalf("the first submit asks for a receipt on %s", to)
	}
	if watch.receipts != 0 {
		t.Fatalf("%d receipts sent, want none", watch.receipts)
	}
}

// A first submit that no coordinator got is found missing by a lookup
// after HedgeAfter; the copies sent then ask for a receipt, a coordinator
// that has come up receipts one and queues the call, and the call runs
// once.
func TestALostFirstSubmitIsCopiedWithReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t)
	watch := watchRoutes(t, b.srv.URL())
	first := make(chan struct{})
	var once sync.Once
	hole := testenv.Connect(t, b.srv.URL())
	if _, err := hole.Subscribe("toolbus.api.calls.submit", func(*nats.Msg) { once.Do(func() { close(first) }) }); err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{HedgeAfter: 100 * time.Millisecond})
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(b.ctx, "t-count", labelArgs{"copied"})
		done <- outcome{res, err}
	}()
	receive(t, b.ctx, first, "first submit")
	testenv.Coordinator(t, b.srv.URL())
	o := receive(t, b.ctx, done, "result")
	if o.err != nil || o.res.Content[0].Text != "copied" {
		t.Fatalf("result %+v, error %v", o.res, o.err)
	}
	if of, all := b.runsOf(o.res.CallID); of != 1 || all != 1 {
		t.Fatalf("the tool ran %d times for the call, %d in all; want once", of, all)
	}
	receive(t, b.ctx, watch.results, "result on the route")
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(watch.submits) < 2 {
		t.Fatalf("%d submits, want the first and its copies", len(watch.submits))
	}
	if to := watch.submits[0].Get(messages.HeaderReceipt); to != "" {
		t.Fatalf("the first submit asks for a receipt on %s", to)
	}
	for i, h := range watch.submits[1:] {
		if h.Get(messages.HeaderReceipt) == "" {
			t.Fatalf("copy %d asks for no receipt", i+1)
		}
	}
	if watch.receipts == 0 {
		t.Fatal("no coordinator receipted a copy")
	}
}

// TestCopiesSlowDownWhileNoCoordinatorReceipts: a request that a
// coordinator has taken but not yet reached (one behind on its requests,
// here one that never answers) is copied twice, then four times, and then
// ever more slowly, rather than once every HedgeAfter: each copy is one
// more request for coordinators that are behind already.
func TestCopiesSlowDownWhileNoCoordinatorReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	behind := testenv.Connect(t, b.srv.URL())
	var copies atomic.Int32
	if _, err := behind.Subscribe("toolbus.api.tools.list", func(*nats.Msg) { copies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := behind.Flush(); err != nil {
		t.Fatal(err)
	}
	const hedgeAfter, within = 50 * time.Millisecond, 3 * time.Second
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{HedgeAfter: hedgeAfter, RequestTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if _, err := c.ListTools(ctx, messages.ListToolsRequest{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request no coordinator answers: %v, want the context's end", err)
	}
	if err := behind.Flush(); err != nil {
		t.Fatal(err)
	}
	// The first at 0, two at 50 ms, four at 100 ms, then one at 200 ms,
	// 400 ms, 800 ms and 1.6 s: 11. A copy every 50 ms would be 65.
	n := copies.Load()
	t.Logf("%d copies in %v", n, within)
	if n < 7 || n > 11 {
		t.Fatalf("%d copies of an unanswered request in %v, want the first, 2, 4, then one after each doubled wait (11 at most)", n, within)
	}
}

// TestMistakesOfANewCallerAreNamed: what a caller gets wrong is reported
// at once and names the mistake, instead of a wait until its context ends
// or a call it did not mean to make: Wait and Watch of an ID no call has
// (call_not_found), Call and Submit with a context already ended (nothing
// is queued), a plain string as arguments, and a nil connection.
func TestMistakesOfANewCallerAreNamed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	// The test's context is long: a wait that is not refused hangs the test.
	if _, err := c.Wait(b.ctx, "nosuchcall"); !errors.Is(err, messages.ErrCallNotFound) {
		t.Fatalf("Wait of an unknown call: %v, want %s", err, messages.CodeCallNotFound)
	}
	for ev, err := range c.Watch(b.ctx, "nosuchcall") {
		if ev != nil || !errors.Is(err, messages.ErrCallNotFound) {
			t.Fatalf("Watch of an unknown call: %+v %v, want %s", ev, err, messages.CodeCallNotFound)
		}
	}

	ended, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := c.Call(ended, "t-count", labelArgs{"ended"}); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("Call with an ended context: %v", err)
	}
	if r, err := c.Submit(ended, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"ended"}`)}); r != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with an ended context: %+v %v", r, err)
	}
	// A call made after them is the first the namespace's worker runs.
	res, err := c.Call(b.ctx, "t-count", labelArgs{"after"})
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call after them: %+v %v", res, err)
	}
	if list, err := c.ListCalls(b.ctx, messages.CallsListRequest{Tool: "t-count"}); err != nil || len(list.Calls) != 1 {
		t.Fatalf("calls of t-count: %+v %v, want only the one made with a live context", list, err)
	}

	if _, err := c.Call(b.ctx, "t-count", "hello"); err == nil || !strings.Contains(err.Error(), "is not JSON") {
		t.Fatalf("Call with a plain string as arguments: %v", err)
	}
	if _, err := client.New(nil, client.Options{}); err == nil {
		t.Fatal("New without a connection: no error")
	}
}

// TestATimeoutUnderAMillisecondIsNotTheDefault: the wire counts a call's
// timeout in milliseconds, where 0 asks for the coordinator's default (10
// minutes): a shorter positive timeout is sent as one millisecond.
func TestATimeoutUnderAMillisecondIsNotTheDefault(t *testing.T) {
	for d, want := range map[time.Duration]int64{500 * time.Microsecond: 1, 0: 0, 1500 * time.Microsecond: 1, 2 * time.Second: 2000} {
		var req messages.SubmitRequest
		client.WithTimeout(d)(&req)
		if req.TimeoutMS != want {
			t.Errorf("WithTimeout(%v): timeout_ms %d, want %d", d, req.TimeoutMS, want)
		}
	}
}
