package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/indexer"
	"github.com/toolbus/toolbus/internal/natsflags"
	"github.com/toolbus/toolbus/internal/natsserver"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// deployDir is the folder of the deploy configurations.
func deployDir(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "deploy", "nats")
}

// deployIdentities is the deploy configuration's identities file, which
// the coordinator needs to serve the agents' users.
func deployIdentities(t *testing.T) *coordinator.Identities {
	t.Helper()
	ids, err := coordinator.LoadIdentities(filepath.Join(deployDir(t), "identities.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// deployWithNamespace writes the deploy configuration into a fresh folder
// with a worker user for namespace ns added the way users.inc says to:
// the worker_demo block and user copied, with every "demo" replaced. It
// returns the path of the server configuration.
func deployWithNamespace(t *testing.T, ns string) string {
	t.Helper()
	deploy := deployDir(t)
	conf, err := os.ReadFile(filepath.Join(deploy, "users.conf"))
	if err != nil {
		t.Fatal(err)
	}
	inc, err := os.ReadFile(filepath.Join(deploy, "users.inc"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(inc)
	start := strings.Index(text, "WORKER_DEMO_PERMISSIONS = {")
	end := start + strings.Index(text[start:], "\n}\n") + len("\n}\n")
	userStart := strings.Index(text, "{ user: worker_demo")
	userEnd := userStart + strings.Index(text[userStart:], "\n")
	if start < 0 || end < start || userStart < 0 {
		t.Fatal("users.inc has no worker_demo block and user to copy")
	}
	rename := strings.NewReplacer("demo", ns, "DEMO", strings.ToUpper(ns))
	block, user := rename.Replace(text[start:end]), rename.Replace(text[userStart:userEnd])
	text = text[:userEnd] + "\n      " + user + text[userEnd:]
	text = text[:end] + block + text[end:]
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "users.inc"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "users.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deployPassword is the password the deploy configuration gives user.
func deployPassword(user string) string { return strings.ReplaceAll(user, "_", "-") + "-secret" }

// deployUser returns the options of a connection as a user of the deploy
// configuration: every user receives replies under its own inbox prefix,
// as the commands and the agents' programs connect.
func deployUser(user, password string) []nats.Option {
	return []nats.Option{nats.UserInfo(user, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user))}
}

// intruder is a connection of one role that tries what its role may not.
type intruder struct {
	t          *testing.T
	role       string
	nc         *nats.Conn
	violations chan error
}

func newIntruder(t *testing.T, url, user, password string) *intruder {
	in := &intruder{t: t, role: user, violations: make(chan error, 64)}
	in.nc = testenv.Connect(t, url, append(deployUser(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			in.violations <- err
		}
	}))...)
	return in
}

// awaitViolation waits for the server to report that the connection may
// not use subject; a reply on answers, if one comes first, fails the test.
func (in *intruder) awaitViolation(subject, what string, answers <-chan *nats.Msg) {
	in.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-in.violations:
			if strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case msg := <-answers:
			in.t.Fatalf("%s could %s: %s answered %q", in.role, what, subject, msg.Data)
		case <-deadline:
			in.t.Fatalf("%s tried to %s: no permissions violation for %s", in.role, what, subject)
		}
	}
}

// request sends a JetStream API request and returns its answer, or nil
// when the server refused the subject.
func (in *intruder) request(subject string, body []byte, answers chan *nats.Msg) {
	in.t.Helper()
	inbox := in.nc.NewInbox()
	sub, err := in.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		in.t.Fatal(err)
	}
	in.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := in.nc.PublishRequest(subject, inbox, body); err != nil {
		in.t.Fatal(err)
	}
}

// denied asserts that the request is refused by the role's permissions.
func (in *intruder) denied(what, subject string, body []byte) {
	in.t.Helper()
	answers := make(chan *nats.Msg, 1)
	in.request(subject, body, answers)
	in.awaitViolation(subject, what, answers)
}

// refusedByServer asserts that the role may send the request but the
// server answers it with an error.
func (in *intruder) refusedByServer(what, subject string, body []byte) string {
	in.t.Helper()
	answers := make(chan *nats.Msg, 1)
	in.request(subject, body, answers)
	select {
	case msg := <-answers:
		var reply struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Error == nil {
			in.t.Fatalf("%s could %s: %s answered %q", in.role, what, subject, msg.Data)
		}
		return reply.Error.Description
	case err := <-in.violations:
		in.t.Fatalf("%s trying to %s: expected the server to answer, got %v", in.role, what, err)
	case <-time.After(10 * time.Second):
		in.t.Fatalf("%s trying to %s: no answer to %s", in.role, what, subject)
	}
	return ""
}

