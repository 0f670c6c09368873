package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestToolsOfADownServerAreUnavailable: while a worker's HTTP MCP server
// is away, that server's tools are listed unavailable, with the reason,
// hidden from a model and refused at submit, while the worker's other
// tools stay available; once the server answers again they are back,
// without a restart.
func TestToolsOfADownServerAreUnavailable(t *testing.T) {
	srv := server.NewMCPServer("remote", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcpgo.NewTool("hello"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("hello"), nil
	})
	mcpHandler := server.NewStreamableHTTPServer(srv)
	// While up is false, every connection is dropped before an answer, as
	// a server that went away.
	var up atomic.Bool
	up.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	src, err := New(Config{
		Name: "remote", Namespace: "mixed", URL: ts.URL + "/mcp",
		PingInterval: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	type echoArgs struct {
		Text string `json:"text"`
	}
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in echoArgs) (string, error) { return in.Text, nil })
	nats := testenv.Server(t)
	testenv.Coordinator(t, nats.URL())
	// Heartbeats bring the source's state to the catalog; a worker is
	// live for three of them, so a busy machine's late one does not make
	// its tools unavailable.
	testenv.Worker(t, nats.URL(), worker.Config{HeartbeatInterval: time.Second},
		worker.Namespace{Name: "mixed", Tools: []worker.Tool{echo}, Sources: []worker.Source{src}})
	c := testenv.Client(t, nats.URL(), client.Options{Agent: "tester"})
	// Without an agent, tools.list answers the whole catalog, unavailable tools included.
	operator := testenv.Client(t, nats.URL(), client.Options{})
	ctx := testenv.Context(t)

	waitAvailability(t, operator, "mixed-hello", true)
	if res, err := c.Call(ctx, "mixed-hello", map[string]any{}); err != nil || res.IsError {
		t.Fatalf("mixed-hello while up: %+v %v", res, err)
	}

	up.Store(false)
	entry := waitAvailability(t, operator, "mixed-hello", false)
	if !strings.Contains(entry.Unavailable, "source remote is down") {
		t.Fatalf("unavailable for %q, want the source named", entry.Unavailable)
	}
	if echo := toolEntry(t, operator, "mixed-echo"); !echo.Available {
		t.Fatalf("the worker's own tool is unavailable too: %+v", echo)
	}
	view, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: "tester", Format: "mcp"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range view.Tools {
		if e.Name == "mixed-hello" {
			t.Fatal("a model is shown the tool of a server that is down")
		}
	}
	_, err = c.Submit(ctx, messages.SubmitRequest{Tool: "mixed-hello", Arguments: []byte(`{}`)})
	if !errors.Is(err, messages.ErrToolUnavailable) || !strings.Contains(err.Error(), "source remote is down") {
		t.Fatalf("submit while the server is down: %v, want tool_unavailable naming the source", err)
	}

	up.Store(true)
	waitAvailability(t, operator, "mixed-hello", true)
	if res, err := c.Call(ctx, "mixed-hello", map[string]any{}); err != nil || res.IsError {
		t.Fatalf("mixed-hello once back: %+v %v", res, err)
	}
}

func toolEntry(t *testing.T, c *client.Client, name string) messages.ToolEntry {
	t.Helper()
	reply, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range reply.Tools {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s is not in the catalog", name)
	return messages.ToolEntry{}
}

// waitAvailability polls tools.list until the tool's availability is as
// wanted: the coordinator's view of the heartbeats sends no signal.
func waitAvailability(t *testing.T, c *client.Client, name string, available bool) messages.ToolEntry {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		reply, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range reply.Tools {
			if e.Name == name && e.Available == available {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became available=%v: %+v", name, available, reply.Tools)
		}
		<-tick.C
	}
}
