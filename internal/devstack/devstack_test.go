package devstack_test

import (
	"context"
	"slices"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/devstack"
	"github.com/toolbus/toolbus/internal/testenv"
)

// TestMCPFront: the dev stack starts the MCP front on a loopback URL that an
// MCP client reaches without a token, and it lists the demo tools.
func TestMCPFront(t *testing.T) {
	ctx := testenv.Context(t)
	stack, err := devstack.Start(ctx, devstack.Config{DataDir: t.TempDir(), Port: 0, MCPListen: "127.0.0.1:0", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = stack.Stop(stopCtx)
	})
	if stack.MCPURL == "" {
		t.Fatal("no MCP URL")
	}
	c, err := mcpclient.NewStreamableHttpClient(stack.MCPURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		if slices.Contains(names, "demo-echo") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo tools are not listed: %v", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
