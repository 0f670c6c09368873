package worker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// testBundle is one test's server, coordinator and client, and the tools
// of namespace "t" that the test's workers serve.
type testBundle struct {
	url    string
	client *client.Client
	ctx    context.Context
	tools  *testTools
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	srv := testenv.Server(t)
	return setupOn(t, srv.URL())
}

func setupOn(t *testing.T, url string) *testBundle {
	t.Helper()
	testenv.Coordinator(t, url)
	return &testBundle{
		url:    url,
		client: testenv.Client(t, url, client.Options{}),
		ctx:    testenv.Context(t),
		tools:  newTestTools(),
	}
}

// worker starts a worker serving namespace "t" with the bundle's tools.
func (b *testBundle) worker(t *testing.T, cfg worker.Config, slots int) *worker.Worker {
	t.Helper()
	return testenv.Worker(t, b.url, cfg, worker.Namespace{Name: "t", Tools: b.tools.list(), Slots: slots})
}

// submit queues a call and returns its ID.
func (b *testBundle) submit(t *testing.T, tool string, opts ...func(*messages.SubmitRequest)) string {
	t.Helper()
	req := messages.SubmitRequest{Tool: tool}
	for _, o := range opts {
		o(&req)
	}
	r, err := b.client.Submit(b.ctx, req)
	if err != nil {
		t.Fatalf("submit %s: %v", tool, err)
	}
	return r.CallID
}

func (b *testBundle) wait(t *testing.T, id string) *messages.CallResult {
	t.Helper()
	res, err := b.client.Wait(b.ctx, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return res
}

// runsNext checks that the worker takes a new call and finishes it.
func (b *testBundle) runsNext(t *testing.T, after string) {
	t.Helper()
	res := b.wait(t, b.submit(t, "t-quick"))
	if res.Status != messages.StateCompleted || res.IsError {
		t.Fatalf("call after %s: %+v", after, res)
	}
}

// testTools are the tools of namespace "t":
//   - quick answers at once;
//   - block waits until its context ends, and returns its cause;
//   - stubborn ignores its context: it waits until released;
//   - slow runs for the duration it is given.
type testTools struct {
	started  chan string
	stubborn chan struct{}
	returned chan string
	mu       sync.Mutex
	runs     map[string]int
}

func newTestTools() *testTools {
	return &testTools{started: make(chan string, 100), stubborn: make(chan struct{}), returned: make(chan string, 100), runs: map[string]int{}}
}

func (tt *testTools) ran(ctx context.Context) {
	id := worker.CallFrom(ctx).ID
	tt.mu.Lock()
	tt.runs[id]++
	tt.mu.Unlock()
	tt.started <- id
}

func (tt *testTools) runsOf(id string) int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.runs[id]
}

type slowArgs struct {
	MS int `json:"ms"`
}

func (tt *testTools) list() []worker.Tool {
	return []worker.Tool{
		worker.Func("quick", "Answers at once.", func(ctx context.Context, _ struct{}) (string, error) {
			return "done", nil
		}),
		worker.Func("block", "Waits until its context ends.", func(ctx context.Context, _ struct{}) (string, error) {
			tt.ran(ctx)
			<-ctx.Done()
			return "", context.Cause(ctx)
		}),
		worker.Func("stubborn", "Ignores its context until released.", func(ctx context.Context, _ struct{}) (string, error) {
			tt.ran(ctx)
			<-tt.stubborn
			tt.returned <- worker.CallFrom(ctx).ID
			return "released", nil
		}),
		worker.Func("slow", "Runs for the time it is given.", func(ctx context.Context, in slowArgs) (string, error) {
			tt.ran(ctx)
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return "done", nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}),
		worker.Func("fail", "Fails.", func(ctx context.Context, _ struct{}) (string, error) {
			return "", errors.New("it fails")
		}),
		worker.Func("panic", "Panics.", func(ctx context.Context, _ struct{}) (string, error) {
			panic("it panics")
		}),
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testenv.Receive(t, ch, what)
}

// allFree waits until every slot taken so far was released exactly once.
func allFree(t *testing.T, w *worker.Worker) worker.SlotCounts {
	t.Helper()
	var c worker.SlotCounts
	testenv.Eventually(t, "every slot to be free", func() bool {
		c = worker.Slots(w, "t")
		return c.Free == c.Size && c.ReleasedTotal() == c.Taken
	})
	return c
}

func TestSlotIsFreedOnceWhateverEndsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, worker.Config{}, 1)

	// Finished, by a result, an error and a panic.
	for _, tool := range []string{"t-quick", "t-fail", "t-panic"} {
		if res := b.wait(t, b.submit(t, tool)); res.Status != messages.StateCompleted && res.Status != messages.StateFailed {
			t.Fatalf("%s: %+v", tool, res)
		}
		b.runsNext(t, tool)
	}
	// Cancelled while it runs.
	id := b.submit(t, "t-block")
	receive(t, b.tools.started, "the call to start")
	if _, err := b.client.Cancel(b.ctx, id, "enough"); err != nil {
		t.Fatal(err)
	}
	if res := b.wait(t, id); res.Status != messages.StateCancelled {
		t.Fatalf("cancelled call: %+v", res)
	}
	b.runsNext(t, "a cancel")
	// Its deadline passes while it runs.
	id = b.submit(t, "t-block", func(r *messages.SubmitRequest) { r.TimeoutMS = 1000 })
	receive(t, b.tools.started, "the call to start")
	if res := b.wait(t, id); res.Status != messages.StateTimedOut {
		t.Fatalf("timed out call: %+v", res)
	}
	b.runsNext(t, "a deadline")
	// Cancelled and timing out together, many times over, before or while
	// the tool runs.
	for i := range 10 {
		id := b.submit(t, "t-block", func(r *messages.SubmitRequest) { r.TimeoutMS = 50 })
		if _, err := b.client.Cancel(b.ctx, id, "race "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if res := b.wait(t, id); res.Status != messages.StateCancelled && res.Status != messages.StateTimedOut {
			t.Fatalf("cancel racing a deadline: %+v", res)
		}
	}
	b.runsNext(t, "cancels racing deadlines")

	c := allFree(t, w)
	if c.Size != 1 || c.Taken < 9 {
		t.Fatalf("slot counts %+v", c)
	}
}