// subscribeDenied asserts that the role may not subscribe to subject.
func (in *intruder) subscribeDenied(what, subject string) {
	in.t.Helper()
	answers := make(chan *nats.Msg, 16)
	sub, err := in.nc.ChanSubscribe(subject, answers)
	if err != nil {
		in.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-in.violations:
			if strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case msg := <-answers:
			in.t.Fatalf("%s could %s: received %s", in.role, what, msg.Subject)
		case <-deadline:
			in.t.Fatalf("%s tried to %s: no permissions violation for %s", in.role, what, subject)
		}
	}
}

// streamSnapshot is what an intruder must not change in a stream: its
// configuration, its messages, and its consumers' configurations.
type streamSnapshot struct {
	Config    server.StreamConfig
	Msgs      uint64
	FirstSeq  uint64
	LastSeq   uint64
	Consumers map[string]server.ConsumerConfig
}

// snapshot reads the streams' state from the server itself, with no
// user's permissions in the way.
func snapshot(t *testing.T, srv *natsserver.Server, streams ...string) map[string]streamSnapshot {
	t.Helper()
	jsz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]streamSnapshot{}
	for _, acc := range jsz.AccountDetails {
		for _, sd := range acc.Streams {
			snap := streamSnapshot{Config: *sd.Config, Msgs: sd.State.Msgs, FirstSeq: sd.State.FirstSeq, LastSeq: sd.State.LastSeq, Consumers: map[string]server.ConsumerConfig{}}
			for _, ci := range sd.Consumer {
				snap.Consumers[ci.Name] = *ci.Config
			}
			got[sd.Name] = snap
		}
	}
	for name := range got {
		keep := false
		for _, s := range streams {
			keep = keep || s == name
		}
		if !keep {
			delete(got, name)
		}
	}
	if len(got) != len(streams) {
		t.Fatalf("streams %v, found %d", streams, len(got))
	}
	return got
}

