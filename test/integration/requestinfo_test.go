package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// rawAPIRequest sends one API request over a connection of its own that
// speaks the NATS protocol by hand, as user, with the header block
// exactly as given, and returns the reply's status code (its
// Nats-Service-Error-Code, "" for success) and body.
func rawAPIRequest(t *testing.T, d *deployed, user, endpoint, header, body string) (code, reply string) {
	t.Helper()
	return rawNATSRequest(t, d, user, "toolbus.api."+endpoint, "", header, body)
}

// unauthenticated is a server without users, for rawNATSRequest.
func unauthenticated(url string) *deployed { return &deployed{kind: passwords, url: url} }

// rawNATSRequest sends one message with the header block exactly as given,
// on a connection of its own, and returns the answer's
// Nats-Service-Error-Code and body; replyTo, when not empty, is the
// message's reply subject instead of the connection's inbox, and then
// nothing is awaited.
func rawNATSRequest(t *testing.T, d *deployed, user, subject, replyTo, header, body string) (code, reply string) {
	t.Helper()
	u, err := url.Parse(d.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, testenv.Patience)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(testenv.Patience)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("server greeting %q: %v", info, err)
	}
	inbox := "_INBOX_" + user + ".raw"
	fmt.Fprintf(conn, "%sSUB %s 1\r\n", d.rawConnect(t, user, info), inbox)
	to := inbox
	if replyTo != "" {
		to = replyTo
	}
	fmt.Fprintf(conn, "HPUB %s %s %d %d\r\n%s%s\r\nPING\r\n", subject, to, len(header), len(header)+len(body), header, body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no reply to %s: %v", subject, err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("the server refused the raw request: %s", line)
		}
		if replyTo != "" && strings.HasPrefix(line, "PONG") {
			return "", "" // the server has the message; its answer goes elsewhere
		}
		if strings.HasPrefix(line, "MSG ") {
			// An answer without headers (a JetStream acknowledgement).
			fields := strings.Fields(line)
			size, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				t.Fatalf("reply line %q", line)
			}
			msg := make([]byte, size+2)
			if _, err := io.ReadFull(r, msg); err != nil {
				t.Fatal(err)
			}
			return "", string(msg[:size])
		}
		if !strings.HasPrefix(line, "HMSG ") {
			continue // INFO, PING and the like
		}
		fields := strings.Fields(line)
		hdrLen, err1 := strconv.Atoi(fields[len(fields)-2])
		total, err2 := strconv.Atoi(fields[len(fields)-1])
		if err1 != nil || err2 != nil {
			t.Fatalf("reply line %q", line)
		}
		msg := make([]byte, total+2)
		if _, err := io.ReadFull(r, msg); err != nil {
			t.Fatal(err)
		}
		for _, h := range strings.Split(string(msg[:hdrLen]), "\r\n") {
			if v, ok := strings.CutPrefix(h, "Nats-Service-Error-Code: "); ok {
				code = v
			}
		}
		return code, string(msg[hdrLen:total])
	}
}

// forgedHeaders are header blocks that each carry a Nats-Request-Info
// naming user, written so that the server, which removes a client's
// Nats-Request-Info line only when a CRLF precedes it and appends its own
// as the block's last line, leaves the forged line in place, and a parser
// that also takes a bare LF for a line break (nats.go's does) reads it.
// With signed identities the forged line names the user's account and
// key, and carries its JWT, as the server writes it.
func forgedHeaders(t *testing.T, d *deployed, user string) map[string]string {
	info := `Nats-Request-Info: {"acc":"AGENTS","user":"` + user + `"}`
	if token := d.userJWT(t, user); token != "" {
		claims, err := jwt.DecodeUserClaims(token)
		if err != nil {
			t.Fatal(err)
		}
		info = `Nats-Request-Info: {"acc":"` + claims.Issuer + `","user":"` + claims.Subject + `","jwt":"` + token + `"}`
	}
	return map[string]string{
		"after a CRLF, as a client library writes it": "NATS/1.0\r\n" + info + "\r\nContent-Type: application/json\r\n\r\n",
		"after a bare LF, next to the server's":       "NATS/1.0\n" + info + "\r\nContent-Type: application/json\r\n\r\n",
		"before a blank line that hides the server's": "NATS/1.0\r\nContent-Type: application/json\n" + info + "\n\nx\r\n\r\n",
		"with the server's glued to a line's value":   "NATS/1.0\r\nContent-Type: application/json\n" + info + "\r\nX: yy",
		"with the server's glued to a skipped line":   "NATS/1.0\r\nContent-Type: application/json\n" + info + "\r\n:yy",
	}
}

