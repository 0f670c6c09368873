package mcp

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/pkg/worker"
)

// serveEnvArg makes the test binary an MCP server over stdio whose one
// tool, "env", answers with the server's environment, a line a variable.
const serveEnvArg = "serve-env-mcp-server"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveEnvArg {
		s := server.NewMCPServer("env", "1.0.0")
		s.AddTool(mcpgo.NewTool("env"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(strings.Join(os.Environ(), "\n")), nil
		})
		if err := server.ServeStdio(s); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStdioServerEnvironment checks that a stdio server sees the allowed
// variables, the ones the source names and its own, never the worker's
// secrets.
func TestStdioServerEnvironment(t *testing.T) {
	t.Setenv("TOOLBUS_PASSWORD", "worker-secret")
	t.Setenv("TOOLBUS_TEST_PASSED_THROUGH", "named")
	t.Setenv("PATH", os.Getenv("PATH"))
	src, err := New(Config{
		Name:       "env",
		Namespace:  "env",
		Command:    os.Args[0],
		Args:       []string{serveEnvArg},
		Env:        []string{"GREETING=hello"},
		InheritEnv: []string{"TOOLBUS_TEST_PASSED_THROUGH"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tools, err := src.Start(ctx, func([]worker.Tool) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Stop(ctx) })
	if len(tools) != 1 {
		t.Fatalf("tools %v", tools)
	}
	res, err := tools[0].Handler.Handle(ctx, &worker.Call{ID: "c1", Tool: "env-env", Arguments: []byte(`{}`), Attempt: 1})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("env: %+v %v", res, err)
	}
	env := strings.Split(res.Content[0].Text, "\n")
	for _, kv := range env {
		if strings.HasPrefix(kv, "TOOLBUS_PASSWORD=") {
			t.Errorf("the server sees the worker's %s", kv)
		}
	}
	for _, want := range []string{"GREETING=hello", "TOOLBUS_TEST_PASSED_THROUGH=named", "PATH=" + os.Getenv("PATH")} {
		if !slices.Contains(env, want) {
			t.Errorf("the server's environment lacks %s: %q", want, env)
		}
	}
}
