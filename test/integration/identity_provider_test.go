package integration

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/oidctest"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/authn"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// documentedIssuer stands for the organisation's issuer in operations.md.
const documentedIssuer = "https://login.example.com/realms/main"

// TestIdentityProviderOnOneHost runs the commands of docs/operations.md's
// "The organisation's identity provider" on an installation of Production
// on one host (its install and setup commands), with a test issuer in
// place of the organisation's: toolbus up runs the auth callout, an
// agent's token makes a call through the command line (and one of another
// audience is refused), an MCP client's token for the front's resource
// makes a call through the MCP front, and an operator of the issuer logs
// in to the console, which shows both calls. No file is written by hand.
func TestIdentityProviderOnOneHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole installation")
	}
	t.Parallel()
	production := documentedCommands(t, "Production on one host")
	blocks := documentedCommands(t, "The organisation's identity provider")
	if len(blocks) < 2 || len(blocks[0]) != 2 || len(blocks[1]) != 1 || !strings.Contains(blocks[0][0], documentedIssuer) {
		t.Fatalf("the section's commands: %q", blocks)
	}
	iss := oidctest.Start(t)
	dir := filepath.Join(t.TempDir(), "toolbus")
	natsAddr, consoleAddr, mcpAddr := testenv.FreeAddress(t), testenv.FreeAddress(t), testenv.FreeAddress(t)
	root := filepath.Dir(filepath.Dir(deployDir(t)))
	bin := installDocumented(t, production[0][0], root, os.Environ())
	agentToken := iss.Token("alice", "toolbus", map[string]any{"toolbus_agents": "support-bot"})
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TOOLBUS_URL=nats://"+natsAddr, "TOOLBUS_CONSOLE_LISTEN="+consoleAddr, "TOOLBUS_MCP_LISTEN="+mcpAddr,
		"TOOLBUS_CONSOLE_OIDC_SECRET=console-secret")
	shell := func(line string, extra ...string) *exec.Cmd {
		line = strings.ReplaceAll(strings.ReplaceAll(line, "/var/lib/toolbus", dir), documentedIssuer, iss.URL)
		cmd := exec.Command("sh", "-c", "exec "+line)
		cmd.Dir, cmd.Env = root, append(env, extra...)
		return cmd
	}
	run := func(line string, extra ...string) string {
		t.Helper()
		out, err := shell(line, extra...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	run(production[0][1])
	if out := run(blocks[0][0]); !strings.Contains(out, "toolbus authn --dir") {
		t.Fatalf("setup with the issuer printed:\n%s", out)
	}
	iss.AddClient(oidctest.Client{ID: "toolbus-console", Secret: "console-secret", RedirectURIs: []string{"http://" + consoleAddr + "/login/oidc/callback"}})
	iss.AddUser("olga", map[string]any{"groups": []any{"toolbus-operators"}, "preferred_username": "olga"})
	startUp(t, shell(blocks[0][1]), dir, "nats-n1", "authn", "coordinator-1", "worker", "console", "mcp")

	// An agent's token on the command line.
	if out := run(blocks[1][0], "TOKEN="+agentToken); !strings.Contains(out, "hello") {
		t.Fatalf("%s printed:\n%s", blocks[1][0], out)
	}
	refused := shell(blocks[1][0], "TOKEN="+iss.Token("alice", "another-api", map[string]any{"toolbus_agents": "support-bot"}))
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "the server refused the token") {
		t.Fatalf("a token of another audience: %v\n%s", err, out)
	}
	authnLog, _ := os.ReadFile(filepath.Join(dir, "log", "authn.log"))
	if !strings.Contains(string(authnLog), `audience [\"another-api\"]`) {
		t.Errorf("the callout's log does not say why it refused the token:\n%s", authnLog)
	}

	// An MCP client's token, for the front's resource.
	resource := "http://" + mcpAddr + "/mcp"
	mcpToken := iss.Token("alice", resource, map[string]any{"toolbus_agents": "mcp-alice"})
	mc := testenv.MCPClient(t, resource, mcpToken)
	ctx := testenv.Context(t)
	req := mcp.CallToolRequest{}
	req.Params.Name = "demo-echo"
	req.Params.Arguments = map[string]any{"text": "with the issuer's token"}
	if res, err := mc.CallTool(ctx, req); err != nil || res.IsError {
		t.Fatalf("MCP tools/call with the issuer's token: %+v %v", res, err)
	}

	// An operator of the issuer in the console.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.Get("http://" + consoleAddr + "/login/oidc?next=/calls")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The client followed the redirects to the issuer's login form.
	authz := resp.Request.URL
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(authz.String(), iss.URL+"/authorize") {
		t.Fatalf("the console's login with the issuer: %s at %s", resp.Status, authz)
	}
	q := authz.Query()
	q.Set("login_hint", "olga")
	authz.RawQuery = q.Encode()
	resp, err = hc.Get(authz.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/login/oidc/callback" {
		t.Fatalf("back from the issuer: %s at %s", resp.Status, resp.Request.URL)
	}
	resp, err = hc.Get("http://" + consoleAddr + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<span id="operator">olga</span>`) || !strings.Contains(page, "support-bot") || !strings.Contains(page, "mcp-alice") {
		t.Fatalf("the console's execution log for olga: %s\n%s", resp.Status, page)
	}
}

// TestIssuerAgentsAreConfined: a user the auth callout issued for a token
// of the organisation's issuer is confined as an agent's user of
// toolbus agent add is, on an installation whose AGENTS account holds the
// callout's signing key: it acts as its token's agents only, reads,
// cancels and follows no other agent's calls or turns, decides no
// approval and switches no tool, receives no other user's replies or
// results (a signed agent's, or another token's user's), has no JetStream,
// reaches no worker subject and cannot answer the servers' authorization
// requests; and the signed agent is held off the token user's data alike.
// Nothing refused changes the streams, stores or audit log but the
// refusals' records.
func TestIssuerAgentsAreConfined(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	in, err := newSignedInstallation(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ConfigureOIDC(setup.OIDCOptions{Issuer: iss.URL, Audience: "toolbus"}); err != nil {
		t.Fatal(err)
	}
	srv := testenv.InstallationServer(t, in)
	d := &deployed{kind: signed, srv: srv, url: srv.URL(), in: in}
	coordinatorConn := d.as(t, "coordinator")
	// A policy, so that the calls are audited before the refusals are.
	testenv.Coordinator(t, d.url, func(cfg *coordinator.Config) {
		cfg.Conn = coordinatorConn
		cfg.Policy = mustPolicy(t, "default: allow\n")
	})
	testenv.Worker(t, "", worker.Config{Conn: d.as(t, "worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	answers, users, err := in.AuthnKeys()
	if err != nil {
		t.Fatal(err)
	}
	v, err := oidc.NewVerifier(oidc.Config{Issuer: iss.URL, Audiences: []string{"toolbus"}})
	if err != nil {
		t.Fatal(err)
	}
	callout, err := authn.Start(authn.Config{Conn: testenv.Connect(t, d.url, nats.UserCredentials(in.AuthnCreds())), Verifier: v,
		AgentsAccount: in.State().Accounts[setup.AccountAgents], UserKey: users, AnswerKey: answers,
		AgentsClaim: setup.DefaultAgentsClaim, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(callout.Stop)
	ctx := testenv.Context(t)

	alice := iss.Token("alice", "toolbus", map[string]any{setup.DefaultAgentsClaim: "billing-bot"})
	bob := iss.Token("bob", "toolbus", map[string]any{setup.DefaultAgentsClaim: "triage-bot"})
	tokenOpts := func(token string) []nats.Option {
		inbox, err := messages.TokenInboxOf(token)
		if err != nil {
			t.Fatal(err)
		}
		return []nats.Option{nats.Token(token), nats.CustomInboxPrefix(inbox)}
	}
	aliceInbox, _ := messages.TokenInboxOf(alice)
	// Each one's data: a finished call and a turn.
	aliceClient, err := client.New(testenv.Connect(t, d.url, tokenOpts(alice)...), client.Options{Agent: "billing-bot", CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	aliceCall, err := aliceClient.Call(ctx, "demo-word_count", map[string]string{"text": "mine alone"}, client.WithTurn("turn-alice"))
	if err != nil || aliceCall.Status != messages.StateCompleted {
		t.Fatalf("alice's call: %+v %v", aliceCall, err)
	}
	agentA := agentClient(t, d.as(t, "agent_a"), "support-bot")
	aCall, err := agentA.Call(ctx, "demo-word_count", map[string]string{"text": "mine alone"}, client.WithTurn("turn-agent_a"))
	if err != nil || aCall.Status != messages.StateCompleted {
		t.Fatalf("agent_a's call: %+v %v", aCall, err)
	}
	// The allowed calls' audit records are copied from their queued events
	// in batches: no event says they are stored, and two may share a batch.
	if n := countAudited(t, d.as(t, "auditor"), messages.AuditAllowed, 2); n < 2 {
		t.Fatalf("%d allowed calls audited, want 2", n)
	}
	js, err := jetstream.New(coordinatorConn)
	if err != nil {
		t.Fatal(err)
	}
	events, audit := names.EventsStream(), names.Audit().Stream()
	watched := []string{events, "KV_" + names.TurnsBucket(), "KV_" + names.ApprovalsBucket()}
	before := readMatrixState(t, srv, js, watched)
	if before.Streams[events].Msgs == 0 || len(before.AuditRecords) == 0 {
		t.Fatalf("nothing to protect: %+v", before)
	}
	auditedBefore := countAudited(t, d.as(t, "auditor"), "forbidden", 0)

	forbidden := messages.CodeForbidden
	type row struct {
		what string
		try  func(in *intruder)
	}
	api := func(what, endpoint string, body any) row {
		return row{what, func(in *intruder) { in.apiRefused(what, endpoint, jsonBody(t, body), forbidden) }}
	}
	subscribe := func(what, subject string) row {
		return row{what, func(in *intruder) { in.subscribeDenied(what, subject) }}
	}
	publish := func(what, subject string, body []byte) row {
		return row{what, func(in *intruder) { in.denied(what, subject, body) }}
	}
	echo := messages.JSON(`{"text":"x"}`)
	issuerRows := []row{
		api("submit as an agent its token does not name", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: echo, Agent: "support-bot"}),
		api("submit on a signed agent's route", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: echo, Agent: "triage-bot", Route: deployRoutes["agent_a"]}),
		api("list another agent's tools in its turn", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "support-bot", Turn: "turn-agent_a"}),
		api("read another agent's call", messages.EndpointCallsGet, messages.GetCallRequest{CallID: aCall.CallID}),
		api("read another agent's call's events", messages.EndpointCallsEvents, messages.CallEventsRequest{CallID: aCall.CallID}),
		api("read another agent's turn", messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: "turn-agent_a"}),
		api("cancel another agent's call", messages.EndpointCallsCancel, messages.CancelRequest{CallID: aCall.CallID}),
		api("decide an approval as an operator", messages.EndpointApprovalsDecide, messages.DecideRequest{ApprovalID: "appr-x", Decision: messages.DecisionApprove}),
		api("switch a tool off", messages.EndpointToolsDisable, messages.ToolSwitchRequest{Tool: "demo-echo"}),
		api("read the audit log", messages.EndpointAuditList, messages.AuditListRequest{}),
		subscribe("receive a signed agent's replies", "_INBOX_agent_a.>"),
		subscribe("receive another token's user's replies", messages.TokenInbox(iss.URL, "alice")+".>"),
		subscribe("receive every reply", "_INBOX.>"),
		subscribe("receive every routed result", "toolbus.results.>"),
		subscribe("follow every call's events", "toolbus.events.>"),
		subscribe("answer the servers' authorization requests", "$SYS.REQ.USER.AUTH"),
		publish("run a tool without the coordinator", "toolbus.call.demo.echo", []byte(`{}`)),
		publish("register a tool", "$KV.toolbus_catalog.tools.demo.forged", []byte(`{}`)),
		publish("purge the audit log", "$JS.API.STREAM.PURGE."+audit, []byte(`{}`)),
		publish("read a call's events directly", "$JS.API.DIRECT.GET."+events, []byte(`{"seq":1}`)),
		publish("push an account", "$SYS.REQ.CLAIMS.UPDATE", []byte(`{}`)),
		row{"follow the events stream with a consumer", func(in *intruder) {
			body := consumerRequest(t, events, jetstream.ConsumerConfig{Durable: "spy", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "toolbus.events.>"})
			if got := in.refusedByServer("follow the events stream", "$JS.API.CONSUMER.CREATE."+events+".spy.toolbus.events.>", body); !strings.Contains(got, "JetStream not enabled") {
				t.Fatalf("refused with %q", got)
			}
		}},
	}
	for _, r := range issuerRows {
		t.Run("token user bob/"+r.what, func(t *testing.T) {
			r.try(newIntruderWith(t, d.url, "oidc:bob", tokenOpts(bob)))
		})
	}
	for _, r := range []row{
		api("read the token user's call", messages.EndpointCallsGet, messages.GetCallRequest{CallID: aliceCall.CallID}),
		api("read the token user's turn", messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: "turn-alice"}),
		api("submit as the token user's agent", messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-echo", Arguments: echo, Agent: "billing-bot"}),
		subscribe("receive the token user's replies", aliceInbox+".>"),
	} {
		t.Run("agent_a/"+r.what, func(t *testing.T) { r.try(d.intruder(t, "agent_a")) })
	}

	if after := readMatrixState(t, srv, js, watched); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused actions changed the installation:\nbefore %+v\nafter  %+v", before, after)
	}
	want := auditedBefore + 10 + 3
	if n := countAudited(t, d.as(t, "auditor"), "forbidden", want); n < want {
		t.Errorf("%d forbidden requests audited, want at least %d", n-auditedBefore, want-auditedBefore)
	}
}