func TestStopHandsBackRunningCallsAndFreesTheirSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, worker.Config{}, 3)
	ids := []string{b.submit(t, "t-block"), b.submit(t, "t-block"), b.submit(t, "t-block")}
	for range ids {
		receive(t, b.tools.started, "the calls to start")
	}
	stopCtx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	// A tool that has not returned when its call is handed back may be
	// given up on (abandoned) and return later (released again, to no
	// effect): either way each slot is free once.
	c := worker.Slots(w, "t")
	if c.Free != 3 || c.Taken != 3 || c.ReleasedTotal() != 3 {
		t.Fatalf("slot counts after Stop: %+v", c)
	}
	// Handed back, the calls run again on another worker.
	next := b.worker(t, worker.Config{}, 3)
	for range ids {
		receive(t, b.tools.started, "the calls to start again")
	}
	for _, id := range ids {
		if _, err := b.client.Cancel(b.ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
		if res := b.wait(t, id); res.Status != messages.StateCancelled || res.Attempt != 2 || res.Worker != next.ID() {
			t.Fatalf("handed back call: %+v", res)
		}
	}
	allFree(t, next)
}

func TestStopGivesUpOnAToolThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, worker.Config{}, 1)
	b.submit(t, "t-stubborn")
	receive(t, b.tools.started, "the call to start")
	stopCtx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	c := worker.Slots(w, "t")
	if c.Free != 1 || c.Taken != 1 || c.Released["abandoned"] != 1 || c.Again != 0 {
		t.Fatalf("slot counts after Stop: %+v", c)
	}
	// When the tool returns at last, its slot is not freed a second time.
	close(b.tools.stubborn)
	receive(t, b.tools.returned, "the tool to return")
	testenv.Eventually(t, "the returned tool's release", func() bool { return worker.Slots(w, "t").Again == 1 })
	if c := worker.Slots(w, "t"); c.Free != 1 || c.ReleasedTotal() != 1 {
		t.Fatalf("slot counts after the tool returned: %+v", c)
	}
}

func TestAToolThatIgnoresItsContextKeepsItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, worker.Config{}, 1)
	id := b.submit(t, "t-stubborn")
	receive(t, b.tools.started, "the call to start")
	// Cancelled once its start is stored: before that, the coordinator
	// would end it as a call cancelled in the queue, and the worker's slot
	// would be released as having committed, not as straggling.
	for ev, err := range b.client.Watch(b.ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == messages.EventStarted {
			break
		}
	}
	if _, err := b.client.Cancel(b.ctx, id, "enough"); err != nil {
		t.Fatal(err)
	}
	// The result does not wait for the tool.
	if res := b.wait(t, id); res.Status != messages.StateCancelled {
		t.Fatalf("cancelled call: %+v", res)
	}
	if c := worker.Slots(w, "t"); c.Free != 0 {
		t.Fatalf("the stubborn tool's slot was freed while it runs: %+v", c)
	}
	close(b.tools.stubborn)
	receive(t, b.tools.returned, "the tool to return")
	b.runsNext(t, "a stubborn tool")
	if c := allFree(t, w); c.Released["straggled"] != 1 || c.Again != 0 {
		t.Fatalf("slot counts: %+v", c)
	}
}

func TestLeaseOutlivesAckWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Renewed every third of it: long enough that a busy machine's late
	// wake-ups do not let the lease lapse between two renewals.
	const ackWait = 3 * time.Second
	w := b.worker(t, worker.Config{AckWait: ackWait}, 2)
	id := b.submit(t, "t-slow", func(r *messages.SubmitRequest) {
		r.Arguments = messages.JSON(`{"ms":` + strconv.Itoa(int(5*ackWait/2/time.Millisecond)) + `}`)
	})
	res := b.wait(t, id)
	if res.Status != messages.StateCompleted || res.Attempt != 1 || res.Worker != w.ID() {
		t.Fatalf("long call: %+v", res)
	}
	if n := b.tools.runsOf(id); n != 1 {
		t.Fatalf("the tool ran %d times; JetStream delivered the leased call again", n)
	}
	allFree(t, w)
}

func TestCallsFlowAgainAfterTheServerRestarts(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), testenv.FreePort(t)
	start := func() *natsserver.Server {
		return testenv.ServerWith(t, natsserver.Config{DataDir: dir, Port: port})
	}
	srv := start()
	b := setupOn(t, srv.URL())
	w := b.worker(t, worker.Config{FetchWait: time.Second}, 2)
	b.runsNext(t, "the start")
	srv.Stop()
	start()
	var id string
	testenv.Eventually(t, "a submit after the restart", func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		defer cancel()
		r, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "t-quick"})
		if err != nil {
			t.Logf("submit after the restart: %v", err)
			return false
		}
		id = r.CallID
		return true
	})
	if res := b.wait(t, id); res.Status != messages.StateCompleted || res.Worker != w.ID() {
		t.Fatalf("call after the restart: %+v", res)
	}
	allFree(t, w)
}

func TestRefusedPullRequestsBackOffAndRecover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The worker's connection publishes little but its pull requests when
	// no call runs. (A subscriber to the requests' subject would answer
	// for the missing consumer: they would be lost, not refused.)
	nc := testenv.Connect(t, b.url)
	w := b.worker(t, worker.Config{Conn: nc, FetchWait: time.Second}, 4)
	b.runsNext(t, "the start")

	js, err := jetstream.New(testenv.Connect(t, b.url))
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	durable, _ := names.Consumers().Durable("t")
	if err := js.DeleteConsumer(b.ctx, names.EventsStream(), durable); err != nil {
		t.Fatal(err)
	}
	// Without its consumer every request is refused at once; asked again
	// at once, they would number thousands in a second.
	before := nc.Stats().OutMsgs
	<-time.After(2 * time.Second)
	n := nc.Stats().OutMsgs - before
	t.Logf("%d messages published in 2s without a consumer", n)
	if n > 25 {
		t.Fatalf("%d messages published in 2s without a consumer; want a few pull requests, backing off", n)
	}
	// And asked again all the same: a few within the 2s on an idle
	// machine, later on a busy one.
	testenv.Eventually(t, "the refused pull requests to be asked again", func() bool { return nc.Stats().OutMsgs-before >= 2 })

	if _, err := resources.EnsureNamespaceConsumer(b.ctx, js, names, resources.NamespaceConsumer{
		Namespace: "t", MaxConcurrency: 1024, AckWait: 30 * time.Second, MaxAttempts: 3,
	}); err != nil {
		t.Fatal(err)
	}
	b.runsNext(t, "the consumer is back")
	allFree(t, w)
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	nc := testenv.Connect(t, testenv.Server(t).URL())
	for _, tc := range []struct {
		cfg   worker.Config
		field string
	}{
		{worker.Config{}, "Conn"},
		{worker.Config{Conn: nc, Prefix: "bad prefix"}, "Prefix"},
		{worker.Config{Conn: nc, ID: "bad id"}, "ID"},
		{worker.Config{Conn: nc, AckWait: time.Millisecond}, "AckWait"},
		{worker.Config{Conn: nc, FetchWait: -time.Second}, "FetchWait"},
		{worker.Config{Conn: nc, HeartbeatInterval: -time.Second}, "HeartbeatInterval"},
		{worker.Config{Conn: nc, ProgressInterval: -time.Second}, "ProgressInterval"},
		{worker.Config{Conn: nc, StartDelay: -time.Second}, "StartDelay"},
		{worker.Config{Conn: nc, Resources: worker.Resources{Replicas: -1}}, "Resources.Replicas"},
		{worker.Config{Conn: nc, Resources: worker.Resources{EventsMaxAge: -time.Hour}}, "Resources.EventsMaxAge"},
		{worker.Config{Conn: nc, Resources: worker.Resources{MaxQueuedCalls: -1}}, "Resources.MaxQueuedCalls"},
	} {
		_, err := worker.New(tc.cfg)
		if !errors.Is(err, worker.ErrInvalidConfig) || !containsWord(err.Error(), tc.field) {
			t.Errorf("New with a bad %s: %v", tc.field, err)
		}
	}
	w, err := worker.New(worker.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns    worker.Namespace
		field string
	}{
		{worker.Namespace{Name: "t", Slots: -1}, "Slots"},
		{worker.Namespace{Name: "t", MaxConcurrency: -1}, "MaxConcurrency"},
		{worker.Namespace{Name: "t", MaxAttempts: -1}, "MaxAttempts"},
	} {
		err := w.Serve(tc.ns)
		if !errors.Is(err, worker.ErrInvalidConfig) || !containsWord(err.Error(), tc.field) {
			t.Errorf("Serve with a bad %s: %v", tc.field, err)
		}
	}
}

