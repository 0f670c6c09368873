package admin_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/admin"
	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/natsflags"
	"github.com/toolbus/toolbus/internal/natsserver"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestConsoleOfADeployedOperator: with the deploy configuration's users
// and identities, a console connected as the operator (whose account has
// no JetStream) shows the catalog and says why it cannot show the workers'
// slots and the audit stream, and approves an agent's call, which runs.
func TestConsoleOfADeployedOperator(t *testing.T) {
	t.Parallel()
	deploy := filepath.Join("..", "..", "deploy", "nats")
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), ConfigFile: filepath.Join(deploy, "users.conf")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	as := func(user string) *nats.Conn {
		password := strings.ReplaceAll(user, "_", "-") + "-secret"
		return testenv.Connect(t, srv.URL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)))
	}
	ids, err := coordinator.LoadIdentities(filepath.Join(deploy, "identities.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn, cfg.Identities, cfg.PolicyFile = as("coordinator"), ids, policy
	})
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})

	operator := as("operator")
	c, err := client.New(operator, client.Options{CoordinatorReads: true, Route: "operatorroute000000001"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	js, err := jetstream.New(operator)
	if err != nil {
		t.Fatal(err)
	}
	console, err := admin.New(admin.Config{Client: c, JetStream: js, By: "operator", Tokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(console.Handler())
	t.Cleanup(hs.Close)
	b := &testBundle{url: hs.URL, client: c, server: hs}
	hc := browser(t)
	csrf := b.login(t, hc)

	_, page := do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if !strings.Contains(page, "demo-echo") || !strings.Contains(page, "has no JetStream") {
		t.Fatalf("catalog of a deployed operator:\n%s", page)
	}
	_, page = do(t, hc, "GET", b.url+"/audit", nil, nil)
	if !strings.Contains(page, "has no JetStream") {
		t.Fatalf("audit page of a deployed operator:\n%s", page)
	}

	ctx := testenv.Context(t)
	agent, err := client.New(as("agent_a"), client.Options{Agent: "support-bot", CoordinatorReads: true, Route: "agentAroute00000000001"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	reply, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nodded"}`)})
	if err != nil || reply.Approval == nil {
		t.Fatalf("submit: %+v %v, want a call awaiting approval", reply, err)
	}
	_, page = do(t, hc, "GET", b.url+"/approvals", nil, nil)
	if !strings.Contains(page, reply.CallID) {
		t.Fatalf("the approvals page does not list the call:\n%s", page)
	}
	resp, _ := do(t, hc, "POST", b.url+"/approvals/"+reply.Approval.ApprovalID+"/decide", url.Values{"csrf": {csrf}, "decision": {"approve"}, "remember": {"call"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/calls/"+reply.CallID) {
		t.Fatalf("approve: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	res, err := agent.Wait(ctx, reply.CallID)
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the approved call: %+v %v", res, err)
	}
	_, page = do(t, hc, "GET", b.url+"/calls/"+reply.CallID, nil, nil)
	if !strings.Contains(page, "nodded") || !strings.Contains(page, "by alice in the console") {
		t.Fatalf("the call page of the approved call:\n%s", page)
	}
}
