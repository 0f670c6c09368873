package integration

import (
	"context"
	"errors"
	"reflect"
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
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestWorkerCannotHaveAStreamWriteForIt: a stream sends the answer to a
// direct get to the reply subject its requester names, and a stream whose
// subjects cover that subject stores it. A worker of demo writes an event
// of its own holding a forged result for a running payments call, then
// asks for that event by direct get with the payments call's result
// subject as the reply, and with the subjects of a queued call, an audit
// record, an approval and a payments tool as well. On the deploy
// configuration each namespace's workers are users of an account of their
// own, whose requests cross an import: the answers go back to the worker's
// account through the import's reply mapping, where nothing stores them.
// Nothing of it is stored, and the payments call ends with its own
// result. The same worker may not create a consumer, whose deliver
// subject it would name, not even its namespace's: the coordinator
// configures that one to the settings the worker sends.
func TestWorkerCannotHaveAStreamWriteForIt(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testWorkerCannotHaveAStreamWriteForIt)
}

func testWorkerCannotHaveAStreamWriteForIt(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, true)
	srv, url, as := d.srv, d.url, d.connector(t)
	ctx := testenv.Context(t)
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator")
		cfg.Identities = d.ids
	})
	hold := newGate()
	testenv.Worker(t, url, worker.Config{Conn: as("worker_payments"), AckWait: 7 * time.Second},
		worker.Namespace{Name: "payments", Tools: []worker.Tool{hold.tool()}, MaxAttempts: 2, MaxConcurrency: 5})
	agent := agentClient(t, as("agent_a"), "support-bot")
	held, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "payments-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, hold.started, "the payments call to start")
	awaitEvent(t, agent, held.CallID, messages.EventStarted)
	// Without a policy, an allowed call is not audited: nothing writes to
	// the audit stream until the end.

	// The payments consumer is a pull consumer with the worker's settings,
	// made by the coordinator.
	js, err := jetstream.New(as("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_payments")
	if err != nil {
		t.Fatal(err)
	}
	if c := cons.CachedInfo().Config; c.DeliverSubject != "" || c.AckWait != 7*time.Second || c.MaxDeliver != 3 || c.MaxAckPending != 5 || c.FilterSubject != "toolbus.events.*.*.queued.*.payments" {
		t.Fatalf("the payments consumer: %+v", c)
	}

	events := names.EventsStream()
	// The catalog is left out: heartbeats change it on a timer. Its keys
	// are checked below.
	watched := []string{events, names.Audit().Stream(), "KV_" + names.ApprovalsBucket()}
	before := snapshot(t, srv, watched...)
	demo := d.intruder(t, "worker_demo")
	bucket := messages.TurnBucket("")
	forged := forgedResult(t, held.CallID)
	// Its own event, which it may write: under demo, it counts for nothing.
	own := names.Prefix() + ".events." + bucket + "." + held.CallID + ".log.demo"
	stored := make(chan *nats.Msg, 1)
	demo.store(own, forged, stored)
	demo.answerElsewhere("$JS.API.DIRECT.GET."+events+"."+own, []string{
		names.Prefix() + ".events." + bucket + "." + held.CallID + ".result.payments",
		names.Prefix() + ".events." + bucket + ".forgedcall.queued.~.payments",
		names.Prefix() + ".audit." + messages.AuditAllowed,
		"$KV." + names.ApprovalsBucket() + ".approvals." + held.CallID,
		"$KV." + names.CatalogBucket() + ".tools.payments.forged",
	})
	// A write of its own after that is stored after anything they had the
	// streams store.
	demo.store(own, forged, stored)
	after := snapshot(t, srv, watched...)
	if got, want := after[events].Msgs, before[events].Msgs+2; got != want {
		t.Fatalf("the events stream holds %d messages, want %d: the worker's two events and nothing else", got, want)
	}
	delete(after, events)
	delete(before, events)
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("the direct gets' answers were stored:\nbefore %+v\nafter  %+v", before, after)
	}
	assertNoCatalogKey(t, js, "tools.payments.forged")
	for _, subject := range []string{
		"$JS.API.CONSUMER.CREATE." + events + ".ns_demo.toolbus.events.*.*.queued.*.demo",
		"$JS.API.CONSUMER.CREATE." + events + ".ns_payments.toolbus.events.*.*.queued.*.payments",
		"$JS.API.CONSUMER.CREATE." + events,
	} {
		push := consumerRequest(t, events, jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubject: "toolbus.events.*.*.queued.*.demo", DeliverSubject: names.Prefix() + ".events." + bucket + "." + held.CallID + ".result.payments"})
		demo.denied("create a consumer that delivers to a payments call's result", subject, push)
	}

	close(hold.release)
	if res, err := agent.Wait(ctx, held.CallID); err != nil || res.Status != messages.StateCompleted || resultText(res) != "released" {
		t.Fatalf("the payments call: %+v %v", res, err)
	}
}

