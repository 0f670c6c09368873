package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// apiRefused asserts that the coordinator answers the request with the
// error code. The body is sent as JSON when it is JSON, else as it is
// (MessagePack, the API's default).
func (in *intruder) apiRefused(what, endpoint string, body []byte, code messages.ErrorCode) {
	in.t.Helper()
	msg := nats.NewMsg(names.Prefix() + ".api." + endpoint)
	if json.Valid(body) {
		msg.Header = nats.Header(messages.JSONCodec.NewHeader())
	}
	msg.Data = body
	reply, err := in.nc.RequestMsg(msg, testenv.Patience)
	if err != nil {
		in.t.Fatalf("%s trying to %s: %v", in.role, what, err)
	}
	var e messages.Error
	if json.Unmarshal(reply.Data, &e) != nil {
		if err := messages.Msgpack.Unmarshal(reply.Data, &e); err != nil {
			in.t.Fatalf("%s could %s: %s answered %q", in.role, what, endpoint, reply.Data)
		}
	}
	if e.Code != code || reply.Header.Get("Nats-Service-Error-Code") != code.StatusText() {
		in.t.Fatalf("%s trying to %s: %s answered %s %q (%s), want %s", in.role, what, endpoint,
			reply.Header.Get("Nats-Service-Error-Code"), e.Code, e.Message, code)
	}
}

