package integration

import (
	"context"
	"encoding/json"
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

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
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
// with an account for namespace ns added the way users.inc says to: the
// WORKER_DEMO account block copied, with every "demo" and "DEMO"
// replaced. It returns the path of the server configuration.
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
	start := strings.Index(text, "\n  WORKER_DEMO {\n")
	if start < 0 {
		t.Fatal("users.inc has no WORKER_DEMO account to copy")
	}
	start++
	end := start + strings.Index(text[start:], "\n  }\n") + len("\n  }\n")
	rename := strings.NewReplacer("demo", ns, "DEMO", strings.ToUpper(ns))
	text = text[:end] + rename.Replace(text[start:end]) + text[end:]
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
	return []nats.Option{nats.UserInfo(user, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)), nats.Name(user)}
}

// intruder is a connection of one role that tries what its role may not.
type intruder struct {
	t          *testing.T
	role       string
	nc         *nats.Conn
	violations chan error
}

// newIntruderWith connects as user with opts, to try what its role may not.
func newIntruderWith(t *testing.T, url, user string, opts []nats.Option) *intruder {
	in := &intruder{t: t, role: user, violations: make(chan error, 64)}
	in.nc = testenv.Connect(t, url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
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
	deadline := time.After(testenv.Patience)
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
	case <-time.After(testenv.Patience):
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
	deadline := time.After(testenv.Patience)
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

// TestWorkerCannotWidenItsConsumer: before namespaces demo and payments
// have consumers, the demo worker tries to take payments calls by a
// consumer whose filter covers both, in every form the JetStream API
// offers, and to create its own namespace's consumer; each is refused
// (the coordinator configures a namespace's consumer, see
// TestWorkerCannotHaveAStreamWriteForIt), and the calls and audit streams
// are as they were. TestRoleMatrix tries the rest of what each role may
// not do, once every namespace has its consumer.
func TestWorkerCannotWidenItsConsumer(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testWorkerCannotWidenItsConsumer)
}

func testWorkerCannotWidenItsConsumer(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, true)
	srv, url := d.srv, d.url
	ctx := testenv.Context(t)
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = d.as(t, "coordinator")
		cfg.Identities = d.ids
	})
	demoWorker := d.intruder(t, "worker_demo")
	events, audit := names.EventsStream(), names.Audit().Stream()
	watched := []string{events, audit}
	before := snapshot(t, srv, watched...)

	const own = "toolbus.events.*.*.queued.*.demo"
	create := "$JS.API.CONSUMER.CREATE." + events + ".ns_demo"
	wide := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubjects: []string{own, "toolbus.events.*.*.queued.*.payments"}}
	demoWorker.denied("create its consumer with two filters", create, consumerRequest(t, events, wide))
	for _, filter := range []string{own, "toolbus.events.>", "toolbus.events.*.*.queued.*.*", "toolbus.events.*.*.queued.*.payments", "toolbus.events.*.*.queued.turn-1.*", "toolbus.events.0c.*.queued.turn-1.*", "toolbus.events.*.*.*.demo", "toolbus.events.*.queued.*.demo", ">"} {
		cfg := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter}
		demoWorker.denied("create its consumer with filter "+filter, create+"."+filter, consumerRequest(t, events, cfg))
	}
	mismatch := jetstream.ConsumerConfig{Durable: "ns_demo", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "toolbus.events.*.*.queued.*.payments"}
	demoWorker.denied("create its consumer with a filter other than the subject's", create+"."+own, consumerRequest(t, events, mismatch))
	demoWorker.denied("create its consumer with several filters under its own subject", create+"."+own, consumerRequest(t, events, wide))
	// The Go client sends several filters on the short subject; refused too.
	js, err := jetstream.New(demoWorker.nc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := js.CreateOrUpdateConsumer(short, events, wide); err == nil {
		t.Fatal("the demo worker's client created a consumer with several filters")
	}
	cancel()
	demoWorker.awaitViolation(create, "create its consumer with two filters through the client", nil)
	demoWorker.denied("create the payments consumer", "$JS.API.CONSUMER.CREATE."+events+".ns_payments.toolbus.events.*.*.queued.*.payments",
		consumerRequest(t, events, jetstream.ConsumerConfig{Durable: "ns_payments", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "toolbus.events.*.*.queued.*.payments"}))
	demoWorker.denied("create a durable consumer the old way", "$JS.API.CONSUMER.DURABLE.CREATE."+events+".ns_demo", consumerRequest(t, events, wide))
	demoWorker.denied("create an ephemeral consumer", "$JS.API.CONSUMER.CREATE."+events, consumerRequest(t, events, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}))
	if after := snapshot(t, srv, watched...); !reflect.DeepEqual(after, before) {
		t.Fatalf("the streams changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestWorkerCannotRollUpTheCatalog: a worker may write its namespace's
// catalog keys, and a write with the header Nats-Rollup: all would purge
// the whole bucket (every namespace's tools, the operators' switches, the
// heartbeats), and one on its events subjects the events stream. On the
// deploy configuration the server refuses both, and the catalog and the
// events stream hold what they held.
func TestWorkerCannotRollUpTheCatalog(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testWorkerCannotRollUpTheCatalog)
}

func testWorkerCannotRollUpTheCatalog(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	srv, as := d.srv, d.connector(t)
	ctx := testenv.Context(t)
	a := agentClient(t, as("agent_a"), "support-bot")
	res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "one call"})
	if err != nil {
		t.Fatal(err)
	}
	watched := []string{"KV_toolbus_catalog", "TOOLBUS_EVENTS"}
	before := snapshot(t, srv, watched...)
	if before["KV_toolbus_catalog"].Msgs == 0 {
		t.Fatal("an empty catalog")
	}
	w := as("worker_demo")
	for _, subject := range []string{
		"$KV.toolbus_catalog.tools.demo.rollup",
		"$KV.toolbus_catalog.workers.demo.rollup",
		"toolbus.events._." + res.CallID + ".log.demo",
	} {
		msg := nats.NewMsg(subject)
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		msg.Data = []byte(`{}`)
		reply, err := w.RequestMsg(msg, testenv.Patience)
		if err != nil {
			t.Fatalf("a rollup on %s: %v", subject, err)
		}
		if !strings.Contains(string(reply.Data), "rollup not permitted") {
			t.Errorf("a rollup on %s: %s", subject, reply.Data)
		}
	}
	if after := snapshot(t, srv, watched...); !reflect.DeepEqual(after, before) {
		t.Fatalf("the refused rollups changed the streams:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestServicesCannotCaptureOthersSubjects: whoever creates a stream
// chooses the subjects it stores, and may read what it stores. A worker
// that created or updated its namespace's results store, or an indexer
// its index bucket, could have it store every routed result
// (toolbus.results.>) or a worker's replies (its work items), and read
// them by direct get. On the deploy configuration neither may create or
// update a stream; the coordinator creates each namespace's store and the
// index bucket, and the worker still keeps its large results there.
func TestServicesCannotCaptureOthersSubjects(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testServicesCannotCaptureOthersSubjects)
}

func testServicesCannotCaptureOthersSubjects(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, true)
	url, as := d.url, d.connector(t)
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator")
		cfg.Identities = d.ids
	})
	big := worker.Func("big", "Returns more than its result size limit.", func(ctx context.Context, in struct{}) (string, error) {
		return strings.Repeat("large ", 1000), nil
	}, worker.WithMaxResultSize(100))
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: []worker.Tool{big}})
	ctx := testenv.Context(t)
	a := agentClient(t, as("agent_a"), "support-bot")
	// The demo worker keeps a large result in the store the coordinator made.
	res, err := a.Call(ctx, "demo-big", struct{}{})
	if err != nil || res.FullResult == nil {
		t.Fatalf("a large result: %+v %v", res, err)
	}
	capture := func(stream, subject string) []byte {
		return jsonBody(t, map[string]any{"name": stream, "subjects": []string{subject}, "storage": "file", "retention": "limits",
			"max_msgs": -1, "max_bytes": -1, "max_age": 0, "num_replicas": 1, "allow_direct": true, "discard": "new"})
	}
	store, err := names.NamespaceResultsBucket(demo.Name)
	if err != nil {
		t.Fatal(err)
	}
	paymentsStore, err := names.NamespaceResultsBucket("payments")
	if err != nil {
		t.Fatal(err)
	}
	for _, try := range []struct{ role, what, subject string }{
		{"worker_demo", "update its store", "$JS.API.STREAM.UPDATE.OBJ_" + store},
		{"worker_demo", "create its store anew", "$JS.API.STREAM.CREATE.OBJ_" + store},
		{"worker_demo", "create the other namespace's store", "$JS.API.STREAM.CREATE.OBJ_" + paymentsStore},
		{"worker_demo", "create a stream of its own", "$JS.API.STREAM.CREATE.spy"},
		{"indexer", "update the index bucket", "$JS.API.STREAM.UPDATE.KV_" + names.IndexBucket()},
		{"indexer", "create the index bucket anew", "$JS.API.STREAM.CREATE.KV_" + names.IndexBucket()},
		{"indexer", "create a stream of its own", "$JS.API.STREAM.CREATE.spy"},
	} {
		stream := try.subject[strings.LastIndex(try.subject, ".")+1:]
		for _, captured := range []string{"toolbus.results.>", "_INBOX_worker_payments.>"} {
			d.intruder(t, try.role).denied(try.what+" to keep "+captured, try.subject, capture(stream, captured))
		}
	}
	js, err := jetstream.New(as("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "OBJ_"+store)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range s.CachedInfo().Config.Subjects {
		if !strings.HasPrefix(subject, "$O."+store+".") {
			t.Errorf("the demo store stores %s", subject)
		}
	}
}
