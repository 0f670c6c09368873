package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestPlainNATSClient follows docs/protocol.md with nothing but a NATS
// client and JSON bytes, as a Python or JavaScript program would.
func TestPlainNATSClient(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)

	request := func(subject, body string) (*nats.Msg, map[string]any) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Header.Set("Content-Type", "application/json")
		msg.Data = []byte(body)
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			t.Fatalf("request %s: %v", subject, err)
		}
		var out map[string]any
		if err := json.Unmarshal(reply.Data, &out); err != nil {
			t.Fatalf("reply to %s is not JSON: %q", subject, reply.Data)
		}
		return reply, out
	}

	// The coordinator's view of the catalog follows the worker's
	// registration in the background.
	var reply *nats.Msg
	var out map[string]any
	testenv.Eventually(t, "the demo tools to be listed", func() bool {
		reply, out = request("toolbus.api.tools.list", `{"namespace":"demo"}`)
		tools, _ := out["tools"].([]any)
		return len(tools) == len(demo.Tools())
	})
	if reply.Header.Get("Content-Type") != "application/json" || reply.Header.Get("Toolbus-Version") != messages.ProtocolVersion {
		t.Fatalf("reply headers %v", reply.Header)
	}

	_, out = request("toolbus.api.calls.submit", `{"tool":"demo-word_count","arguments":{"text":"a b c"},"wait":true}`)
	result, _ := out["result"].(map[string]any)
	if out["state"] != "completed" || result == nil || result["is_error"] != false {
		t.Fatalf("submit with wait: %v", out)
	}
	if sc, _ := result["structured_content"].(map[string]any); sc["words"] != float64(3) {
		t.Fatalf("structured content %v", result["structured_content"])
	}

	// Submit without waiting, then follow the call's events from JetStream.
	_, out = request("toolbus.api.calls.submit", `{"tool":"demo-sleep","arguments":{"seconds":0.2}}`)
	callID, _ := out["call_id"].(string)
	if callID == "" || out["state"] != "queued" {
		t.Fatalf("submit: %v", out)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "TOOLBUS_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"toolbus.events.*." + callID + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
		if err != nil {
			t.Fatalf("events so far %v: %v", kinds, err)
		}
		// Events are MessagePack: decode them as any client would.
		var ev map[string]any
		if err := msgpack.Unmarshal(msg.Data(), &ev); err != nil {
			t.Fatalf("event is not MessagePack: %v", err)
		}
		kind, _ := ev["kind"].(string)
		// Every event is under the bucket of the call's turn, "21" for
		// none (messages.TurnBucket).
		want := "toolbus.events.21." + callID + "." + kind + ".demo"
		if kind == "queued" {
			// The queued event's subject names the turn, "~" for none.
			want = "toolbus.events.21." + callID + ".queued.~.demo"
		}
		if msg.Subject() != want {
			t.Fatalf("event kind %q on subject %s", kind, msg.Subject())
		}
		kinds = append(kinds, kind)
		if kind == "result" {
			break
		}
	}
	if kinds[0] != "queued" || !contains(kinds, "started") || !contains(kinds, "progress") {
		t.Fatalf("event kinds %v", kinds)
	}

	_, out = request("toolbus.api.calls.get", `{"call_id":"`+callID+`"}`)
	if out["state"] != "completed" || out["tool"] != "demo-sleep" {
		t.Fatalf("calls.get: %v", out)
	}

	// Routed results: one subscription receives the committed results of
	// every call submitted with the route, in the order they end.
	route := nuid.Next()
	routed, err := nc.SubscribeSync("toolbus.results." + route + ".>")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, text := range []string{"one", "two three"} {
		_, out = request("toolbus.api.calls.submit", `{"tool":"demo-word_count","arguments":{"text":"`+text+`"},"route":"`+route+`"}`)
		id, _ := out["call_id"].(string)
		if !strings.HasPrefix(id, route) {
			t.Fatalf("routed call ID %q does not start with the route %s", id, route)
		}
		ids[id] = text
	}
	for range len(ids) {
		msg, err := routed.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("routed result: %v", err)
		}
		var ev map[string]any
		if err := msgpack.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatalf("routed result is not MessagePack: %v", err)
		}
		id, _ := ev["call_id"].(string)
		if _, ok := ids[id]; !ok || ev["kind"] != "result" || msg.Subject != "toolbus.results."+route+"."+id[len(route):]+".demo" {
			t.Fatalf("routed message on %s: %v", msg.Subject, ev)
		}
		delete(ids, id)
	}
	msg := nats.NewMsg("toolbus.api.calls.submit")
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = []byte(`{"tool":"demo-echo","arguments":{"text":"x"},"route":"short"}`)
	reply, err = nc.RequestMsgWithContext(ctx, msg)
	if err != nil || reply.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(string(reply.Data), "route") {
		t.Fatalf("submit with a malformed route: %v %v %s", err, reply.Header, reply.Data)
	}

	// A quiet submit names its call's ID and gets no reply once the call
	// is queued: the first message under the call's route subject, its
	// reply subject, is the stored result (it carries the stream's
	// headers), on the reply subject followed by the namespace. The tool
	// sleeps, so a reply, had one been sent, would have come first.
	quietID := route + nuid.Next()
	quietSubject := "toolbus.results." + route + "." + quietID[len(route):]
	quietly := func(body string) {
		t.Helper()
		msg := nats.NewMsg("toolbus.api.calls.submit")
		msg.Header.Set("Content-Type", "application/json")
		msg.Reply = quietSubject
		msg.Data = []byte(body)
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	quietly(`{"tool":"demo-sleep","arguments":{"seconds":0.2},"route":"` + route + `","call_id":"` + quietID + `","quiet":true}`)
	msg, err = routed.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("quiet call: %v", err)
	}
	var ev map[string]any
	if err := msgpack.Unmarshal(msg.Data, &ev); err != nil || msg.Subject != quietSubject+".demo" || msg.Header.Get("Nats-Sequence") == "" || ev["kind"] != "result" || ev["call_id"] != quietID {
		t.Fatalf("first message of a quiet call on %s: %v %v (%v)", msg.Subject, msg.Header, ev, err)
	}
	// A refused quiet submit is answered, on its reply subject.
	quietID = route + nuid.Next()
	quietSubject = "toolbus.results." + route + "." + quietID[len(route):]
	quietly(`{"tool":"demo-nothing","route":"` + route + `","call_id":"` + quietID + `","quiet":true}`)
	msg, err = routed.NextMsgWithContext(ctx)
	if err != nil || msg.Subject != quietSubject || msg.Header.Get("Nats-Service-Error-Code") != "404" || !strings.Contains(string(msg.Data), "tool_not_found") {
		t.Fatalf("refused quiet submit: %v %v %s", err, msg.Header, msg.Data)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"tool":"demo-echo","arguments":{"text":"x"},"quiet":true}`, "quiet needs call_id"},
		{`{"tool":"demo-echo","arguments":{"text":"x"},"call_id":"` + route + nuid.Next() + `"}`, "call_id needs a route"},
		{`{"tool":"demo-echo","arguments":{"text":"x"},"route":"` + route + `","call_id":"` + nuid.Next() + nuid.Next() + `"}`, "must be the route followed by"},
		{`{"tool":"demo-echo","arguments":{"text":"x"},"route":"` + route + `","call_id":"` + route + nuid.Next() + `","quiet":true,"wait":true}`, "quiet and wait"},
	} {
		reply, out := request("toolbus.api.calls.submit", bad.body)
		if reply.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(fmt.Sprint(out["message"]), bad.want) {
			t.Fatalf("submit %s: %v %v", bad.body, reply.Header, out)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestIdempotentSubmitRunsOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	cnt := newCounter()
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{cnt.tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "agent1"})
	ctx := testenv.Context(t)

	req := messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"x"}`), IdempotencyKey: "order-42", Wait: true}
	first, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Result == nil || first.Duplicate {
		t.Fatalf("first submit %+v", first)
	}
	// The same key, with the arguments' keys in another order and spaced differently.
	req.Arguments = messages.JSON(`{ "label" : "x" }`)
	second, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if second.CallID != first.CallID || !second.Duplicate || second.Result == nil {
		t.Fatalf("second submit %+v, first %+v", second, first)
	}
	if n := cnt.runs(first.CallID); n != 1 {
		t.Fatalf("tool ran %d times", n)
	}
	// Another agent's identical key is another call.
	other, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Agent: "agent2", Arguments: req.Arguments, IdempotencyKey: "order-42", Wait: true})
	if err != nil || other.CallID == first.CallID {
		t.Fatalf("other agent: %+v %v", other, err)
	}
	// Reusing the key for other arguments is refused.
	_, err = c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"y"}`), IdempotencyKey: "order-42"})
	if !errors.Is(err, messages.ErrIdempotencyConflict) {
		t.Fatalf("conflicting reuse: %v", err)
	}
	if total := cnt.total.Load(); total != 2 {
		t.Fatalf("tool ran %d times in all, want 2", total)
	}
}

func TestWorkersShareNamespace(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	ns := worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}, Slots: 1}
	w1 := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	w2 := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	var ids []string
	for range 2 {
		r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.CallID)
	}
	// Each worker has one slot, so both calls run at once only if both workers took one.
	receive(t, g.started, "first call to start")
	receive(t, g.started, "second call to start")
	close(g.release)
	workers := map[string]bool{}
	for _, id := range ids {
		res, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		workers[res.Worker] = true
	}
	if !workers[w1.ID()] || !workers[w2.ID()] {
		t.Fatalf("calls ran on %v, want both %s and %s", workers, w1.ID(), w2.ID())
	}
}

func TestQueuedCallsWaitForAWorker(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	cnt := newCounter()
	ns := worker.Namespace{Name: "t", Tools: []worker.Tool{cnt.tool()}, Slots: 4}
	// The first worker registers the tool, then stops.
	first := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	if err := first.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	var ids []string
	for i := range 20 {
		r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"` + string(rune('a'+i)) + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.CallID)
	}
	for _, id := range ids {
		info, err := c.Get(ctx, id)
		if err != nil || info.State != messages.StateQueued {
			t.Fatalf("call %s before any worker: %+v %v", id, info, err)
		}
	}
	second := testenv.Worker(t, srv.URL(), worker.Config{}, ns)
	for _, id := range ids {
		res, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != messages.StateCompleted || res.Worker != second.ID() {
			t.Fatalf("call %s: %+v", id, res)
		}
		if cnt.runs(id) != 1 {
			t.Fatalf("call %s ran %d times", id, cnt.runs(id))
		}
	}
}

