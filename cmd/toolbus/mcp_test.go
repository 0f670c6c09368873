package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
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
// the agent's tools; its calls are the agent's, in the turn --turn names.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	c, err := mcpclient.NewStdioMCPClient(bin, nil, "--server", url, "--agent", "analyst", "mcp", "--stdio", "--turn", "t-desktop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if got := mcpToolNames(t, c); !slices.Contains(got, "demo-echo") {
		t.Fatalf("tools/list: %v", got)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "demo-echo"
	req.Params.Arguments = map[string]any{"text": "from the desktop"}
	res, err := c.CallTool(testenv.Context(t), req)
	if err != nil || res.IsError || textOf(res) != "from the desktop" {
		t.Fatalf("demo-echo: %+v %v", res, err)
	}
	info, err := testenv.Client(t, url, client.Options{Agent: "analyst"}).Turn(testenv.Context(t), "t-desktop")
	if err != nil || len(info.Calls) != 1 || info.Calls[0].Agent != "analyst" {
		t.Fatalf("turn t-desktop: %+v %v", info, err)
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
// to listen beyond loopback; on loopback it serves --agent without a token
// and says so when it starts.
func TestMCPWithoutTokensServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	_, stderr, code := cli(t, bin, url, "--agent", "analyst", "mcp", "--listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "loopback") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, stderr, code = cli(t, bin, url, "mcp", "--listen", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(stderr, "--agent") {
		t.Fatalf("without tokens or an agent: exit %d: %s", code, stderr)
	}
	p := testenv.Start(t, bin, "--server", url, "--agent", "analyst", "mcp", "--listen", "127.0.0.1:0")
	endpoint := regexp.MustCompile(`http://\S+/mcp`).FindString(p.WaitLine(t, "MCP endpoint:"))
	// The warning is logged before the endpoint is printed.
	if warning := regexp.MustCompile(`.*no tokens.*`).FindString(p.Output()); !strings.Contains(warning, "loopback only") || !strings.Contains(warning, "agent=analyst") {
		t.Errorf("no warning at start that every request is served as analyst on loopback only:\n%s", p.Output())
	}
	c, err := mcpclient.NewStreamableHttpClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if got := mcpToolNames(t, c); !slices.Contains(got, "demo-echo") {
		t.Fatalf("tools/list without a token: %v", got)
	}
}

// TestMCPTokensFromTheEnvironment: without --tokens, the front reads its
// tokens from TOOLBUS_MCP_TOKENS and refuses a request without one. (Not
// parallel: it sets the environment the binary inherits.)
func TestMCPTokensFromTheEnvironment(t *testing.T) {
	url, bin := stack(t)
	t.Setenv(mcpfront.TokensEnv, "env-t0k3n=analyst")
	p := testenv.Start(t, bin, "--server", url, "mcp", "--listen", "127.0.0.1:0")
	endpoint := regexp.MustCompile(`http://\S+/mcp`).FindString(p.WaitLine(t, "MCP endpoint:"))
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", resp.StatusCode)
	}
	c, err := mcpclient.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer env-t0k3n"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if got := mcpToolNames(t, c); !slices.Contains(got, "demo-echo") {
		t.Fatalf("tools/list: %v", got)
	}
}

// TestMCPDrainsOnSIGTERM: on SIGTERM the front lets a call in flight
// finish and answer, then exits 0.
func TestMCPDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	p := testenv.Start(t, bin, "--server", url, "--agent", "analyst", "mcp", "--listen", "127.0.0.1:0", "--drain", "30s")
	endpoint := regexp.MustCompile(`http://\S+/mcp`).FindString(p.WaitLine(t, "MCP endpoint:"))
	c, err := mcpclient.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{mcpfront.TurnHeader: "t-drain"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	mcpToolNames(t, c)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "demo-sleep"
		// Long enough to be seen running on a busy machine; far within
		// the drain.
		req.Params.Arguments = map[string]any{"seconds": 5}
		res, err := c.CallTool(testenv.Context(t), req)
		done <- answer{res, err}
	}()
	bus := testenv.Client(t, url, client.Options{Agent: "analyst"})
	for {
		info, err := bus.Turn(testenv.Context(t), "t-drain")
		if err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateRunning {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("the call ended before it ran: %+v %v", a.res, a.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError || !strings.HasPrefix(textOf(a.res), "slept") {
		t.Fatalf("the call in flight at SIGTERM: %+v %v", a.res, a.err)
	}
	if err := p.Wait(testenv.Context(t)); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), "draining") {
		t.Errorf("no word of the drain:\n%s", p.Output())
	}
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestDevServesMCP: toolbus dev prints the URL of its MCP front, which
// serves the agent dev to a loopback client without a token; --mcp-port -1
// starts none.
func TestDevServesMCP(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir(), "--console-port", "-1")
	natsURL := regexp.MustCompile(`nats://\S+`).FindString(dev.WaitLine(t, "NATS URL:"))
	line := dev.WaitLine(t, "MCP endpoint:")
	endpoint := regexp.MustCompile(`http://127\.0\.0\.1:\d+/mcp`).FindString(line)
	if endpoint == "" || !strings.Contains(line, "no token") {
		t.Fatalf("the MCP line of toolbus dev: %q", line)
	}
	dev.WaitLine(t, "Press Ctrl-C")
	c, err := mcpclient.NewStreamableHttpClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testenv.Context(t)
	var res *mcp.CallToolResult
	for {
		// The demo worker registers its tools as the stack starts.
		if got := mcpToolNames(t, c); slices.Contains(got, "demo-echo") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the demo tools are not listed")
		case <-time.After(50 * time.Millisecond):
		}
		_ = c.Close()
		if c, err = mcpclient.NewStreamableHttpClient(endpoint); err != nil {
			t.Fatal(err)
		}
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "demo-echo"
	req.Params.Arguments = map[string]any{"text": "from dev"}
	if res, err = c.CallTool(ctx, req); err != nil || res.IsError || textOf(res) != "from dev" {
		t.Fatalf("demo-echo: %+v %v", res, err)
	}
	callID, _ := res.Meta.AdditionalFields[mcpfront.MetaCallID].(string)
	info, err := testenv.Client(t, natsURL, client.Options{Agent: "dev"}).Get(ctx, callID)
	if err != nil || info.Agent != "dev" {
		t.Fatalf("the call through the dev front: %+v %v", info, err)
	}

	none := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir(), "--console-port", "-1", "--mcp-port", "-1")
	none.WaitLine(t, "Press Ctrl-C")
	if strings.Contains(none.Output(), "MCP endpoint") {
		t.Errorf("--mcp-port -1 started a front:\n%s", none.Output())
	}
}
