package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testenv"
)

func mcpToolNames(t *testing.T, c *mcpclient.Client) []string {
	t.Helper()
	ctx := testenv.Context(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestMCPStdio: a desktop client launches toolbus mcp --stdio and lists
// the agent's tools.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	c, err := mcpclient.NewStdioMCPClient(bin, nil, "--server", url, "--agent", "analyst", "mcp", "--stdio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if got := mcpToolNames(t, c); !slices.Contains(got, "demo-echo") {
		t.Fatalf("tools/list: %v", got)
	}
}

// TestMCPListen: toolbus mcp --listen prints its endpoint, serves
// /healthz, requires a token when it has tokens, and drains on SIGTERM.
func TestMCPListen(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  t0k3n: {agent: analyst}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.Start(t, bin, "--server", url, "mcp", "--listen", "127.0.0.1:0", "--tokens", tokens)
	endpoint := regexp.MustCompile(`http://\S+/mcp`).FindString(p.WaitLine(t, "MCP endpoint:"))
	resp, err := http.Get(strings.TrimSuffix(endpoint, "/mcp") + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	c, err := mcpclient.NewStreamableHttpClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testenv.Context(t)); err == nil {
		if _, err := c.Initialize(testenv.Context(t), mcp.InitializeRequest{}); err == nil {
			t.Error("initialized without a token")
		}
	}
	_ = c.Close()
	authed, err := mcpclient.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer t0k3n"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = authed.Close() })
	if got := mcpToolNames(t, authed); !slices.Contains(got, "demo-echo") {
		t.Fatalf("tools/list: %v", got)
	}
	if err := p.Interrupt(t); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, p.Output())
	}
}

// TestMCPWithoutTokensServesLoopbackOnly: without tokens the front refuses
// to listen beyond loopback.
func TestMCPWithoutTokensServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	_, stderr, code := cli(t, bin, url, "--agent", "analyst", "mcp", "--listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "loopback") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