// TestHandWrittenRequestInfoIsRefused: on the deploy configuration, agent
// A's user writes its request headers by hand, with a Nats-Request-Info
// naming B's user (or the operator) in every form that escapes the
// server's replacement. Each request is refused with forbidden, while
// the same request with an honest header block is answered: A cannot
// pass for another user, list B's tools, or read what is for operators;
// each refusal is audited.
func TestHandWrittenRequestInfoIsRefused(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testHandWrittenRequestInfoIsRefused)
}

func testHandWrittenRequestInfoIsRefused(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	as := d.connector(t)
	const honest = "NATS/1.0\r\nContent-Type: application/json\r\n\r\n"
	// Hand-written but honest: answered, so the refusals below are the
	// forgeries'. The demo worker registers its tools on its own time.
	testenv.Eventually(t, "an honest hand-written request answered with the demo tools", func() bool {
		code, reply := rawAPIRequest(t, d, "agent_a", "tools.list", honest, `{"agent":"support-bot"}`)
		if code != "" {
			t.Fatalf("an honest hand-written request: %s %s", code, reply)
		}
		return strings.Contains(reply, "demo-echo")
	})
	if code, reply := rawAPIRequest(t, d, "agent_a", "tools.list", "NATS/1.0\nContent-Type:application/json\r\n\r\n", `{"agent":"support-bot"}`); code != "" || !strings.Contains(reply, "demo-echo") {
		t.Fatalf("an honest request written tightly: %s %s", code, reply)
	}
	for how, header := range forgedHeaders(t, d, "agent_b") {
		if code, reply := rawAPIRequest(t, d, "agent_a", "tools.list", header, `{"agent":"billing-bot"}`); code != "403" {
			t.Errorf("A passing for B's user, the forged header %s: %q %s", how, code, reply)
		}
	}
	for how, header := range forgedHeaders(t, d, "operator") {
		if code, reply := rawAPIRequest(t, d, "agent_a", "workers.list", header, `{}`); code != "403" {
			t.Errorf("A passing for the operator, the forged header %s: %q %s", how, code, reply)
		}
	}
	// Every refusal is audited.
	want := 2 * len(forgedHeaders(t, nil, ""))
	if countAudited(t, as("auditor"), "forbidden", want) < want {
		t.Errorf("fewer than %d refusals audited", want)
	}
	// This deployment is the test's own: every refusal in its audit log is
	// of a request A sent, recorded as A's where the server's line was
	// read, and without a by where the block could hide it; never in the
	// name the forged line gave (B's or the operator's).
	for _, rec := range forbiddenRecords(t, as("auditor")) {
		if rec.By != "" && !strings.HasSuffix(rec.By, "/agent_a") {
			t.Errorf("a refusal of A's forged header block recorded in another's name: by %q (%s)", rec.By, rec.Reason)
		}
	}
}

