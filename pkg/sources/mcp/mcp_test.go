package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func TestToResult(t *testing.T) {
	png := []byte("\x89PNG")
	wav := []byte("RIFF")
	res, err := toResult(&mcpgo.CallToolResult{
		Content: []mcpgo.Content{
			mcpgo.NewTextContent("hello"),
			mcpgo.NewImageContent(base64.StdEncoding.EncodeToString(png), "image/png"),
			mcpgo.NewAudioContent(base64.StdEncoding.EncodeToString(wav), "audio/wav"),
			mcpgo.NewResourceLink("file:///a.txt", "a.txt", "A file.", "text/plain"),
			mcpgo.NewEmbeddedResource(mcpgo.TextResourceContents{URI: "mem://t", MIMEType: "text/plain", Text: "inside"}),
			mcpgo.NewEmbeddedResource(mcpgo.BlobResourceContents{URI: "mem://b", MIMEType: "application/zip", Blob: base64.StdEncoding.EncodeToString([]byte("PK"))}),
		},
		RawStructuredContent: []byte(`{"n":1}`),
		IsError:              true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []messages.ContentBlock{
		messages.TextBlock("hello"),
		messages.ImageBlock(png, "image/png"),
		{Type: messages.ContentAudio, Data: wav, MIMEType: "audio/wav"},
		{Type: messages.ContentResourceLink, URI: "file:///a.txt", Name: "a.txt", Description: "A file.", MIMEType: "text/plain"},
		{Type: messages.ContentResource, URI: "mem://t", MIMEType: "text/plain", Text: "inside"},
		{Type: messages.ContentResource, URI: "mem://b", MIMEType: "application/zip", Data: []byte("PK")},
	}
	if len(res.Content) != len(want) {
		t.Fatalf("%d blocks, want %d", len(res.Content), len(want))
	}
	for i := range want {
		g, w := res.Content[i], want[i]
		if g.Type != w.Type || g.Text != w.Text || string(g.Data) != string(w.Data) || g.MIMEType != w.MIMEType || g.URI != w.URI || g.Name != w.Name || g.Description != w.Description {
			t.Errorf("block %d: %+v, want %+v", i, g, w)
		}
	}
	if !res.IsError || string(res.StructuredContent) != `{"n":1}` {
		t.Errorf("is_error %v structured %s", res.IsError, res.StructuredContent)
	}

	// Structured content alone also becomes a json block.
	res, err = toResult(&mcpgo.CallToolResult{Content: []mcpgo.Content{}, StructuredContent: map[string]int{"n": 2}})
	if err != nil || len(res.Content) != 1 || res.Content[0].Type != messages.ContentJSON || string(res.StructuredContent) != `{"n":2}` {
		t.Errorf("structured only: %+v %v", res, err)
	}
	if _, err := toResult(&mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewImageContent("not base64!", "image/png")}}); err == nil {
		t.Error("an image that is not base64 was accepted")
	}
}