func TestBadInputIsRefusedAndNothingPublished(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.MaxArgumentsBytes = 1024 })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	eventsBefore := streamLastSeq(t, srv.URL(), names.EventsStream())

	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		ct     string
		body   []byte
		code   messages.ErrorCode
		status string
	}{
		{"malformed msgpack", "", []byte{0x85, 0xa4, 't', 'o'}, messages.CodeMalformed, "400"},
		{"malformed json", "application/json", []byte(`{"tool": "demo-echo",`), messages.CodeMalformed, "400"},
		{"unknown tool", "application/json", []byte(`{"tool":"demo-nope","arguments":{}}`), messages.CodeToolNotFound, "404"},
		{"unknown namespace", "", mp(map[string]any{"tool": "nowhere-echo"}), messages.CodeToolNotFound, "404"},
		{"missing argument", "application/json", []byte(`{"tool":"demo-echo","arguments":{}}`), messages.CodeInvalidArguments, "422"},
		{"wrong argument type", "", mp(map[string]any{"tool": "demo-echo", "arguments": map[string]any{"text": 5}}), messages.CodeInvalidArguments, "422"},
		{"unexpected argument", "application/json", []byte(`{"tool":"demo-echo","arguments":{"text":"x","extra":1}}`), messages.CodeInvalidArguments, "422"},
		{"out of range", "application/json", []byte(`{"tool":"demo-sleep","arguments":{"seconds":-1}}`), messages.CodeInvalidArguments, "422"},
		{"oversized arguments", "application/json", []byte(`{"tool":"demo-echo","arguments":{"text":"` + strings.Repeat("x", 2000) + `"}}`), messages.CodePayloadTooLarge, "413"},
		{"dot in tool token", "application/json", []byte(`{"tool":"demo-ec.ho"}`), messages.CodeInvalidName, "400"},
		{"wildcard in namespace", "application/json", []byte(`{"tool":"de*-echo"}`), messages.CodeInvalidName, "400"},
		{"full wildcard", "application/json", []byte(`{"tool":"demo->"}`), messages.CodeInvalidName, "400"},
		{"bad agent", "application/json", []byte(`{"tool":"demo-echo","arguments":{"text":"x"},"agent":"a.b"}`), messages.CodeInvalidName, "400"},
		{"bad turn", "application/json", []byte(`{"tool":"demo-echo","arguments":{"text":"x"},"turn":"t *"}`), messages.CodeInvalidName, "400"},
		{"missing tool", "application/json", []byte(`{}`), messages.CodeBadRequest, "400"},
		{"unknown content type", "text/plain", []byte(`hello`), messages.CodeBadRequest, "400"},
	}
	for _, tc := range cases {
		msg := nats.NewMsg("toolbus.api.calls.submit")
		if tc.ct != "" {
			msg.Header.Set("Content-Type", tc.ct)
		}
		msg.Data = tc.body
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := reply.Header.Get("Nats-Service-Error-Code"); got != tc.status {
			t.Errorf("%s: status %q (%s), want %s", tc.name, got, reply.Header.Get("Nats-Service-Error"), tc.status)
		}
		if reply.Header.Get("Nats-Service-Error") == "" {
			t.Errorf("%s: no error description", tc.name)
		}
		var e messages.Error
		if _, err := messages.Decode(messages.Header(reply.Header), reply.Data, &e); err != nil {
			t.Errorf("%s: error body unreadable: %v", tc.name, err)
		}
		if e.Code != tc.code || e.Message == "" {
			t.Errorf("%s: error %+v, want code %s", tc.name, e, tc.code)
		}
	}
	if after := streamLastSeq(t, srv.URL(), names.EventsStream()); after != eventsBefore {
		t.Errorf("events stream moved from %d to %d", eventsBefore, after)
	}
	// The coordinator still works.
	c := testenv.Client(t, srv.URL(), client.Options{})
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "still here"}); err != nil || res.Content[0].Text != "still here" {
		t.Fatalf("call after bad input: %+v %v", res, err)
	}
}