// TestAuditorReadsTheAuditLogOnly: the auditor reads the audit log by
// batched direct gets from a sequence on, as docs/security.md says, and
// creates no consumer (whose deliver subject it would name); its direct
// gets' answers cannot be sent to a subject a stream stores, and nothing
// else of TOOLBUS is in its reach.
func TestAuditorReadsTheAuditLogOnly(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testAuditorReadsTheAuditLogOnly)
}

func testAuditorReadsTheAuditLogOnly(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	srv, as := d.srv, d.connector(t)
	ctx := testenv.Context(t)
	a := agentClient(t, as("agent_a"), "support-bot")
	res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "audited"})
	if err != nil {
		t.Fatal(err)
	}
	countAudited(t, as("auditor"), messages.AuditAllowed, 1)
	auditor := d.intruder(t, "auditor")
	audit := names.Audit().Stream()
	records := make(chan *nats.Msg, 64)
	auditor.request("$JS.API.DIRECT.GET."+audit, []byte(`{"seq":1,"batch":50}`), records)
	var read int
	for msg := receive(t, records, "the first audit record"); msg.Header.Get("Status") == ""; msg = receive(t, records, "the next audit record or the batch's end") {
		if msg.Header.Get(jetstream.SubjectHeader) == names.Prefix()+".audit."+messages.AuditCalls {
			var batch messages.AuditBatch
			if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &batch); err != nil || len(batch.Records) == 0 || batch.Records[0].Decision == "" {
				t.Fatalf("a batch of audit records: %v %s", err, msg.Data)
			}
		} else {
			var rec messages.AuditRecord
			if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &rec); err != nil || rec.Decision == "" {
				t.Fatalf("an audit record: %v %s", err, msg.Data)
			}
		}
		read++
	}
	if read == 0 {
		t.Fatal("the auditor read no audit record")
	}

	events := names.EventsStream()
	watched := []string{events, audit}
	before := snapshot(t, srv, watched...)
	result := names.Prefix() + ".events." + messages.TurnBucket("") + "." + res.CallID + ".result.demo"
	if err := auditor.nc.PublishRequest("$JS.API.DIRECT.GET."+audit, result, []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	// Answered after the one above, on the same stream's queue.
	last := make(chan *nats.Msg, 1)
	auditor.request("$JS.API.DIRECT.GET."+audit, []byte(`{"seq":1}`), last)
	receive(t, last, "the auditor's direct get")
	for what, subject := range map[string]string{
		"create a consumer on the audit log": "$JS.API.CONSUMER.CREATE." + audit + ".export",
		"create an ephemeral audit consumer": "$JS.API.CONSUMER.CREATE." + audit,
		"read a call's events":               "$JS.API.DIRECT.GET." + events + "." + result,
		"read the events stream by sequence": "$JS.API.DIRECT.GET." + events,
		"read the events stream's info":      "$JS.API.STREAM.INFO." + events,
		"purge the audit log":                "$JS.API.STREAM.PURGE." + audit,
		"ask for a namespace's consumer":     names.Prefix() + ".consumers.demo",
		"write an audit record":              names.Prefix() + ".audit." + messages.AuditAllowed,
		"call the API":                       names.Prefix() + ".api.calls.get",
	} {
		body := consumerRequest(t, audit, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverSubject: result})
		auditor.denied(what, subject, body)
	}
	// The audit stream grew by the refusals' own records at most.
	after := snapshot(t, srv, watched...)
	if !reflect.DeepEqual(after[events], before[events]) {
		t.Fatalf("the events stream changed:\nbefore %+v\nafter  %+v", before[events], after[events])
	}
	if got, err := a.Get(ctx, res.CallID); err != nil || got.Result == nil || resultText(got.Result) != resultText(res) {
		t.Fatalf("the call's result: %+v %v", got, err)
	}
}

// TestIndexerCannotHaveAStreamWriteForIt: the indexer writes its index
// bucket, with values and headers of its choice. It stores a forged result
// for a demo call there, then asks for it by direct get with the reply
// subjects of the call's result, of a queued call, an approval, an audit
// record, a catalog tool and the API. On the deploy configuration the
// indexer is a user of an account of its own: the answers go back to it
// through the import's reply mapping, and nothing of it is stored or
// reaches the coordinator. It may not create a consumer on either bucket
// (a consumer names its deliver subject); it follows them by direct gets
// (transport.WatchKV), and still indexes every tool.
func TestIndexerCannotHaveAStreamWriteForIt(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testIndexerCannotHaveAStreamWriteForIt)
}

