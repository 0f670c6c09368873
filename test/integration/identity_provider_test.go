package integration

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/oidctest"
	"github.com/toolbus/toolbus/internal/testenv"
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
	natsAddr, consoleAddr, mcpAddr := freeAddress(t), freeAddress(t), freeAddress(t)
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
	mc, err := mcpclient.NewStreamableHttpClient(resource, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + mcpToken}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	ctx := testenv.Context(t)
	if err := mc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
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