func jsonBody(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// matrixState is what no refused action may change: the streams and
// stores as they are (configuration, messages, consumers), the audit log's
// records but the refusals it adds, and the keys of the catalog and the
// index but those their writers renew on a timer (workers' heartbeats,
// the indexer's lease).
type matrixState struct {
	Streams      map[string]streamSnapshot
	AuditFirst   uint64
	AuditRecords map[string]uint64
	Catalog      map[string]uint64
	Index        map[string]uint64
}

func readMatrixState(t *testing.T, srv *natsserver.Server, js jetstream.JetStream, streams []string) matrixState {
	t.Helper()
	ctx := testenv.Context(t)
	state := matrixState{Streams: snapshot(t, srv, streams...), AuditRecords: map[string]uint64{}}
	// The coordinator's duties (the audit copy, the sweep's follower) read
	// the events stream with consumers of their own, made again whenever a
	// coordinator takes a duty's lease (docs/reliability.md, "Duties of one
	// coordinator at a time"), which a loaded machine may delay past the
	// first snapshot: they are not what a refused action could change.
	queued, err := names.Filters().EventKind(messages.EventQueued)
	if err != nil {
		t.Fatal(err)
	}
	if events, ok := state.Streams[names.EventsStream()]; ok {
		for name, cfg := range events.Consumers {
			if cfg.Durable == "" && (cfg.HeadersOnly || len(cfg.FilterSubjects) == 1 && cfg.FilterSubjects[0] == queued) {
				delete(events.Consumers, name)
			}
		}
	}
	audit, err := js.Stream(ctx, names.Audit().Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := audit.Info(ctx, jetstream.WithSubjectFilter(names.Prefix()+".audit.>"))
	if err != nil {
		t.Fatal(err)
	}
	state.AuditFirst = info.State.FirstSeq
	for subject, n := range info.State.Subjects {
		if subject != names.Prefix()+".audit."+"forbidden" {
			state.AuditRecords[subject] = n
		}
	}
	revisions := func(bucket string, keep func(key string) bool) map[string]uint64 {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for key := range keys.Keys() {
			if !keep(key) {
				continue
			}
			e, err := kv.Get(ctx, key)
			if err != nil {
				t.Fatalf("%s %s: %v", bucket, key, err)
			}
			got[key] = e.Revision()
		}
		return got
	}
	state.Catalog = revisions(names.CatalogBucket(), func(key string) bool { return strings.HasPrefix(key, "tools.") })
	state.Index = revisions(names.IndexBucket(), func(key string) bool { return key != discovery.LeaseKey })
	return state
}

// TestRoleMatrix runs the deploy configuration (users.conf, with a worker
// user for namespace payments added as docs/security.md says) with the
// coordinator reading deploy/nats/identities.yaml, and an installation
// made by toolbus setup (signed identities, no identities file), each
// with the same users (installation_test.go): a worker of namespace
// demo and one of payments, and the indexer, each under its own user. Two
// agents' users (agent_a, agent_b) each have a finished call, a turn, a
// call waiting for their prompt approval, and large results in both
// namespaces' stores; a payments call is running. Then every role tries
// every action that crosses its boundary, one row each: each is refused
// (a permissions violation, or a coded error), and afterwards the calls,
// events and audit streams, the buckets and the results stores hold
// exactly what they held before.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testRoleMatrix)
}

func testRoleMatrix(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, true)
	srv, url := d.srv, d.url
	// The services must not need anything their users are refused.
	serviceViolations := make(chan error, 16)
	as := func(user string) *nats.Conn {
		return testenv.Connect(t, url, append(d.opts(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				select {
				case serviceViolations <- fmt.Errorf("%s: %w", user, err):
				default:
				}
			}
		}))...)
	}
	ctx := testenv.Context(t)

	workspace := t.TempDir()
	writeFile(t, workspace+"/bundles/demo.yaml", `
id: demo
match:
  - name: "demo:*"
  - name: "demo:sleep"
    approval: {mode: prompt, title: "Wait?", message: "This sleeps a while"}
  - name: "payments:*"
`)
	coordinatorConn := as("coordinator")
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = coordinatorConn
		cfg.Identities = d.ids
		cfg.WorkspaceDir = workspace
	})
	big := func() worker.Tool {
		return worker.Func("big", "Returns more than its result size limit.", func(ctx context.Context, in struct{}) (string, error) {
			return strings.Repeat("large ", 1000), nil
		}, worker.WithMaxResultSize(100))
	}
	testenv.Worker(t, url, worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: append(demo.Tools(), big())})
	hold := newGate()
	t.Cleanup(func() { close(hold.release) })
	testenv.Worker(t, url, worker.Config{Conn: as("worker_payments")}, worker.Namespace{Name: "payments", Tools: []worker.Tool{hold.tool(), big()}})
	ix, err := indexer.New(indexer.Config{Conn: as("indexer"), WriteInterval: 20 * time.Millisecond, LeaseTTL: time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Start(ctx); err != nil {
		t.Fatalf("the indexer cannot start with its user: %v", err)
	}
	t.Cleanup(func() { _ = ix.Stop(context.Background()) })

	// Each agent's data: a finished call, a turn, an approval waiting for
	// its user, and large results in both namespaces' stores.
	type agentData struct {
		user, agent, route, call, turn, pending, approval string
	}
	agents := map[string]*agentData{}
	for _, a := range []struct{ user, agent string }{{"agent_a", "support-bot"}, {"agent_b", "billing-bot"}} {
		c := agentClient(t, as(a.user), a.agent)
		d := &agentData{user: a.user, agent: a.agent, route: deployRoutes[a.user], turn: "turn-" + a.user}
		// A search of the turn makes the call that follows usage evidence.
		testenv.Eventually(t, "word_count to be discoverable", func() bool {
			r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "count words"})
			return err == nil && slices.Contains(discovered(r), "demo-word_count")
		})
		if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: "count the words", Turn: d.turn}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Call(ctx, "demo-word_count", map[string]string{"text": "mine alone"}, client.WithTurn(d.turn))
		if err != nil || res.Status != messages.StateCompleted {
			t.Fatalf("%s's call: %+v %v", a.user, res, err)
		}
		d.call = res.CallID
		for _, tool := range []string{"demo-big", "payments-big"} {
			if res, err := c.Call(ctx, tool, struct{}{}); err != nil || res.Status != messages.StateCompleted || res.FullResult == nil {
				t.Fatalf("%s's large result of %s: %+v %v", a.user, tool, res, err)
			}
		}
		pending, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.01}`), Turn: d.turn})
		if err != nil || pending.State != messages.StateAwaitingApproval {
			t.Fatalf("%s's prompt approval: %+v %v", a.user, pending, err)
		}
		d.pending, d.approval = pending.CallID, pending.Approval.ApprovalID
		agents[a.user] = d
	}
	// A payments call runs.
	b := agentClient(t, as("agent_b"), "billing-bot")
	held, err := b.Submit(ctx, messages.SubmitRequest{Tool: "payments-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if id := receive(t, hold.started, "the payments call to start"); id != held.CallID {
		t.Fatalf("started %s, submitted %s", id, held.CallID)
	}
	// Its start is recorded after the worker's start delay.
	awaitEvent(t, b, held.CallID, messages.EventStarted)

	// The indexer has indexed every tool, and writes no more.
	js, err := jetstream.New(coordinatorConn)
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	tools := 0
	keys, err := catalog.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key := range keys.Keys() {
		if strings.HasPrefix(key, "tools.") {
			tools++
		}
	}
	index, err := js.KeyValue(ctx, names.IndexBucket())
	if err != nil {
		t.Fatal(err)
	}
	awaitManifest(t, watchManifests(t, index), "an index of every tool", func(m discovery.Manifest) bool { return m.Tools == tools })
	// Finished calls' audit records are written asynchronously: no event says they are stored.
	testenv.Eventually(t, "the calls' audit records", func() bool { return snapshot(t, srv, names.Audit().Stream())[names.Audit().Stream()].Msgs > 0 })
	usageKV, err := js.KeyValue(ctx, names.UsageBucket())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range agents {
		evidenceOf(t, usageKV, "demo-word_count", d.agent, nil)
	}

	demoStore, err := names.NamespaceResultsBucket(demo.Name)
	if err != nil {
		t.Fatal(err)
	}
	paymentsStore, err := names.NamespaceResultsBucket("payments")
	if err != nil {
		t.Fatal(err)
	}
	calls, events, audit := names.CallsStream(), names.EventsStream(), names.Audit().Stream()
	usageStream := "KV_" + names.UsageBucket()
	watched := []string{events, "KV_" + names.TurnsBucket(), "KV_" + names.ApprovalsBucket(), usageStream, "OBJ_" + demoStore, "OBJ_" + paymentsStore}
	before := readMatrixState(t, srv, js, watched)
	if before.Streams[events].Msgs == 0 || before.Streams[usageStream].Msgs == 0 || len(before.Catalog) == 0 || len(before.Index) == 0 || len(before.AuditRecords) == 0 {
		t.Fatalf("nothing to protect: %+v", before)
	}
	auditedBefore := countAudited(t, as("auditor"), "forbidden", 0)

	// The calls are outside any turn: their events are under the bucket
	// of no turn.
	event := func(callID string, kind messages.EventKind, ns string) string {
		subject, err := names.Events().Subject(messages.TurnBucket(""), callID, kind, ns)
		if kind == messages.EventQueued {
			subject, err = names.Events().Queued(callID, "", ns)
		}
		if err != nil {
			t.Fatal(err)
		}
		return subject
	}
	forgedResult, err := messages.Msgpack.Marshal(&messages.CallEvent{CallID: held.CallID, Kind: messages.EventResult,
		Result: &messages.CallResult{CallID: held.CallID, Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("forged")}}})
	if err != nil {
		t.Fatal(err)
	}
	consumer := func(stream, name, filter string) []byte {
		return consumerRequest(t, stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter})
	}

	type row struct {
		role, what string
		try        func(in *intruder, what string)
	}
	var rows []row
	forbiddenRows := 0
	api := func(role, what, endpoint string, body any, code messages.ErrorCode) {
		data, ok := body.([]byte)
		if !ok {
			data = jsonBody(t, body)
		}
		rows = append(rows, row{role, what, func(in *intruder, what string) { in.apiRefused(what, endpoint, data, code) }})
		if code == messages.CodeForbidden {
			forbiddenRows++
		}
	}
	publish := func(role, what, subject string, body []byte) {
		rows = append(rows, row{role, what, func(in *intruder, what string) { in.denied(what, subject, body) }})
	}
	subscribe := func(role, what, subject string) {
		rows = append(rows, row{role, what, func(in *intruder, what string) { in.subscribeDenied(what, subject) }})
	}
	serverRefuses := func(role, what, subject string, body []byte, want string) {
		rows = append(rows, row{role, what, func(in *intruder, what string) {
			if got := in.refusedByServer(what, subject, body); !strings.Contains(got, want) {
				in.t.Fatalf("%s trying to %s: refused with %q, want %q", in.role, what, got, want)
			}
		}})
	}
	forbidden := messages.CodeForbidden

	// Each agent against the other's data.
	for self, other := range map[string]string{"agent_a": "agent_b", "agent_b": "agent_a"} {
		me, them := agents[self], agents[other]
		api(self, "submit as the other agent", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Agent: them.agent}, forbidden)
		api(self, "submit on the other user's route", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Agent: me.agent, Route: them.route}, forbidden)
		api(self, "list the other agent's tools", messages.EndpointToolsList, messages.ListToolsRequest{Agent: them.agent, Turn: them.turn}, forbidden)
		api(self, "activate tools in the other agent's name", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: them.agent, Turn: them.turn, Tools: []string{"demo-echo"}}, forbidden)
		api(self, "answer the other agent's approval", messages.EndpointApprovalsAnswer, messages.DecideRequest{ApprovalID: them.approval, Decision: messages.DecisionApprove}, forbidden)
		api(self, "read the other agent's call", messages.EndpointCallsGet, messages.GetCallRequest{CallID: them.call}, forbidden)
		api(self, "wait for the other agent's call", messages.EndpointCallsGet, messages.GetCallRequest{CallID: them.pending, WaitMS: 10}, forbidden)
		api(self, "read the other agent's call's events", messages.EndpointCallsEvents, messages.CallEventsRequest{CallID: them.call}, forbidden)
		api(self, "read the other agent's turn", messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: them.turn}, forbidden)
		api(self, "list the other agent's approvals", messages.EndpointApprovalsList, messages.ListApprovalsRequest{Agent: them.agent}, forbidden)
		api(self, "cancel the other agent's call", messages.EndpointCallsCancel, messages.CancelRequest{CallID: them.pending}, forbidden)
		api(self, "decide an approval as an operator", messages.EndpointApprovalsDecide, messages.DecideRequest{ApprovalID: me.approval, Decision: messages.DecisionApprove}, forbidden)
		api(self, "switch a tool off", messages.EndpointToolsDisable, messages.ToolSwitchRequest{Tool: "demo-echo"}, forbidden)
		api(self, "remove a tool from the catalog", messages.EndpointToolsRemove, messages.ToolSwitchRequest{Tool: "demo-echo"}, forbidden)
		api(self, "read what discovery learned", messages.EndpointLearningStatus, messages.LearningStatusRequest{Tool: "demo-word_count"}, forbidden)
		api(self, "switch learning off", messages.EndpointLearningDisable, messages.LearningSwitchRequest{Reason: "mine"}, forbidden)
		api(self, "forget every agent's evidence", messages.EndpointLearningReset, messages.LearningResetRequest{All: true}, forbidden)
		publish(self, "write usage evidence", "$KV."+names.UsageBucket()+"."+usage.EvidenceKey(messages.ToolName{Namespace: "demo", Method: "echo"}, them.agent), []byte(`{"terms":{"poison":8},"turns":8}`))
		api(self, "submit a batch in the other agent's name", messages.EndpointCallsSubmitBatch, messages.SubmitBatchRequest{Format: "anthropic", Agent: them.agent, Turn: them.turn, ToolCalls: messages.JSON(`[{"type":"tool_use","id":"toolu_x","name":"demo-echo","input":{"text":"x"}}]`)}, forbidden)
		api(self, "render the other agent's results", messages.EndpointCallsResults, messages.ResultsRequest{Format: "anthropic", Calls: []messages.BatchCall{{ToolCallID: "toolu_x", CallID: them.call}}}, forbidden)
		subscribe(self, "receive the other user's replies", "_INBOX_"+other+".>")
		subscribe(self, "receive every reply", "_INBOX.>")
		subscribe(self, "receive the other user's routed results", "toolbus.results."+them.route+".>")
		subscribe(self, "receive every routed result", "toolbus.results.>")
		subscribe(self, "follow every call's events", "toolbus.events.>")
		serverRefuses(self, "follow the events stream with a consumer", "$JS.API.CONSUMER.CREATE."+events+".spy."+names.Prefix()+".events.>",
			consumer(events, "spy", names.Prefix()+".events.>"), "JetStream not enabled")
		serverRefuses(self, "create a consumer on the calls stream", "$JS.API.CONSUMER.CREATE."+calls+".spy.toolbus.call.demo.>",
			consumer(calls, "spy", "toolbus.call.demo.>"), "JetStream not enabled")
		publish(self, "read the other agent's call's events directly", "$JS.API.DIRECT.GET."+events+"."+event(them.call, messages.EventResult, demo.Name), nil)
		publish(self, "run a tool without the coordinator", "toolbus.call.demo.echo", []byte(`{}`))
		publish(self, "purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`))
		publish(self, "delete the audit log", "$JS.API.STREAM.DELETE."+audit, []byte(`{}`))
	}
	// Malformed and out-of-range requests, one row each.
	api("agent_a", "send the 12-byte hostile request", messages.EndpointCallsGet, []byte{0x81, 0xa4, 0x74, 0x6f, 0x6f, 0x6c, 0xdb, 0xff, 0xff, 0xff, 0xff, 0x78}, messages.CodeMalformed)
	api("agent_a", "submit with a timeout past the range", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), TimeoutMS: 1<<63 - 1}, messages.CodeBadRequest)
	api("agent_a", "wait past the range", messages.EndpointCallsGet, messages.GetCallRequest{CallID: agents["agent_a"].call, WaitMS: 1<<63 - 1}, messages.CodeBadRequest)
	api("operator", "activate tools for an agent named *", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "*", Turn: "turn-x", Tools: []string{"demo-echo"}}, messages.CodeInvalidName)

	// The operator reads every call, but receives no one else's replies
	// or results and has no JetStream.
	api("operator", "submit on an agent's route", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Agent: "support-bot", Route: deployRoutes["agent_a"]}, forbidden)
	subscribe("operator", "receive an agent's replies", "_INBOX_agent_a.>")
	subscribe("operator", "receive an agent's routed results", "toolbus.results."+deployRoutes["agent_a"]+".>")
	subscribe("operator", "follow every call's events", "toolbus.events.>")
	serverRefuses("operator", "follow the events stream with a consumer", "$JS.API.CONSUMER.CREATE."+events+".spy."+names.Prefix()+".events.>",
		consumer(events, "spy", names.Prefix()+".events.>"), "JetStream not enabled")
	publish("operator", "run a tool without the coordinator", "toolbus.call.demo.echo", []byte(`{}`))
	publish("operator", "purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`))

	// Each worker against the other namespace.
	for self, other := range map[string]string{"demo": "payments", "payments": "demo"} {
		role, otherCall := "worker_"+self, held.CallID
		if other == demo.Name {
			otherCall = agents["agent_a"].call
		}
		// A namespace's calls are its queued events, delivered by its
		// consumer on the events stream.
		queue := func(ns string) string { return names.Prefix() + ".events.*.*.queued.*." + ns }
		create := "$JS.API.CONSUMER.CREATE." + events + ".ns_" + self
		publish(role, "create its consumer over the other namespace", create+"."+queue(other), consumer(events, "ns_"+self, queue(other)))
		publish(role, "create its consumer over every namespace", create+"."+queue("*"), consumer(events, "ns_"+self, queue("*")))
		publish(role, "create its consumer over a turn's calls", create+"."+names.Prefix()+".events.*.*.queued.turn-x.*", consumer(events, "ns_"+self, names.Prefix()+".events.*.*.queued.turn-x.*"))
		publish(role, "create its consumer over every event", create+"."+names.Prefix()+".events.>", consumer(events, "ns_"+self, names.Prefix()+".events.>"))
		publish(role, "create its consumer over its namespace's every event", create+"."+names.Prefix()+".events.*.*.*."+self, consumer(events, "ns_"+self, names.Prefix()+".events.*.*.*."+self))
		publish(role, "create its consumer with the other namespace's filter in the body", create+"."+queue(self), consumer(events, "ns_"+self, queue(other)))
		// Its own consumer is the coordinator's to configure: a
		// configuration names where the stream delivers.
		publish(role, "create its own consumer", create+"."+queue(self), consumer(events, "ns_"+self, queue(self)))
		publish(role, "make its own consumer deliver to the other namespace's result", create+"."+queue(self),
			consumerRequest(t, events, jetstream.ConsumerConfig{Durable: "ns_" + self, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: queue(self),
				DeliverSubject: event(otherCall, messages.EventResult, other)}))
		publish(role, "ask for the other namespace's consumer", names.Prefix()+".consumers."+other, []byte(`{"max_concurrency":1,"ack_wait_ms":3,"max_attempts":1}`))
		publish(role, "create the other namespace's consumer", "$JS.API.CONSUMER.CREATE."+events+".ns_"+other+"."+queue(other), consumer(events, "ns_"+other, queue(other)))
		publish(role, "pull the other namespace's calls", "$JS.API.CONSUMER.MSG.NEXT."+events+".ns_"+other, []byte(`{"batch":1}`))
		publish(role, "delete the other namespace's consumer", "$JS.API.CONSUMER.DELETE."+events+".ns_"+other, nil)
		publish(role, "delete its own consumer", "$JS.API.CONSUMER.DELETE."+events+".ns_"+self, nil)
		publish(role, "read the other namespace's consumer", "$JS.API.CONSUMER.INFO."+events+".ns_"+other, nil)
		publish(role, "acknowledge the other namespace's call", "$JS.ACK."+events+".ns_"+other+".1.1.1.1.0", nil)
		publish(role, "create a consumer of its own over the other namespace", "$JS.API.CONSUMER.CREATE."+events+".spy."+queue(other), consumer(events, "spy", queue(other)))
		publish(role, "create an ephemeral consumer on the events", "$JS.API.CONSUMER.CREATE."+events, consumerRequest(t, events, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}))
		publish(role, "create a durable consumer the old way", "$JS.API.CONSUMER.DURABLE.CREATE."+events+".ns_"+self, consumer(events, "ns_"+self, queue(other)))
		// The streams' information lists the subjects they hold, by
		// subjects_filter: every call's ID, kind and namespace, and the
		// approvals' and turns' keys.
		publish(role, "list the calls by the events stream's subjects", "$JS.API.STREAM.INFO."+events, []byte(`{"subjects_filter":">"}`))
		publish(role, "list the approvals by their bucket's subjects", "$JS.API.STREAM.INFO.KV_"+names.ApprovalsBucket(), []byte(`{"subjects_filter":">"}`))
		publish(role, "list the turns by their bucket's subjects", "$JS.API.STREAM.INFO.KV_"+names.TurnsBucket(), []byte(`{"subjects_filter":">"}`))
		publish(role, "read the audit stream's information", "$JS.API.STREAM.INFO."+names.Audit().Stream(), []byte(`{"subjects_filter":">"}`))
		publish(role, "read queued calls by sequence", "$JS.API.DIRECT.GET."+events, []byte(`{"seq":1}`))
		publish(role, "read a queued call from the leader", "$JS.API.STREAM.MSG.GET."+events, []byte(`{"seq":1}`))
		publish(role, "delete a queued call", "$JS.API.STREAM.MSG.DELETE."+events, []byte(`{"seq":1}`))
		publish(role, "purge the events stream", "$JS.API.STREAM.PURGE."+events, []byte(`{}`))
		publish(role, "delete the events stream", "$JS.API.STREAM.DELETE."+events, []byte(`{}`))
		publish(role, "use the old calls stream's consumer", "$JS.API.CONSUMER.MSG.NEXT."+calls+".ns_"+self, []byte(`{"batch":1}`))
		publish(role, "commit a result for the other namespace's call", event(otherCall, messages.EventResult, other), forgedResult)
		publish(role, "record a start for the other namespace's call", event(otherCall, messages.EventStarted, other), forgedResult)
		publish(role, "report progress for the other namespace's call", event(otherCall, messages.EventProgress, other), forgedResult)
		publish(role, "record a call as queued", event(otherCall, messages.EventQueued, self), forgedResult)
		publish(role, "record a call as queued in a turn", names.Prefix()+".events."+messages.TurnBucket("turn-x")+"."+otherCall+".queued.turn-x."+self, forgedResult)
		publish(role, "record a call as queued without a bucket", names.Prefix()+".events."+otherCall+".queued.turn-x."+self, forgedResult)
		publish(role, "record a call as queued the version 2 way", names.Prefix()+".events."+otherCall+".queued."+self, forgedResult)
		publish(role, "read the other namespace's call's events directly", "$JS.API.DIRECT.GET."+events+"."+event(otherCall, messages.EventQueued, other), nil)
		publish(role, "read events in a batch", "$JS.API.DIRECT.GET."+events, []byte(`{"multi_last":["`+names.Prefix()+`.events.>"]}`))
		publish(role, "follow the events stream", "$JS.API.CONSUMER.CREATE."+events+".spy."+names.Prefix()+".events.>", consumer(events, "spy", names.Prefix()+".events.>"))
		otherStore := map[string]string{"demo": demoStore, "payments": paymentsStore}[other]
		ownStore := map[string]string{"demo": demoStore, "payments": paymentsStore}[self]
		publish(role, "write the other namespace's results store", "$O."+otherStore+".C.chunk", []byte("x"))
		publish(role, "replace a large result of the other namespace", "$O."+otherStore+".M.bWV0YQ==", []byte("{}"))
		publish(role, "purge the other namespace's results store", "$JS.API.STREAM.PURGE.OBJ_"+otherStore, []byte(`{}`))
		publish(role, "create the other namespace's results store", "$JS.API.STREAM.CREATE.OBJ_"+otherStore, []byte(`{}`))
		publish(role, "change the other namespace's results store", "$JS.API.STREAM.UPDATE.OBJ_"+otherStore, []byte(`{}`))
		publish(role, "delete the other namespace's large result's chunks", "$JS.API.STREAM.MSG.DELETE.OBJ_"+otherStore, []byte(`{"seq":1}`))
		publish(role, "purge its own results store", "$JS.API.STREAM.PURGE.OBJ_"+ownStore, []byte(`{}`))
		publish(role, "delete its own results store", "$JS.API.STREAM.DELETE.OBJ_"+ownStore, []byte(`{}`))
		publish(role, "register the other namespace's tools", "$KV.toolbus_catalog.tools."+other+".forged", []byte(`{}`))
		publish(role, "write usage evidence for its own tool", "$KV."+names.UsageBucket()+"."+usage.EvidenceKey(messages.ToolName{Namespace: self, Method: "big"}, "support-bot"), []byte(`{"terms":{"poison":8},"turns":8}`))
		publish(role, "switch learning off", "$KV."+names.UsageBucket()+"."+usage.SettingsKey, []byte(`{"disabled":true}`))
		publish(role, "read usage evidence", "$JS.API.DIRECT.GET."+usageStream, []byte(`{"seq":1}`))
		publish(role, "call the API", names.Prefix()+".api.calls.get", jsonBody(t, messages.GetCallRequest{CallID: otherCall}))
		subscribe(role, "listen to the other namespace's calls", "toolbus.call."+other+".>")
		subscribe(role, "listen to the other worker's replies", "_INBOX_worker_"+other+".>")
		subscribe(role, "listen to every call's events", "toolbus.events.>")
		publish(role, "purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`))
		publish(role, "delete the audit log", "$JS.API.STREAM.DELETE."+audit, []byte(`{}`))
		publish(role, "delete an audit record", "$JS.API.STREAM.MSG.DELETE."+audit, []byte(`{"seq":1}`))
		publish(role, "shorten the audit retention", "$JS.API.STREAM.UPDATE."+audit, []byte(`{}`))
	}

	// The indexer reads the catalog and writes the index, nothing else.
	publish("indexer", "pull calls", "$JS.API.CONSUMER.MSG.NEXT."+events+".ns_demo", []byte(`{"batch":1}`))
	publish("indexer", "read queued calls", "$JS.API.DIRECT.GET."+events, []byte(`{"seq":1}`))
	publish("indexer", "list the calls by the events stream's subjects", "$JS.API.STREAM.INFO."+events, []byte(`{"subjects_filter":">"}`))
	publish("indexer", "list the approvals by their bucket's subjects", "$JS.API.STREAM.INFO.KV_"+names.ApprovalsBucket(), []byte(`{"subjects_filter":">"}`))
	publish("indexer", "list the turns by their bucket's subjects", "$JS.API.STREAM.INFO.KV_"+names.TurnsBucket(), []byte(`{"subjects_filter":">"}`))
	publish("indexer", "read a queued call from the leader", "$JS.API.STREAM.MSG.GET."+events, []byte(`{"seq":1}`))
	publish("indexer", "delete a namespace's consumer", "$JS.API.CONSUMER.DELETE."+events+".ns_payments", nil)
	publish("indexer", "create a consumer on the queued calls", "$JS.API.CONSUMER.CREATE."+events+".spy.toolbus.events.*.*.queued.*.payments", consumer(events, "spy", "toolbus.events.*.*.queued.*.payments"))
	publish("indexer", "delete the events stream", "$JS.API.STREAM.DELETE."+events, []byte(`{}`))
	publish("indexer", "delete an audit record", "$JS.API.STREAM.MSG.DELETE."+audit, []byte(`{"seq":1}`))
	publish("indexer", "shorten the audit retention", "$JS.API.STREAM.UPDATE."+audit, []byte(`{}`))
	publish("indexer", "read a call's events", "$JS.API.DIRECT.GET."+events+"."+event(held.CallID, messages.EventQueued, "payments"), nil)
	publish("indexer", "commit a result", event(held.CallID, messages.EventResult, "payments"), forgedResult)
	publish("indexer", "read a large result", "$JS.API.DIRECT.GET.OBJ_"+demoStore+".$O."+demoStore+".M.x", nil)
	publish("indexer", "purge a results store", "$JS.API.STREAM.PURGE.OBJ_"+demoStore, []byte(`{}`))
	publish("indexer", "write a turn", "$KV.toolbus_turns.turn-x", []byte(`{}`))
	publish("indexer", "purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`))
	publish("indexer", "delete the audit log", "$JS.API.STREAM.DELETE."+audit, []byte(`{}`))
	publish("indexer", "write an audit record", names.Prefix()+".audit.allow", []byte(`{}`))
	for _, stream := range []string{"KV_" + names.IndexBucket(), "KV_" + names.CatalogBucket()} {
		publish("indexer", "create a consumer on "+stream, "$JS.API.CONSUMER.CREATE."+stream, consumerRequest(t, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverSubject: "toolbus.api.tools.disable"}))
	}
	publish("indexer", "ask for a namespace's consumer", names.Prefix()+".consumers.demo", []byte(`{}`))
	publish("indexer", "write usage evidence", "$KV."+names.UsageBucket()+"."+usage.EvidenceKey(messages.ToolName{Namespace: "demo", Method: "echo"}, "support-bot"), []byte(`{"terms":{"poison":8},"turns":8}`))
	publish("indexer", "switch learning off", "$KV."+names.UsageBucket()+"."+usage.SettingsKey, []byte(`{"disabled":true}`))
	publish("indexer", "purge the usage evidence", "$JS.API.STREAM.PURGE."+usageStream, []byte(`{}`))
	publish("indexer", "create a consumer on the usage evidence", "$JS.API.CONSUMER.CREATE."+usageStream, consumerRequest(t, usageStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverSubject: "toolbus.api.learning.disable"}))
	subscribe("indexer", "listen to calls", "toolbus.call.>")
	subscribe("indexer", "listen to the coordinator's replies", "_INBOX_coordinator.>")

	// The coordinator may not purge or delete a stream either.
	for _, stream := range []string{audit, events, usageStream, "OBJ_" + demoStore} {
		publish("coordinator", "purge "+stream, "$JS.API.STREAM.PURGE."+stream, []byte(`{}`))
		publish("coordinator", "delete "+stream, "$JS.API.STREAM.DELETE."+stream, []byte(`{}`))
	}
	publish("coordinator", "delete an audit record", "$JS.API.STREAM.MSG.DELETE."+audit, []byte(`{"seq":1}`))
	publish("coordinator", "delete a call's event", "$JS.API.STREAM.MSG.DELETE."+events, []byte(`{"seq":1}`))

	// The auditor reads the audit log, and only reads it.
	publish("auditor", "purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`))
	publish("auditor", "delete the audit log", "$JS.API.STREAM.DELETE."+audit, []byte(`{}`))
	publish("auditor", "delete an audit record", "$JS.API.STREAM.MSG.DELETE."+audit, []byte(`{"seq":1}`))
	publish("auditor", "shorten the audit retention", "$JS.API.STREAM.UPDATE."+audit, []byte(`{}`))
	publish("auditor", "read queued calls", "$JS.API.DIRECT.GET."+calls, []byte(`{"seq":1}`))
	publish("auditor", "read a call's events", "$JS.API.DIRECT.GET."+events+"."+event(held.CallID, messages.EventQueued, "payments"), nil)
	publish("auditor", "call the API", names.Prefix()+".api.calls.get", jsonBody(t, messages.GetCallRequest{CallID: held.CallID}))
	subscribe("auditor", "listen to every call's events", "toolbus.events.>")
	publish("auditor", "follow the audit log with a consumer", "$JS.API.CONSUMER.CREATE."+audit, consumerRequest(t, audit, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}))

	for _, r := range rows {
		t.Run(r.role+"/"+r.what, func(t *testing.T) {
			r.try(d.intruder(t, r.role), r.what)
		})
	}

	if after := readMatrixState(t, srv, js, watched); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused actions changed the installation:\nbefore %+v\nafter  %+v", before, after)
	}
	// Every refusal by the coordinator is in the audit log.
	if n := countAudited(t, as("auditor"), "forbidden", auditedBefore+forbiddenRows); n < auditedBefore+forbiddenRows {
		t.Errorf("%d forbidden requests audited, want at least %d", n-auditedBefore, forbiddenRows)
	}
	select {
	case err := <-serviceViolations:
		t.Fatalf("a service hit a permission it needs: %v", err)
	default:
	}
}
