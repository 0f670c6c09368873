package mcpfront_test

import (
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestWithIdentities: in the deploy configuration, with identities, a front
// connected as a fleet user (agent_b, which may act as billing-bot and
// triage-*) on its user's route serves its agents' tokens: lists, calls
// with and without progress, tasks; a token of an agent its user may not
// act as (support-bot) gets forbidden, as a JSON-RPC error on tools/list
// and a result with isError on tools/call.
func TestWithIdentities(t *testing.T) {
	t.Parallel()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "deploy", "nats")
	srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: filepath.Join(deploy, "users.conf")})
	ids, err := coordinator.LoadIdentities(filepath.Join(deploy, "identities.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	as := func(user string) *nats.Conn {
		password := strings.ReplaceAll(user, "_", "-") + "-secret"
		return testenv.Connect(t, srv.URL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)))
	}
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator")
		cfg.Identities = ids
	})
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})

	bus, err := client.New(as("agent_b"), client.Options{Route: "agentBroute00000000001", CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := mcpfront.New(mcpfront.Config{
		Client: bus,
		Tokens: map[string]mcpfront.Identity{token: {Agent: "billing-bot"}, "token-of-support": {Agent: "support-bot"}},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	url := hs.URL

	c, notes := connect(t, url, bearer(), legacySessions())
	testenv.Eventually(t, "the demo tools to be listed", func() bool {
		res, err := c.ListTools(testenv.Context(t), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == "demo-sleep" {
				return true
			}
		}
		return false
	})
	ctx := testenv.Context(t)
	res, err := callTool(ctx, c, "demo-echo", map[string]any{"text": "fleet"}, nil)
	if err != nil || res.IsError || text(res) != "fleet" {
		t.Fatalf("a call without progress: %+v %v", res, err)
	}
	res, err = callTool(ctx, c, "demo-sleep", map[string]any{"seconds": 0.3}, &mcp.Meta{ProgressToken: "p"})
	if err != nil || res.IsError || !strings.HasPrefix(text(res), "slept") {
		t.Fatalf("a call with progress: %+v %v", res, err)
	}
	notes.waitFor(t, string(mcp.MethodNotificationProgress))
	var created mcp.CreateTaskResult
	if e := rpc(t, url, c.GetSessionId(), "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "task"}, "task": map[string]any{}}, &created); e != nil {
		t.Fatalf("a task: %+v", e)
	}
	var result mcp.CallToolResult
	if e := rpc(t, url, c.GetSessionId(), "tasks/result", map[string]any{"taskId": created.Task.TaskId}, &result); e != nil || result.IsError || text(&result) != "task" {
		t.Fatalf("tasks/result: %+v %+v", result, e)
	}
	var list mcp.ListTasksResult
	if e := rpc(t, url, c.GetSessionId(), "tasks/list", map[string]any{}, &list); e != nil || len(list.Tasks) != 3 {
		t.Fatalf("tasks/list: %+v %+v", list, e)
	}

	session := "GGGGGGGGGGGGGGGGGGGGGG.t-support"
	if e := rpcAs(t, url, "token-of-support", session, "tools/list", map[string]any{}, nil); e == nil || !strings.Contains(e.Message, string(messages.CodeForbidden)) {
		t.Errorf("tools/list as an agent the front's user may not act as: %+v", e)
	}
	if e := rpcAs(t, url, "token-of-support", session, "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "x"}}, &result); e != nil || !result.IsError || result.Meta == nil || result.Meta.AdditionalFields[mcpfront.MetaCode] != string(messages.CodeForbidden) {
		t.Errorf("tools/call as an agent the front's user may not act as: %+v %+v", result, e)
	}
}
