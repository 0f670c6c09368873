package mcpfront_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// sdkClientScript is run by node's test runner: the official TypeScript MCP
// SDK client (package-lock.json pins it) connects over streamable HTTP,
// lists, calls with and without progress, reads every kind of content
// block and the error mappings, makes a call a task, answers an approval
// through elicitation, and aborts a call.
const sdkClientScript = "testdata/sdk_client.test.mjs"

// nodeWithSDK returns the node binary, or skips the test when node or the
// SDK is not installed.
func nodeWithSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the TypeScript SDK client test needs node 20 or later")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	sdk := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(sdk); err != nil {
		t.Skipf("the TypeScript MCP SDK is not installed (%v): run `npm ci` at the repository root", err)
	}
	return node
}

// runSDKTests runs a script of node tests that drive the front with the
// official TypeScript SDK, with the variables env names, and fails the
// test if any of them fails; their report is logged, and returned.
func runSDKTests(t *testing.T, node, script string, env ...string) string {
	t.Helper()
	cmd := exec.CommandContext(testenv.Context(t), node, "--test", "--test-reporter=spec", script)
	cmd.Env = append(append(os.Environ(), env...), "NO_COLOR=1")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	err := cmd.Run()
	t.Logf("node --test %s:\n%s", script, output.String())
	if err != nil {
		t.Fatalf("the TypeScript SDK client's tests in %s failed: %v", script, err)
	}
	return output.String()
}

// TestTypeScriptSDKClient: the official TypeScript SDK client works with the
// front, and the call it aborted ends cancelled on the bus.
func TestTypeScriptSDKClient(t *testing.T) {
	t.Parallel()
	node := nodeWithSDK(t)
	s := startStack(t)
	_, url := s.front(t)
	const turn = "t-typescript-sdk"

	runSDKTests(t, node, sdkClientScript, "TOOLBUS_MCP_URL="+url+"/mcp", "TOOLBUS_MCP_TOKEN="+token, "TOOLBUS_MCP_TURN="+turn)

	// The SDK's calls are the turn's calls on the bus: the echo, the echo
	// made a task, the mixed content, the broken tool (its own error is a completed call),
	// the restart approved through elicitation and the sleep with progress
	// completed; the restart of the client without elicitation and the
	// inventory held for an operator await their approvals; the aborted sleep was cancelled by the front, on the
	// client's notifications/cancelled.
	info, err := testenv.Client(t, s.url, client.Options{Agent: "analyst"}).Turn(testenv.Context(t), turn)
	if err != nil {
		t.Fatal(err)
	}
	states := map[messages.CallState]int{}
	for _, c := range info.Calls {
		states[c.State]++
		if c.State == messages.StateCancelled && (c.Tool != "demo-sleep" || c.Result == nil || c.Result.Error == nil || !strings.Contains(c.Result.Error.Message, "cancelled by the MCP client")) {
			t.Errorf("the cancelled call: %+v %+v", c, c.Result)
		}
	}
	if len(info.Calls) != 9 || states[messages.StateCompleted] != 6 || states[messages.StateAwaitingApproval] != 2 || states[messages.StateCancelled] != 1 {
		t.Fatalf("the turn's calls: %+v", info.Calls)
	}
}