// TestServeRefusesWhatCouldNeverRun: every namespace or tool Serve cannot
// run with is refused with ErrInvalidConfig, naming what is wrong; among
// them the tools no call could ever fit: a Func whose arguments are not an
// object, and input schemas that do not compile or whose type is not
// object. Their calls would otherwise each be refused.
func TestServeRefusesWhatCouldNeverRun(t *testing.T) {
	t.Parallel()
	nc := testenv.Connect(t, testenv.Server(t).URL())
	w, err := worker.New(worker.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in struct{ Text string }) (string, error) { return in.Text, nil })
	withSchema := func(schema string) worker.Tool {
		t := echo
		t.Definition.InputSchema = messages.JSON(schema)
		return t
	}
	for _, tc := range []struct {
		what string
		ns   worker.Namespace
		says string
	}{
		{"a bad namespace name", worker.Namespace{Name: "bad name"}, "Namespace.Name"},
		{"a bad method name", worker.Namespace{Name: "t", Tools: []worker.Tool{worker.Func("bad name", "", func(ctx context.Context, in struct{}) (string, error) { return "", nil })}}, "bad name"},
		{"a tool twice", worker.Namespace{Name: "t", Tools: []worker.Tool{echo, echo}}, "defined twice"},
		{"a Func taking a string", worker.Namespace{Name: "t", Tools: []worker.Tool{worker.Func("say", "", func(ctx context.Context, in string) (string, error) { return in, nil })}}, "decode into string"},
		{"a schema that does not compile", worker.Namespace{Name: "t", Tools: []worker.Tool{withSchema(`{"type":"object","properties":{"n":{"type":"integer","minimum":"one"}}}`)}}, "InputSchema of tool t-echo"},
		{"a schema of arrays", worker.Namespace{Name: "t", Tools: []worker.Tool{withSchema(`{"type":"array"}`)}}, "a tool's arguments are a JSON object"},
	} {
		if err := w.Serve(tc.ns); !errors.Is(err, worker.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Serve with %s: %v, want ErrInvalidConfig saying %q", tc.what, err, tc.says)
		}
	}
	// Schemas that let the arguments be an object are served.
	if err := w.Serve(worker.Namespace{Name: "ok", Tools: []worker.Tool{withSchema(`{"type":["object","null"]}`), worker.Func("any", "", func(ctx context.Context, in map[string]any) (string, error) { return "", nil })}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Serve(worker.Namespace{Name: "ok"}); !errors.Is(err, worker.ErrInvalidConfig) || !strings.Contains(err.Error(), "served twice") {
		t.Errorf("a namespace served twice: %v", err)
	}
}

func containsWord(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		if s[i:i+len(word)] == word && (i+len(word) == len(s) || s[i+len(word)] == ' ') {
			return true
		}
	}
	return false
}

// A tool whose input schema branches twice at every level of recursion is
// refused when it is served, with an error that names it and says why.
func TestServeRefusesAToolWhoseSchemaIsTooCostly(t *testing.T) {
	t.Parallel()
	nc := testenv.Connect(t, testenv.Server(t).URL())
	w, err := worker.New(worker.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	twin := worker.Tool{
		Definition: messages.ToolDefinition{Method: "twin", InputSchema: messages.JSON(`{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},` +
			`"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`)},
		Handler: worker.HandlerFunc(func(context.Context, *worker.Call) (*worker.Result, error) { return nil, nil }),
	}
	err = w.Serve(worker.Namespace{Name: "t", Tools: []worker.Tool{twin}})
	if !errors.Is(err, worker.ErrSchemaTooCostly) {
		t.Fatalf("Serve = %v; want ErrSchemaTooCostly", err)
	}
	if !strings.Contains(err.Error(), "t-twin") || !strings.Contains(err.Error(), "depth") {
		t.Errorf("error %q does not name the tool and the depth", err)
	}
}
