package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestNetworkServerUnreachableAtStart checks that a streamable HTTP server
// that cannot be reached when the source starts does not fail the start:
// the source starts without tools and reports them once the server answers.
func TestNetworkServerUnreachableAtStart(t *testing.T) {
	srv := server.NewMCPServer("late", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcpgo.NewTool("hello"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("hello"), nil
	})
	mcpHandler := server.NewStreamableHTTPServer(srv)
	// Until up is set, every connection is dropped before an answer, as
	// a server that is not there yet.
	var up atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)

	src, err := New(Config{Name: "late", Namespace: "late", URL: ts.URL + "/mcp", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	updates := make(chan []worker.Tool, 4)
	tools, err := src.Start(ctx, func(tools []worker.Tool) { updates <- tools })
	if err != nil {
		t.Fatalf("start with the server away: %v", err)
	}
	defer src.Stop(context.Background())
	if len(tools) != 0 {
		t.Fatalf("tools of a server never reached: %v", tools)
	}
	up.Store(true)
	select {
	case tools = <-updates:
	case <-ctx.Done():
		t.Fatal("the tools never came once the server answered")
	}
	if len(tools) != 1 || tools[0].Definition.Method != "hello" {
		t.Fatalf("tools %v", tools)
	}
	res, err := tools[0].Handler.Handle(ctx, &worker.Call{ID: "c1", Arguments: []byte(`{}`)})
	if err != nil || res.IsError || res.Content[0].Text != "hello" {
		t.Fatalf("hello: %+v %v", res, err)
	}
}

// A stdio server that cannot start still fails the start: its command is
// the worker's own configuration.
func TestStdioServerThatCannotStartFailsStart(t *testing.T) {
	src, err := New(Config{Name: "missing", Command: "/nonexistent/mcp-server"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Start(context.Background(), func([]worker.Tool) {}); err == nil {
		t.Fatal("a stdio server that cannot start did not fail the start")
	}
}

// TestUnreachableServerErrorSaysWhyOnce checks the text of the error of a
// connection refused: the HTTP client's words, without the MCP client's
// layers that repeat themselves, and still a transport error.
func TestUnreachableServerErrorSaysWhyOnce(t *testing.T) {
	addr := testenv.FreeAddress(t)
	src, err := New(Config{Name: "gone", URL: "http://" + addr + "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	_, _, err = src.connect(ctx, ctx)
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	want := `initialize: Post "http://` + addr + `/mcp": dial tcp ` + addr + `: connect: connection refused`
	if err.Error() != want || !isTransportError(err) {
		t.Fatalf("error %q (transport error: %v), want %q", err, isTransportError(err), want)
	}
}

// TestWorkerStartsWithAnUnreachableServer: a worker whose HTTP MCP server
// is away starts, serves its other tools, and serves the server's tools
// once it answers.
func TestWorkerStartsWithAnUnreachableServer(t *testing.T) {
	srv := server.NewMCPServer("late", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcpgo.NewTool("hello"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("hello"), nil
	})
	mcpHandler := server.NewStreamableHTTPServer(srv)
	var up atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	src, err := New(Config{Name: "late", Namespace: "late", URL: ts.URL + "/mcp", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	type echoArgs struct {
		Text string `json:"text"`
	}
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in echoArgs) (string, error) { return in.Text, nil })
	nats := testenv.Server(t)
	testenv.Coordinator(t, nats.URL())
	testenv.Worker(t, nats.URL(), worker.Config{}, worker.Namespace{Name: "late", Tools: []worker.Tool{echo}, Sources: []worker.Source{src}})
	c := testenv.Client(t, nats.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	if res, err := c.Call(ctx, "late-echo", map[string]any{"text": "here"}); err != nil || res.IsError {
		t.Fatalf("late-echo: %+v %v", res, err)
	}
	js, err := jetstream.New(testenv.Connect(t, nats.URL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "toolbus_catalog")
	if err != nil {
		t.Fatal(err)
	}
	registered, err := kv.Watch(ctx, "tools.late.hello")
	if err != nil {
		t.Fatal(err)
	}
	defer registered.Stop()
	up.Store(true)
	for e := range registered.Updates() {
		if e != nil && e.Operation() == jetstream.KeyValuePut {
			break
		}
	}
	res, err := c.Call(ctx, "late-hello", map[string]any{})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Text != "hello" {
		t.Fatalf("late-hello: %+v %v", res, err)
	}
}