func testIndexerCannotHaveAStreamWriteForIt(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	srv, as := d.srv, d.connector(t)
	ctx := testenv.Context(t)
	ix, err := indexer.New(indexer.Config{Conn: as("indexer"), WriteInterval: 20 * time.Millisecond, LeaseTTL: time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Start(ctx); err != nil {
		t.Fatalf("the indexer cannot start with its user: %v", err)
	}
	t.Cleanup(func() { _ = ix.Stop(context.Background()) })
	a := agentClient(t, as("agent_a"), "support-bot")
	res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "indexed"})
	if err != nil {
		t.Fatal(err)
	}
	countAudited(t, as("coordinator"), messages.AuditAllowed, 1)
	js, err := jetstream.New(as("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := js.KeyValue(ctx, names.IndexBucket())
	if err != nil {
		t.Fatal(err)
	}
	// It indexes every tool of the catalog, which it follows without a
	// consumer: the demo tools and the built-in one.
	awaitManifest(t, watchManifests(t, index), "an index of the tools", func(m discovery.Manifest) bool { return m.Tools == len(demo.Tools())+1 })

	events := names.EventsStream()
	watched := []string{events, names.Audit().Stream(), "KV_" + names.ApprovalsBucket()}
	before := snapshot(t, srv, watched...)
	intruder := d.intruder(t, "indexer")
	bucket := messages.TurnBucket("")
	key := "$KV." + names.IndexBucket() + ".forged"
	intruder.store(key, forgedResult(t, res.CallID), make(chan *nats.Msg, 1))
	intruder.answerElsewhere("$JS.API.DIRECT.GET.KV_"+names.IndexBucket()+"."+key, []string{
		names.Prefix() + ".events." + bucket + "." + res.CallID + ".result.demo",
		names.Prefix() + ".events." + bucket + ".forgedcall.queued.~.demo",
		names.Prefix() + ".audit." + messages.AuditAllowed,
		"$KV." + names.ApprovalsBucket() + ".approvals." + res.CallID,
		"$KV." + names.CatalogBucket() + ".tools.demo.forged",
		names.Prefix() + ".api.tools.disable",
	})
	// A write of the coordinator's after that is stored after anything
	// they had the streams store.
	if _, err := js.Publish(ctx, names.Prefix()+".events."+bucket+".barrier.log.demo", nil); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, srv, watched...)
	if got, want := after[events].Msgs, before[events].Msgs+1; got != want {
		t.Fatalf("the events stream holds %d messages, want %d: the coordinator's one and nothing else", got, want)
	}
	delete(after, events)
	delete(before, events)
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("the direct gets' answers were stored:\nbefore %+v\nafter  %+v", before, after)
	}
	assertNoCatalogKey(t, js, "tools.demo.forged")
	for _, stream := range []string{"KV_" + names.IndexBucket(), "KV_" + names.CatalogBucket()} {
		push := consumerRequest(t, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverSubject: names.Prefix() + ".events." + bucket + "." + res.CallID + ".result.demo"})
		intruder.denied("create a consumer on "+stream, "$JS.API.CONSUMER.CREATE."+stream, push)
		intruder.denied("create a named consumer on "+stream, "$JS.API.CONSUMER.CREATE."+stream+".relay."+key, push)
	}
	if got, err := a.Get(ctx, res.CallID); err != nil || got.Result == nil || resultText(got.Result) != resultText(res) {
		t.Fatalf("the call's result: %+v %v", got, err)
	}
	assertNotDisabled(t, as("coordinator"), ctx, "demo.sha256")
}

// forgedResult is a committed-looking result event of callID that nobody
// but a forger wrote.
func forgedResult(t *testing.T, callID string) []byte {
	t.Helper()
	data, err := messages.Msgpack.Marshal(&messages.CallEvent{CallID: callID, Kind: messages.EventResult,
		Result: &messages.CallResult{CallID: callID, Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("forged")}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// store publishes data on a subject a stream stores and waits for its
// acknowledgement, on acks.
func (in *intruder) store(subject string, data []byte, acks chan *nats.Msg) {
	in.t.Helper()
	in.request(subject, data, acks)
	if ack := receive(in.t, acks, in.role+"'s write to be stored"); !strings.Contains(string(ack.Data), `"seq"`) {
		in.t.Fatalf("%s storing on %s: %s", in.role, subject, ack.Data)
	}
}

// answerElsewhere sends the direct get get once for each of replies, as
// its reply subject, and then once with its own: the stream answers in
// order, so once that answer is in, it has sent the others.
func (in *intruder) answerElsewhere(get string, replies []string) {
	in.t.Helper()
	for _, reply := range replies {
		if err := in.nc.PublishRequest(get, reply, nil); err != nil {
			in.t.Fatal(err)
		}
	}
	answered := make(chan *nats.Msg, 1)
	in.request(get, nil, answered)
	if msg := receive(in.t, answered, in.role+"'s own direct get"); msg.Header.Get("Nats-Sequence") == "" {
		in.t.Fatalf("%s's own direct get: %v %s", in.role, msg.Header, msg.Data)
	}
}

// assertNoCatalogKey fails the test if the catalog holds key.
func assertNoCatalogKey(t *testing.T, js jetstream.JetStream, key string) {
	t.Helper()
	catalog, err := js.KeyValue(testenv.Context(t), names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.Get(testenv.Context(t), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the catalog holds the forged key %s: %v", key, err)
	}
}