func TestTags(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		a    mcpgo.ToolAnnotation
		want []string
	}{
		{mcpgo.ToolAnnotation{}, nil},
		{mcpgo.ToolAnnotation{ReadOnlyHint: &yes, DestructiveHint: &yes}, []string{messages.TagReadOnly}},
		{mcpgo.ToolAnnotation{ReadOnlyHint: &no, DestructiveHint: &yes, OpenWorldHint: &yes}, []string{messages.TagDestructive, messages.TagNetwork}},
		{mcpgo.ToolAnnotation{OpenWorldHint: &no}, nil},
	}
	for _, tt := range tests {
		if got := tags(tt.a); !slices.Equal(got, tt.want) {
			t.Errorf("tags(%+v) = %v, want %v", tt.a, got, tt.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Name: "x"},
		{Name: "x", Transport: TransportSSE},
		{Name: "x", URL: "ftp://h/"},
		{Name: "x", Command: "srv", URL: "http://h/"},
		{Name: "x", Command: "srv", Env: []string{"NOEQUALS"}},
		{Name: "x", Transport: "ws", URL: "http://h/"},
		{Name: "x", URL: "http://h/", Headers: map[string]string{"Authorization": "Bearer a\r\nX-Injected: 1"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestSSE runs a real MCP server over the HTTP+SSE transport: its tools are
// listed, a call reaches it, and cancelling a call cancels the server's handler.
func TestSSE(t *testing.T) {
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	srv := server.NewMCPServer("sse", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcpgo.NewTool("add", mcpgo.WithNumber("a"), mcpgo.WithNumber("b"), mcpgo.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("sum " + req.GetString("a", "") + req.GetString("b", "")), nil
		})
	srv.AddTool(mcpgo.NewTool("wait"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	sse := server.NewSSEServer(srv)
	ts := httptest.NewServer(sse)
	t.Cleanup(ts.Close)

	src, err := New(Config{Name: "sse", Namespace: "s", Transport: TransportSSE, URL: ts.URL + "/sse"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	tools, err := src.Start(ctx, func([]worker.Tool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop(context.Background())
	byName := map[string]worker.Tool{}
	for _, tool := range tools {
		byName[tool.Definition.Method] = tool
	}
	add, wait := byName["add"], byName["wait"]
	if add.Handler == nil || wait.Handler == nil || !add.Definition.Metadata.HasTag(messages.TagReadOnly) || add.Definition.Source != (messages.ToolSource{Kind: messages.SourceMCP, Name: "sse"}) {
		t.Fatalf("tools %+v", tools)
	}
	res, err := add.Handler.Handle(ctx, &worker.Call{ID: "c1", Arguments: messages.JSON(`{"a":"1","b":"2"}`)})
	if err != nil || len(res.Content) != 1 || res.Content[0].Text != "sum 12" {
		t.Fatalf("add: %+v %v", res, err)
	}

	callCtx, stop := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := wait.Handler.Handle(callCtx, &worker.Call{ID: "c2"})
		done <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the server never ran the call")
	}
	stop(worker.ErrCancelled)
	if err := <-done; !errors.Is(err, worker.ErrCancelled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the server's handler ended with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the server's handler was never cancelled")
	}
}

// A network session pings the server with the ping request of the
// protocol version the source speaks; once the server is gone, the ping
// fails as a transport error, which makes the source reconnect.
func TestPing(t *testing.T) {
	for _, tc := range []struct {
		transport Transport
		handler   func(*server.MCPServer) (http.Handler, string)
	}{
		{TransportSSE, func(s *server.MCPServer) (http.Handler, string) { return server.NewSSEServer(s), "/sse" }},
		{TransportHTTP, func(s *server.MCPServer) (http.Handler, string) { return server.NewStreamableHTTPServer(s), "/mcp" }},
	} {
		t.Run(string(tc.transport), func(t *testing.T) {
			pinged := make(chan any, 1)
			hooks := &server.Hooks{}
			hooks.AddBeforePing(func(_ context.Context, id any, _ *mcpgo.PingRequest) { pinged <- id })
			handler, path := tc.handler(server.NewMCPServer("ping", "1", server.WithToolCapabilities(true), server.WithHooks(hooks)))
			ts := httptest.NewServer(handler)
			t.Cleanup(ts.Close)
			src, err := New(Config{Name: "ping", Namespace: "p", Transport: tc.transport, URL: ts.URL + path})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
			defer cancel()
			sess, _, err := src.connect(ctx, ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.close()
			if err := sess.ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			if id := <-pinged; id == nil {
				t.Fatal("the server saw a ping without an ID")
			}
			ts.CloseClientConnections()
			ts.Close()
			if err := sess.ping(ctx); !isTransportError(err) {
				t.Fatalf("ping of a server that is gone: %v, want a transport error", err)
			}
		})
	}
}