// TestSlowRequestDoesNotHoldOthers: a submit waiting for a slow tool does
// not delay the requests that come after it.
func TestSlowRequestDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	slow := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate", Wait: true})
		slow <- err
	}()
	receive(t, g.started, "the slow call to start")
	// The slow submit is still open; these must be answered now.
	for range 5 {
		if _, err := c.ListTools(ctx, messages.ListToolsRequest{}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "fast"}); err != nil || res.IsError {
			t.Fatalf("%+v %v", res, err)
		}
	}
	select {
	case err := <-slow:
		t.Fatalf("slow submit returned before its tool finished: %v", err)
	default:
	}
	close(g.release)
	if err := receive(t, slow, "the slow submit"); err != nil {
		t.Fatal(err)
	}
}

// Call submits quietly. If that submit is lost (here a subscriber that
// is not a coordinator swallows it), Call finds no trace of the call in the
// events stream at its next check and submits the same call again with a
// reply: the call runs, under the ID Call chose.
func TestCallRecoversALostQuietSubmit(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	hole := testenv.Connect(t, srv.URL())
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
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "a"})
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "again"})
		done <- outcome{res, err}
	}()
	var lost messages.SubmitRequest
	select {
	case m := <-swallowed:
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &lost); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no submit")
	}
	if !lost.Quiet || lost.CallID == "" {
		t.Fatalf("Call's submit is not quiet: %+v", lost)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL())
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("Call did not recover the lost submit")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.CallID != lost.CallID || o.res.IsError || len(o.res.Content) == 0 || o.res.Content[0].Text != "again" {
		t.Fatalf("result %+v, want echo of call %s", o.res, lost.CallID)
	}
}

