package devstack_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/devstack"
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
	deadline := time.Now().Add(testenv.Patience)
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

// TestConsole: the dev stack serves the admin console on loopback without
// a login, and the catalog page lists the demo tools; it refuses to serve
// one without tokens on an address that is not loopback.
func TestConsole(t *testing.T) {
	ctx := testenv.Context(t)
	stack, err := devstack.Start(ctx, devstack.Config{DataDir: t.TempDir(), Port: 0, ConsoleListen: "127.0.0.1:0", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = stack.Stop(stopCtx)
	})
	if !strings.HasPrefix(stack.ConsoleURL, "http://127.0.0.1:") {
		t.Fatalf("console URL %q", stack.ConsoleURL)
	}
	// The coordinator lists the demo tools once its watch of the catalog
	// brought their registration, a moment after the worker wrote it.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		status, page := get(t, ctx, stack.ConsoleURL+"catalog")
		if status == http.StatusOK && strings.Contains(page, "demo-echo") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("catalog page: %d\n%s", status, page)
		case <-tick.C:
		}
	}

	_, err = devstack.Start(ctx, devstack.Config{DataDir: t.TempDir(), Port: 0, ConsoleListen: "0.0.0.0:0", Logger: testenv.Logger(t)})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a console without tokens on 0.0.0.0: %v, want refused", err)
	}
}

func get(t *testing.T, ctx context.Context, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(page)
}