func consumerRequest(t *testing.T, stream string, cfg jetstream.ConsumerConfig) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{"stream_name": stream, "config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestRolesAreConfined runs the deploy configuration with a worker of
// namespace demo, a worker of namespace payments (added by copying the
// demo worker's user), an indexer and a coordinator, each under its own
// user, and tries every action that crosses a role's boundary: taking or
// reading another namespace's calls, widening a consumer's filter over
// another namespace, deleting another namespace's consumer, purging or
// deleting the audit log, and purging the large results. Each is refused,
// and the calls, audit and results streams and the calls consumers are
// exactly as they were.
func TestRolesAreConfined(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), ConfigFile: deployWithNamespace(t, "payments")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url := srv.URL()
	// The services must not need anything their users are refused.
	serviceViolations := make(chan error, 16)
	as := func(user, password string) *nats.Conn {
		return testenv.Connect(t, url, append(deployUser(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				select {
				case serviceViolations <- fmt.Errorf("%s: %w", user, err):
				default:
				}
			}
		}))...)
	}
	ctx := testenv.Context(t)

	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator", "coordinator-secret")
		cfg.Identities = deployIdentities(t)
		cfg.Policy = mustPolicy(t, testPolicy)
	})
	ix, err := indexer.New(indexer.Config{Conn: as("indexer", "indexer-secret"), WriteInterval: 20 * time.Millisecond, LeaseTTL: time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Start(ctx); err != nil {
		t.Fatalf("the indexer cannot start with its user: %v", err)
	}
	t.Cleanup(func() { _ = ix.Stop(context.Background()) })
	agent := agentClient(t, as("agent_a", "agent-a-secret"), "support-bot")
	demoWorker := newIntruder(t, url, "worker_demo", "worker-demo-secret")
	paymentsWorker := newIntruder(t, url, "worker_payments", "worker-payments-secret")
	indexerUser := newIntruder(t, url, "indexer", "indexer-secret")
	coordinatorUser := newIntruder(t, url, "coordinator", "coordinator-secret")
	demoBucket, err := names.NamespaceResultsBucket(demo.Name)
	if err != nil {
		t.Fatal(err)
	}
	calls, audit, results := names.CallsStream(), names.AuditStream(), "OBJ_"+demoBucket
	watched := []string{calls, audit}
	before := snapshot(t, srv, watched...)

	// Before namespaces demo and payments have consumers, the demo worker
	// tries to take payments calls by a consumer whose filter covers both.
	create := "$JS.API.CONSUMER.CREATE." + calls + ".ns_demo"
	wide := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubjects: []string{"toolbus.call.demo.>", "toolbus.call.payments.>"}}
	demoWorker.denied("create its consumer with two filters", create, consumerRequest(t, calls, wide))
	for _, filter := range []string{"toolbus.call.>", "toolbus.call.*.>", "toolbus.call.payments.>", ">"} {
		cfg := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter}
		demoWorker.denied("create its consumer with filter "+filter, create+"."+filter, consumerRequest(t, calls, cfg))
	}
	// The subject names its own namespace's filter, the request another
	// one, or several: the server refuses both.
	mismatch := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "toolbus.call.payments.>"}
	demoWorker.refusedByServer("create its consumer with a filter other than the subject's", create+".toolbus.call.demo.>", consumerRequest(t, calls, mismatch))
	demoWorker.refusedByServer("create its consumer with several filters under its own subject", create+".toolbus.call.demo.>", consumerRequest(t, calls, wide))
	// The Go client sends several filters on the short subject; refused too.
	js, err := jetstream.New(demoWorker.nc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := js.CreateOrUpdateConsumer(short, calls, wide); err == nil {
		t.Fatal("the demo worker's client created a consumer with several filters")
	}
	cancel()
	demoWorker.awaitViolation(create, "create its consumer with two filters through the client", nil)
	demoWorker.denied("create the payments consumer", "$JS.API.CONSUMER.CREATE."+calls+".ns_payments.toolbus.call.payments.>",
		consumerRequest(t, calls, jetstream.ConsumerConfig{Durable: "ns_payments", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "toolbus.call.payments.>"}))
	demoWorker.denied("create a durable consumer the old way", "$JS.API.CONSUMER.DURABLE.CREATE."+calls+".ns_demo", consumerRequest(t, calls, wide))
	demoWorker.denied("create an ephemeral consumer", "$JS.API.CONSUMER.CREATE."+calls, consumerRequest(t, calls, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}))
	if after := snapshot(t, srv, watched...); !reflect.DeepEqual(after, before) {
		t.Fatalf("the streams changed:\nbefore %+v\nafter  %+v", before, after)
	}

	// Now demo has a worker, a call stored an audit record and a large
	// result, and payments has a worker holding one of its calls.
	big := worker.Func("big", "Returns more than its result size limit.", func(ctx context.Context, in struct{}) (string, error) {
		return strings.Repeat("large ", 1000), nil
	}, worker.WithMaxResultSize(100))
	testenv.Worker(t, url, worker.Config{Conn: as("worker_demo", "worker-demo-secret")},
		worker.Namespace{Name: demo.Name, Tools: append(demo.Tools(), big)})
	// An audit record, and a result in the results store.
	res, err := agent.Call(ctx, "demo-big", struct{}{})
	if err != nil || res.Status != messages.StateCompleted || res.FullResult == nil {
		t.Fatalf("large result: %+v %v", res, err)
	}

	// The indexer stores the index of the demo tools under its user.
	coordinatorJS, err := jetstream.New(as("coordinator", "coordinator-secret"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := coordinatorJS.KeyValue(ctx, names.IndexBucket())
	if err != nil {
		t.Fatal(err)
	}
	awaitManifest(t, watchManifests(t, index), "an index with the demo tools", func(m discovery.Manifest) bool { return m.Tools > len(demo.Tools()) })

	// The audit record is written asynchronously: no event says it is stored.
	eventually(t, "the call's audit record", func() bool { return snapshot(t, srv, audit)[audit].Msgs > 0 })
	watched = append(watched, results)
	if snapshot(t, srv, results)[results].Msgs == 0 {
		t.Fatal("no large result stored")
	}

	hold := newGate()
	testenv.Worker(t, url, worker.Config{Conn: as("worker_payments", "worker-payments-secret")},
		worker.Namespace{Name: "payments", Tools: []worker.Tool{hold.tool()}})
	held, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "payments-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if id := receive(t, hold.started, "the payments call to start"); id != held.CallID {
		t.Fatalf("started %s, submitted %s", id, held.CallID)
	}
	before = snapshot(t, srv, watched...)
	if _, ok := before[calls].Consumers["ns_payments"]; !ok || before[calls].Msgs == 0 {
		t.Fatalf("calls stream: %+v", before[calls])
	}

	readCalls := map[string]string{
		"pull a payments call":         "$JS.API.CONSUMER.MSG.NEXT." + calls + ".ns_payments",
		"read queued calls directly":   "$JS.API.DIRECT.GET." + calls,
		"read one queued call":         "$JS.API.STREAM.MSG.GET." + calls,
		"read the payments consumer":   "$JS.API.CONSUMER.INFO." + calls + ".ns_payments",
		"delete the payments consumer": "$JS.API.CONSUMER.DELETE." + calls + ".ns_payments",
		"acknowledge a payments call":  "$JS.ACK." + calls + ".ns_payments.1.1.1.1.0",
	}
	auditAndResults := map[string]string{
		"purge the audit log":           "$JS.API.STREAM.PURGE." + audit,
		"delete the audit log":          "$JS.API.STREAM.DELETE." + audit,
		"delete an audit record":        "$JS.API.STREAM.MSG.DELETE." + audit,
		"shorten the audit retention":   "$JS.API.STREAM.UPDATE." + audit,
		"purge the large results":       "$JS.API.STREAM.PURGE." + results,
		"delete the large results":      "$JS.API.STREAM.DELETE." + results,
		"delete the calls stream":       "$JS.API.STREAM.DELETE." + calls,
		"purge the calls stream":        "$JS.API.STREAM.PURGE." + calls,
		"create a consumer on payments": "$JS.API.CONSUMER.CREATE." + calls + ".spy.toolbus.call.payments.>",
	}
	for what, subject := range readCalls {
		demoWorker.denied(what, subject, []byte(`{"seq":1,"batch":1}`))
		indexerUser.denied(what, subject, []byte(`{"seq":1,"batch":1}`))
	}
	for what, subject := range auditAndResults {
		demoWorker.denied(what, subject, []byte(`{}`))
		paymentsWorker.denied(what, subject, []byte(`{}`))
		indexerUser.denied(what, subject, []byte(`{}`))
	}
	// Nor the payments worker the demo namespace's: its consumer, its
	// large results, its calls' events.
	paymentsWorker.denied("delete the demo consumer", "$JS.API.CONSUMER.DELETE."+calls+".ns_demo", []byte(`{}`))
	for what, subject := range map[string]string{
		"replace a demo large result":         "$O." + demoBucket + ".M.bWV0YQ==",
		"add chunks to the demo results":      "$O." + demoBucket + ".C.chunk",
		"change the demo results store":       "$JS.API.STREAM.UPDATE." + results,
		"create the demo results store":       "$JS.API.STREAM.CREATE." + results,
		"delete a demo large result's chunks": "$JS.API.STREAM.MSG.DELETE." + results,
	} {
		paymentsWorker.denied(what, subject, []byte(`{}`))
	}

	paymentsWorker.denied("pull a demo call", "$JS.API.CONSUMER.MSG.NEXT."+calls+".ns_demo", []byte(`{"batch":1}`))
	demoWorker.subscribeDenied("listen to payments calls", "toolbus.call.payments.>")
	demoWorker.subscribeDenied("listen to every reply, pulled calls included", "_INBOX.>")
	demoWorker.subscribeDenied("listen to the payments worker's replies", natsflags.InboxPrefix("worker_payments")+".>")
	indexerUser.subscribeDenied("listen to the coordinator's replies", natsflags.InboxPrefix("coordinator")+".>")
	demoWorker.subscribeDenied("listen to payments cancellations", "toolbus.cancel.payments.*")
	indexerUser.subscribeDenied("listen to calls", "toolbus.call.>")
	// The coordinator creates and updates the streams but may not purge or
	// delete them either.
	for _, what := range []string{"purge the audit log", "delete the audit log", "delete an audit record", "purge the large results", "delete the calls stream"} {
		coordinatorUser.denied(what, auditAndResults[what], []byte(`{}`))
	}
	if after := snapshot(t, srv, watched...); !reflect.DeepEqual(after, before) {
		t.Fatalf("the streams changed:\nbefore %+v\nafter  %+v", before, after)
	}

	// The payments worker still has its call, and finishes it.
	close(hold.release)
	if res, err := agent.Wait(ctx, held.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the held payments call: %+v %v", res, err)
	}
	select {
	case err := <-serviceViolations:
		t.Fatalf("a service hit a permission it needs: %v", err)
	default:
	}
}