// With no coordinator at all, the server answers the quiet submit on the
// call's route; Call retries a few times, then reports it.
func TestCallWithoutCoordinatorFails(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "a"})
	_, err := c.Call(testenv.Context(t), "demo-echo", map[string]string{"text": "x"})
	if !errors.Is(err, messages.ErrNoResponders) {
		t.Fatalf("Call without a coordinator: %v, want code %s", err, messages.CodeNoResponders)
	}
}

// A coordinator from before quiet submits ignores call_id and quiet: it
// names the call itself and answers. Call follows the call under the name
// it was given. (The stand-in here queues the call as such a coordinator
// did, without the checks; the quiet copies the SDK sends while it finds
// no call of the ID it named are calls of their own to it, which no
// version-3 coordinator, all of which honour call_id, would make.)
func TestCallFollowsTheIDAnOlderCoordinatorGives(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	var givenMu sync.Mutex
	given := map[string]bool{}
	if _, err := nc.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		var sr messages.SubmitRequest
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &sr); err != nil {
			t.Error(err)
			return
		}
		name, _ := messages.ParseToolName(sr.Tool)
		now := time.Now().UTC()
		call := messages.CallRequest{CallID: messages.RoutedCallID(sr.Route, nuid.Next()), Tool: name.String(), Namespace: name.Namespace, Method: name.Method,
			Arguments: sr.Arguments, Agent: sr.Agent, QueuedAt: now, Deadline: now.Add(time.Minute)}
		subject, _ := names.Events().Queued(call.CallID, call.Turn, name.Namespace)
		msg := &nats.Msg{Subject: subject, Header: nats.Header(messages.Msgpack.NewHeader())}
		msg.Header.Set(messages.HeaderMsgID, call.CallID+".queued")
		if msg.Data, err = messages.Msgpack.Marshal(&messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: now, Request: &call}); err != nil {
			t.Error(err)
			return
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Error(err)
			return
		}
		givenMu.Lock()
		given[call.CallID] = true
		givenMu.Unlock()
		data, _ := messages.Msgpack.Marshal(&messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued})
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header(messages.Msgpack.NewHeader()), Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "a"})
	res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "old"})
	if err != nil {
		t.Fatal(err)
	}
	givenMu.Lock()
	named := given[res.CallID]
	givenMu.Unlock()
	if !named || res.IsError || len(res.Content) == 0 || res.Content[0].Text != "old" {
		t.Fatalf("result %+v, want the echo of a call the coordinator named", res)
	}
}
