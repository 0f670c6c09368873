package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// twinSchema branches twice at every level of its recursion: validating
// arguments against it could cost more than the coordinator allows.
const twinSchema = `{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},` +
	`"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}}}`

// syncBuffer is a log's destination that a worker's goroutines may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// httpServer serves an MCP server with the tool twin, and small when asked,
// over streamable HTTP.
func httpServer(t *testing.T, small bool) string {
	t.Helper()
	srv := server.NewMCPServer("costly", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcpgo.NewToolWithRawSchema("twin", "Too costly to check.", json.RawMessage(twinSchema)), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("twin"), nil
	})
	if small {
		srv.AddTool(mcpgo.NewTool("small"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("small"), nil
		})
	}
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// TestCostlySchemaSkipsItsTool starts a worker on an MCP server that lists
// a tool whose input schema is too costly beside a small one, and on a
// server that lists only such a tool: the worker starts and serves the
// small tool; the costly one is not registered (a call of it is
// tool_not_found), and the log names it and says why, and says of the
// second server that it serves no tool.
func TestCostlySchemaSkipsItsTool(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	mixed, err := New(Config{Name: "mixed", Namespace: "c", URL: httpServer(t, true), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	onlyCostly, err := New(Config{Name: "only", Namespace: "d", URL: httpServer(t, false), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	nats := testenv.Server(t)
	testenv.Coordinator(t, nats.URL())
	testenv.Worker(t, nats.URL(), worker.Config{Logger: logger},
		worker.Namespace{Name: "c", Sources: []worker.Source{mixed}},
		worker.Namespace{Name: "d", Sources: []worker.Source{onlyCostly}})
	c := testenv.Client(t, nats.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "c-small", map[string]any{})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Text != "small" {
		t.Fatalf("c-small: %+v %v", res, err)
	}
	for _, name := range []string{"c-twin", "d-twin"} {
		if _, err := c.Call(ctx, name, map[string]any{}); !errors.Is(err, messages.ErrToolNotFound) {
			t.Errorf("%s: %v, want tool_not_found", name, err)
		}
	}
	logged := log.String()
	// logLine reports whether a line of the log holds every part.
	logLine := func(parts ...string) bool {
		for _, line := range strings.Split(logged, "\n") {
			found := true
			for _, p := range parts {
				found = found && strings.Contains(line, p)
			}
			if found {
				return true
			}
		}
		return false
	}
	const schemaReason = `: input schema too costly to validate: at nesting depth `
	if !logLine(`level=WARN msg="tool skipped: it is not served"`, "namespace=c source=mixed tool=c-twin", `reason="tool c-twin`+schemaReason) ||
		!logLine(`level=WARN msg="tool skipped: it is not served"`, "namespace=d source=only tool=d-twin", `reason="tool d-twin`+schemaReason) {
		t.Errorf("the log does not name each skipped tool and why:\n%s", logged)
	}
	if !logLine(`level=ERROR msg="source serves no tool: every tool it lists was skipped"`, "namespace=d source=only skipped=1") ||
		logLine(`msg="source serves no tool`, "source=mixed") {
		t.Errorf("the log does not say that source only, and it alone, serves no tool:\n%s", logged)
	}
}
