package mcp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/pkg/worker"
)

// serveEnvArg makes the test binary an MCP server over stdio whose one
// tool, "env", answers with the server's environment, a line a variable.
const serveEnvArg = "serve-env-mcp-server"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fakeServerArg {
		serveFake(os.Getenv("FAKE_MCP_MODE"))
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == serveEnvArg {
		s := server.NewMCPServer("env", "1.0.0", server.WithRoots())
		s.AddTool(mcpgo.NewTool("env"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(strings.Join(os.Environ(), "\n")), nil
		})
		// traceparent answers with the trace context the request's _meta carries.
		s.AddTool(mcpgo.NewTool("traceparent"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			if req.Params.Meta != nil {
				if tp, ok := req.Params.Meta.AdditionalFields["traceparent"].(string); ok {
					return mcpgo.NewToolResultText(tp), nil
				}
			}
			return mcpgo.NewToolResultText("none"), nil
		})
		// roots answers with the URIs of the client's roots, one a line.
		s.AddTool(mcpgo.NewTool("roots"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			res, err := s.RequestRoots(ctx, mcpgo.ListRootsRequest{})
			if err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			var uris []string
			for _, r := range res.Roots {
				uris = append(uris, r.URI)
			}
			return mcpgo.NewToolResultText(strings.Join(uris, "\n")), nil
		})
		if err := server.ServeStdio(s); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	leaks.Main(m)
}

// TestStdioServerEnvironment checks that a stdio server sees the allowed
// variables, the ones the source names and its own, never the worker's
// secrets.
func TestStdioServerEnvironment(t *testing.T) {
	t.Setenv("TOOLBUS_PASSWORD", "worker-secret")
	t.Setenv("TOOLBUS_TEST_PASSED_THROUGH", "named")
	t.Setenv("PATH", os.Getenv("PATH"))
	t.Setenv("TOOLBUS_TEST_OVERRIDDEN", "inherited")
	t.Setenv("TOOLBUS_TEST_FUNCTION", "() { echo exported by bash; }")
	src, err := New(Config{
		Name:       "env",
		Namespace:  "env",
		Command:    os.Args[0],
		Args:       []string{serveEnvArg},
		Env:        []string{"GREETING=hello", "TOOLBUS_TEST_OVERRIDDEN=configured"},
		InheritEnv: []string{"TOOLBUS_TEST_PASSED_THROUGH", "TOOLBUS_TEST_OVERRIDDEN", "TOOLBUS_TEST_FUNCTION"},
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
	var envTool worker.Tool
	for _, tool := range tools {
		if tool.Definition.Method == "env" {
			envTool = tool
		}
	}
	if envTool.Handler == nil {
		t.Fatalf("tools %v", tools)
	}
	res, err := envTool.Handler.Handle(ctx, &worker.Call{ID: "c1", Tool: "env-env", Arguments: []byte(`{}`), Attempt: 1})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("env: %+v %v", res, err)
	}
	env := strings.Split(res.Content[0].Text, "\n")
	for _, kv := range env {
		if strings.HasPrefix(kv, "TOOLBUS_PASSWORD=") {
			t.Errorf("the server sees the worker's %s", kv)
		}
		// env wins over inherit_env; an exported shell function is not passed on.
		if kv == "TOOLBUS_TEST_OVERRIDDEN=inherited" || strings.HasPrefix(kv, "TOOLBUS_TEST_FUNCTION=") {
			t.Errorf("the server sees %s", kv)
		}
	}
	for _, want := range []string{"GREETING=hello", "TOOLBUS_TEST_PASSED_THROUGH=named", "TOOLBUS_TEST_OVERRIDDEN=configured", "PATH=" + os.Getenv("PATH")} {
		if !slices.Contains(env, want) {
			t.Errorf("the server's environment lacks %s: %q", want, env)
		}
	}
}

// TestRoots checks that a server is told the configured roots, and that
// without them the worker declares no roots capability.
func TestRoots(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		roots []string
		want  string
		fails bool
	}{
		{roots: []string{dir}, want: "file://" + filepath.ToSlash(dir)},
		{fails: true},
	} {
		src, err := New(Config{Name: "roots", Namespace: "roots", Command: os.Args[0], Args: []string{serveEnvArg}, Roots: tc.roots})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tools, err := src.Start(ctx, func([]worker.Tool) {})
		if err != nil {
			t.Fatal(err)
		}
		var rootsTool worker.Tool
		for _, tool := range tools {
			if tool.Definition.Method == "roots" {
				rootsTool = tool
			}
		}
		res, err := rootsTool.Handler.Handle(ctx, &worker.Call{ID: "c1", Arguments: []byte(`{}`), Attempt: 1})
		src.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tc.fails {
			if !res.IsError {
				t.Errorf("without roots the server was given %q", res.Content[0].Text)
			}
			continue
		}
		if res.IsError || res.Content[0].Text != tc.want {
			t.Errorf("roots %+v, want %q", res.Content, tc.want)
		}
	}
}

// TestTraceContextReachesTheServer: a traced call's W3C trace context is
// in the request's _meta, so the MCP server's spans join the call's trace;
// an untraced call carries none.
func TestTraceContextReachesTheServer(t *testing.T) {
	src, err := New(Config{Name: "trace", Namespace: "trace", Command: os.Args[0], Args: []string{serveEnvArg}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tools, err := src.Start(ctx, func([]worker.Tool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop(ctx)
	var tool worker.Tool
	for _, tl := range tools {
		if tl.Definition.Method == "traceparent" {
			tool = tl
		}
	}
	traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	}))
	for _, tc := range []struct {
		ctx  context.Context
		want string
	}{
		{traced, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{ctx, "none"},
	} {
		res, err := tool.Handler.Handle(tc.ctx, &worker.Call{ID: "c1", Arguments: []byte(`{}`), Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.Content[0].Text != tc.want {
			t.Errorf("the server saw traceparent %+v, want %q", res.Content, tc.want)
		}
	}
}
