package testenv

import (
	"os"
	"regexp"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// MCPClient is an MCP client of the streamable HTTP endpoint url (a
// front's /mcp) sending token as its bearer, started and initialized; it
// is closed when the test ends.
func MCPClient(t testing.TB, url, token string) *mcpclient.Client {
	t.Helper()
	mc, err := mcpclient.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	ctx := Context(t)
	if err := mc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	return mc
}

// mcpAgentToken is the line of agent mcp's token in the mcp-tokens.yaml
// that toolbus setup writes.
var mcpAgentToken = regexp.MustCompile(`(?m)^  ([0-9a-f]{48}): \{agent: mcp\}`)

// InstallationMCPToken reads the MCP front's token for agent mcp from an
// installation's mcp-tokens.yaml.
func InstallationMCPToken(t testing.TB, tokensFile string) string {
	t.Helper()
	tokens, err := os.ReadFile(tokensFile)
	if err != nil {
		t.Fatal(err)
	}
	token := mcpAgentToken.FindStringSubmatch(string(tokens))
	if token == nil {
		t.Fatalf("%s has no token for agent mcp:\n%s", tokensFile, tokens)
	}
	return token[1]
}