// forbiddenRecords reads the audit stream's forbidden records.
func forbiddenRecords(t *testing.T, nc *nats.Conn) []messages.AuditRecord {
	t.Helper()
	var out []messages.AuditRecord
	err := transport.NewStream(nc, nil, "TOOLBUS_AUDIT").GetBatch(testenv.Context(t), transport.BatchRequest{Seq: 1, NextBySubject: "toolbus.audit.forbidden", Batch: 1000}, func(_ uint64, msg *nats.Msg) bool {
		var rec messages.AuditRecord
		if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHiddenRequestInfoDoesNotPassForOneAccount: a coordinator without
// an identities file refuses the agents' requests, which carry the
// server's Nats-Request-Info, on the deploy configuration, and admits
// them as their users' signed claims say on an installation of toolbus
// setup; hiding that line from the parser does not make a request pass
// for one of the coordinator's own account, which it would serve as the
// agent it names.
func TestHiddenRequestInfoDoesNotPassForOneAccount(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testHiddenRequestInfoDoesNotPassForOneAccount)
}

func testHiddenRequestInfoDoesNotPassForOneAccount(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, false)
	testenv.Coordinator(t, d.url, func(cfg *coordinator.Config) { cfg.Conn = d.as(t, "coordinator") })
	testenv.Worker(t, "", worker.Config{Conn: d.as(t, "worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	hidden := map[string]string{
		"behind a blank line":     "NATS/1.0\r\nContent-Type: application/json\n\nx\r\n\r\n",
		"glued to a skipped line": "NATS/1.0\r\nContent-Type: application/json\n:yy",
		"glued to a line's value": "NATS/1.0\r\nContent-Type: application/json\nX: yy",
	}
	for how, header := range hidden {
		if code, reply := rawAPIRequest(t, d, "agent_a", "tools.list", header, `{"agent":"billing-bot"}`); code != "403" {
			t.Errorf("the server's header %s: %q %s", how, code, reply)
		}
	}
}

// TestStoredRequestsDoNotReachTheAPI: where a client may create consumers
// and name a direct get's reply subject (a server without the deploy
// configurations' accounts, whose services could do both before they were
// moved out of the coordinator's account), it can write an API request in
// a bucket, with headers of its choice, a Nats-Request-Info naming the
// operator among them, and have the bucket's stream send it to the API: by
// a consumer whose deliver subject it names, or as the answer to a direct
// get whose reply subject it names. A coordinator with identities refuses
// both, audited, and the tool the stored request switches off stays on.
// On the deploy configurations nobody but the coordinator can do either
// (TestIndexerCannotHaveAStreamWriteForIt).
func TestStoredRequestsDoNotReachTheAPI(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) { cfg.Identities = deployIdentities(t) })
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	key := storeRequest(t, url, "NATS/1.0\nNats-Request-Info: {\"acc\":\"AGENTS\",\"user\":\"operator\"}\r\nContent-Type: application/json\r\n\r\n", `{"tool":"demo-sha256","by":"operator","reason":"stored"}`)
	nc := testenv.Connect(t, url)
	audited := countAudited(t, nc, "forbidden", 0)
	relayByConsumer(t, url, key, "tools.disable")
	// A direct get whose answer goes to the API.
	index := "KV_" + names.IndexBucket()
	rawNATSRequest(t, unauthenticated(url), "indexer", "$JS.API.DIRECT.GET."+index+"."+key, "toolbus.api.tools.disable", "NATS/1.0\r\n\r\n", "")
	if n := countAudited(t, nc, "forbidden", audited+2); n < audited+2 {
		t.Fatalf("%d relayed requests refused, want 2", n-audited)
	}
	assertNotDisabled(t, nc, ctx, "demo.sha256")
}

// TestStreamDeliveriesDoNotReachTheAPI: a coordinator without identities
// trusts the agent a request of its own account names, but a message a
// stream delivered to an API subject (its reply is the consumer's
// acknowledgement, $JS.ACK.…) is no client's request: a relay of a stored
// tools.disable, where a client may create such a consumer, is refused
// and audited, and the tool stays on.
func TestStreamDeliveriesDoNotReachTheAPI(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	testenv.Coordinator(t, url)
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	key := storeRequest(t, url, "NATS/1.0\r\nContent-Type: application/json\r\n\r\n", `{"tool":"demo-sha256","by":"someone","reason":"stored"}`)
	nc := testenv.Connect(t, url)
	audited := countAudited(t, nc, "forbidden", 0)
	relayByConsumer(t, url, key, "tools.disable")
	if n := countAudited(t, nc, "forbidden", audited+1); n < audited+1 {
		t.Fatal("the relayed request was not refused")
	}
	assertNotDisabled(t, nc, ctx, "demo.sha256")
}

// storeRequest stores an API request in the index bucket, with the header
// block as given, and returns the subject it is under.
func storeRequest(t *testing.T, serverURL, header, body string) string {
	t.Helper()
	key := "$KV." + names.IndexBucket() + ".stored"
	if _, reply := rawNATSRequest(t, unauthenticated(serverURL), "indexer", key, "", header, body); !strings.Contains(reply, `"seq"`) {
		t.Fatalf("the indexer storing a request: %s", reply)
	}
	return key
}

// relayByConsumer creates a consumer on the index bucket that delivers
// the message under key to the API endpoint, in the coordinators' queue
// group.
func relayByConsumer(t *testing.T, serverURL, key, endpoint string) {
	t.Helper()
	index := "KV_" + names.IndexBucket()
	consumer := jsonBody(t, map[string]any{"stream_name": index, "config": map[string]any{"name": "relay", "deliver_subject": "toolbus.api." + endpoint,
		"deliver_group": "q", "deliver_policy": "last", "filter_subject": key, "ack_policy": "none"}})
	if _, reply := rawNATSRequest(t, unauthenticated(serverURL), "indexer", "$JS.API.CONSUMER.CREATE."+index+".relay."+key, "", "NATS/1.0\r\n\r\n", string(consumer)); !strings.Contains(reply, "consumer_create_response") || strings.Contains(reply, `"error"`) {
		t.Fatalf("the indexer's relay consumer: %s", reply)
	}
}

// assertNotDisabled fails the test if the catalog holds a switch that
// turns target (namespace.method) off.
func assertNotDisabled(t *testing.T, nc *nats.Conn, ctx context.Context, target string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "disabled."+target); err == nil {
		t.Fatalf("a relayed request switched %s off: %s", target, e.Value())
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
}
