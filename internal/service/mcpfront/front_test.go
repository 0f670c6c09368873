package mcpfront_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func TestMain(m *testing.M) { leaks.Main(m) }

const token = "secret-token-of-analyst"

// stack is the real Toolbus a front talks to: an embedded server, a
// coordinator with exposure rules, and workers of the demo tools and of
// weather tools that the analyst sees only once discovered.
type stack struct {
	url string // of the NATS server
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func weatherTool(method, description string) worker.Tool {
	return worker.Func(method, description, func(context.Context, struct {
		City string `json:"city,omitempty"`
	}) (string, error) {
		return method + " is sunny", nil
	})
}

func startStack(t testing.TB) stack {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bundles", "base.yaml"), `
id: base
match:
  - name: "llm/tools:list"
    tier: critical
  - name: "demo/*"
    exclude: ["demo:sha256"]
  - name: "demo:sha256"
    approval: {mode: queue, message: "Digests need an operator"}
  - name: "ops:restart"
    approval: {mode: prompt, message: "Restarts interrupt users"}
  - name: "ops:inventory"
    approval: {mode: queue, message: "Counting needs an operator"}
  - name: "batch:reindex"
    approval: {mode: queue, message: "Reindexing loads the database"}
  - name: "media/*"
`)
	writeFile(t, filepath.Join(dir, "agents", "analyst.yaml"), `
id: analyst
tool:
  bundles: [base]
  items:
    - name: "weather"
      tier: onDemand
`)
	writeFile(t, filepath.Join(dir, "agents", "guest.yaml"), `
id: guest
tool:
  items:
    - name: "demo/*"
      exclude: ["demo:word_count"]
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{
		weatherTool("forecast", "Returns the weather forecast for a city for the next days."),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "ops", Tools: []worker.Tool{
		weatherTool("restart", "Restarts a service."),
		// A tool with an output schema, held for an operator.
		worker.Func("inventory", "Counts a service's instances.", func(context.Context, struct {
			Service string `json:"service"`
		}) (struct {
			Instances int `json:"instances"`
		}, error) {
			return struct {
				Instances int `json:"instances"`
			}{Instances: 3}, nil
		}),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "batch", Tools: []worker.Tool{
		worker.Func("reindex", "Rebuilds the search index, reporting progress.", func(ctx context.Context, _ struct{}) (string, error) {
			for i := 1; i <= 3; i++ {
				worker.ReportProgress(ctx, float64(i), 3, fmt.Sprintf("reindexed %d of 3", i))
			}
			return "reindexed", nil
		}),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "media", Tools: mediaTools()})
	// The coordinator sees the catalog through a watch: the stack is up
	// once it lists the last tool registered, and so every other.
	bus := testenv.Client(t, srv.URL(), client.Options{})
	testenv.Eventually(t, "the coordinator to list the stack's tools", func() bool {
		reply, err := bus.ListTools(testenv.Context(t), messages.ListToolsRequest{Agent: "analyst", Format: "mcp"})
		return err == nil && slices.ContainsFunc(reply.Schemas, func(schema messages.JSON) bool { return bytes.Contains(schema, []byte(`"media-slow"`)) })
	})
	return stack{url: srv.URL()}
}

// mediaTools answer with every kind of content block, with the tool's own
// error, and past their deadline.
func mediaTools() []worker.Tool {
	half := 0.5
	return []worker.Tool{
		worker.Func("mixed", "Answers with every kind of content block.", func(context.Context, struct{}) (*worker.Result, error) {
			return &worker.Result{
				Content: []messages.ContentBlock{
					{Type: messages.ContentText, Text: "a chart", Annotations: &messages.ContentAnnotations{Audience: []string{"user"}, Priority: &half}},
					messages.ImageBlock([]byte("PNG\x00\x01"), "image/png"),
					{Type: messages.ContentAudio, Data: []byte("RIFF\x00"), MIMEType: "audio/wav"},
					{Type: messages.ContentResource, URI: "file:///notes.md", MIMEType: "text/markdown", Text: "# notes"},
					{Type: messages.ContentResource, URI: "file:///blob.bin", MIMEType: "application/octet-stream", Data: []byte{0, 1, 2}},
					{Type: messages.ContentResourceLink, URI: "https://example.com/report", Name: "report", Description: "The full report", MIMEType: "text/html"},
					messages.JSONBlock(messages.JSON(`{"points":3}`)),
				},
				StructuredContent: messages.JSON(`{"points":3}`),
			}, nil
		}),
		worker.Func("broken", "Fails.", func(context.Context, struct{}) (string, error) {
			return "", errors.New("the printer is on fire")
		}),
		worker.Func("slow", "Outlives its deadline.", func(ctx context.Context, _ struct{}) (string, error) {
			<-ctx.Done()
			return "", context.Cause(ctx)
		}, worker.WithTimeout(300*time.Millisecond)),
	}
}

// front starts a front process's worth: its own connection and client,
// serving HTTP on a loopback port.
func (s stack) front(t testing.TB) (*mcpfront.Front, string) {
	t.Helper()
	f, hs := s.frontServer(t)
	return f, hs.URL
}

func (s stack) frontServer(t testing.TB) (*mcpfront.Front, *httptest.Server) {
	t.Helper()
	f, err := mcpfront.New(mcpfront.Config{
		Client: testenv.Client(t, s.url, client.Options{}),
		Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	return f, hs
}

// notifications collects what the server sent.
type notifications struct {
	mu   sync.Mutex
	got  []mcp.JSONRPCNotification
	seen chan struct{}
}

func (n *notifications) add(note mcp.JSONRPCNotification) {
	n.mu.Lock()
	n.got = append(n.got, note)
	n.mu.Unlock()
	select {
	case n.seen <- struct{}{}:
	default:
	}
}

// all returns the notifications of method that came, in order.
func (n *notifications) all(method string) []mcp.JSONRPCNotification {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, note := range n.got {
		if note.Method == method {
			out = append(out, note)
		}
	}
	return out
}

func (n *notifications) count(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, note := range n.got {
		if note.Method == method {
			c++
		}
	}
	return c
}

// waitFor waits until a notification of method has come.
func (n *notifications) waitFor(t *testing.T, method string) {
	t.Helper()
	deadline := time.After(testenv.Patience)
	for n.count(method) == 0 {
		select {
		case <-n.seen:
		case <-deadline:
			t.Fatalf("no %s", method)
		}
	}
}

func connect(t testing.TB, url string, headers map[string]string, opts ...mcpclient.ClientOption) (*mcpclient.Client, *notifications) {
	t.Helper()
	return connectWith(t, url, []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(headers)}, opts...)
}

// connectWith is connect with the transport's options given whole.
func connectWith(t testing.TB, url string, trOpts []transport.StreamableHTTPCOption, opts ...mcpclient.ClientOption) (*mcpclient.Client, *notifications) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url+"/mcp", trOpts...)
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, opts...)
	notes := &notifications{seen: make(chan struct{}, 1)}
	c.OnNotification(notes.add)
	ctx := testenv.Context(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	return c, notes
}

func bearer(headers ...string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + token}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return h
}

func names(t *testing.T, c *mcpclient.Client) []string {
	t.Helper()
	res, err := c.ListTools(testenv.Context(t), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tool := range res.Tools {
		out = append(out, tool.Name)
	}
	return out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func callTool(ctx context.Context, c *mcpclient.Client, name string, args map[string]any, meta *mcp.Meta) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	req.Params.Meta = meta
	return c.CallTool(ctx, req)
}

// TestListAndCallOverHTTP: a session lists the agent's tools in the mcp
// format, discovery tool included and on-demand tools not, and a call's
// result comes back with its content and the call ID in _meta.
func TestListAndCallOverHTTP(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	got := names(t, c)
	for _, want := range []string{"llm_tools-list", "demo-echo", "demo-word_count", "demo-sleep"} {
		if !slices.Contains(got, want) {
			t.Errorf("tools/list lacks %s: %v", want, got)
		}
	}
	if slices.Contains(got, "weather-forecast") {
		t.Errorf("an on-demand tool is listed before discovery: %v", got)
	}
	// On the wire: one page, the mcp format's output schema and
	// annotations.
	var listed struct {
		Tools []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
			Annotations  map[string]any  `json:"annotations"`
		} `json:"tools"`
		NextCursor *string `json:"nextCursor"`
	}
	if e := rpc(t, url, c.GetSessionId(), "tools/list", map[string]any{}, &listed); e != nil || listed.NextCursor != nil {
		t.Fatalf("tools/list: %+v %+v", listed, e)
	}
	for _, tool := range listed.Tools {
		if tool.Name == "demo-word_count" && (len(tool.OutputSchema) == 0 || tool.Annotations["readOnlyHint"] != true || !strings.Contains(string(tool.InputSchema), `"text"`)) {
			t.Errorf("demo-word_count as listed: %s %s %v", tool.InputSchema, tool.OutputSchema, tool.Annotations)
		}
	}
	res, err := callTool(testenv.Context(t), c, "demo-word_count", map[string]any{"text": "hello tool bus"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(res), `"words":3`) {
		t.Fatalf("result: %+v", res)
	}
	if res.Meta == nil {
		t.Fatalf("no _meta: %+v", res)
	}
	callID, _ := res.Meta.AdditionalFields[mcpfront.MetaCallID].(string)
	if callID == "" || res.Meta.AdditionalFields[mcpfront.MetaState] != "completed" {
		t.Fatalf("no call ID in _meta: %+v", res.Meta)
	}
	// A tool without a timeout of its own has the coordinator's default.
	info, err := testenv.Client(t, s.url, client.Options{Agent: "analyst"}).Get(testenv.Context(t), callID)
	if err != nil || info.Deadline.Sub(info.QueuedAt) != 10*time.Minute || info.Turn != sessionTurn(t, c) || info.Agent != "analyst" {
		t.Fatalf("the call: %+v %v", info, err)
	}
}

// TestLargeResultHasItsLength: a result larger than net/http's
// buffer is one body with its length, not chunked, so the client reads it
// to its end as it decodes it and keeps the connection for the next call.
func TestLargeResultHasItsLength(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	var dials atomic.Int32
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	dial := base.DialContext
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	seen := &responses{next: base}
	c, _ := connectWith(t, url, []transport.StreamableHTTPCOption{
		transport.WithHTTPHeaders(bearer()),
		transport.WithHTTPBasicClient(&http.Client{Transport: seen}),
	}, legacySessions())
	large := strings.Repeat("0123456789abcdef", 1024)
	for range 3 {
		res, err := callTool(testenv.Context(t), c, "demo-echo", map[string]any{"text": large}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || text(res) != large {
			t.Fatalf("result: %d bytes of text, isError %v", len(text(res)), res.IsError)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the session dialled %d connections for its initialize and 3 calls, want 1", n)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.bodies) == 0 {
		t.Fatal("no JSON response seen")
	}
	for _, r := range seen.bodies {
		if r.chunked || r.length < int64(len(large)) {
			t.Errorf("a JSON response was chunked (%v) or had no length (%d)", r.chunked, r.length)
		}
	}
}

// responses records how the JSON responses of tools/call came.
type responses struct {
	next   http.RoundTripper
	mu     sync.Mutex
	bodies []struct {
		length  int64
		chunked bool
	}
}

func (r *responses) RoundTrip(req *http.Request) (*http.Response, error) {
	var call bool
	if req.Body != nil && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(body)
			call = bytes.Contains(data, []byte(`"tools/call"`))
		}
	}
	resp, err := r.next.RoundTrip(req)
	if err == nil && call && resp.Header.Get("Content-Type") == "application/json" {
		r.mu.Lock()
		r.bodies = append(r.bodies, struct {
			length  int64
			chunked bool
		}{resp.ContentLength, slices.Contains(resp.TransferEncoding, "chunked")})
		r.mu.Unlock()
	}
	return resp, err
}

// TestErrorsMapped: an unknown tool is a JSON-RPC error; arguments that do
// not match the schema are a tool result with isError and the Toolbus code.
func TestErrorsMapped(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	ctx := testenv.Context(t)
	if _, err := callTool(ctx, c, "nosuch-tool", map[string]any{}, nil); err == nil {
		t.Error("a call of an unknown tool was not a JSON-RPC error")
	}
	if e := rpc(t, url, c.GetSessionId(), "tools/call", map[string]any{"name": "nosuch-tool", "arguments": map[string]any{}}, nil); e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("an unknown tool: %+v, want the JSON-RPC error %d", e, mcp.INVALID_PARAMS)
	}
	res, err := callTool(ctx, c, "demo-word_count", map[string]any{"text": 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta == nil {
		t.Fatalf("invalid arguments, no _meta: %+v", res)
	}
	details, _ := res.Meta.AdditionalFields[mcpfront.MetaDetails].([]any)
	if !res.IsError || res.Meta.AdditionalFields[mcpfront.MetaCode] != "invalid_arguments" || len(details) != 1 || !strings.Contains(text(res), fmt.Sprint(details[0])) {
		t.Fatalf("invalid arguments: %+v", res)
	}
	// A call held for an approval says so, naming the approval.
	res, err = callTool(ctx, c, "demo-sha256", map[string]any{"text": "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.Meta.AdditionalFields[mcpfront.MetaApprovalID].(string)
	if id == "" || !strings.Contains(text(res), id) || !strings.Contains(text(res), "awaits approval") || !strings.Contains(text(res), "(queue mode)") || !res.IsError {
		t.Fatalf("approval: %q %+v", text(res), res.Meta)
	}
	if res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateAwaitingApproval) || res.Meta.AdditionalFields[mcpfront.MetaCallID] == nil {
		t.Fatalf("approval: %+v", res.Meta)
	}
}

// TestAuthentication: without a token, or with a wrong one, nothing is
// served, and the answer names the scheme; the scheme's name is
// case-insensitive (RFC 7235). The health check needs no token.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	for _, tc := range []struct {
		name, authorization string
		want                int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer wrong", http.StatusUnauthorized},
		{"another scheme", "Basic " + token, http.StatusUnauthorized},
		{"the token", "Bearer " + token, http.StatusOK},
		{"the token, scheme in lower case", "bearer " + token, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.authorization != "" {
			req.Header.Set("Authorization", tc.authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
		if challenge := resp.Header.Get("WWW-Authenticate"); tc.want == http.StatusUnauthorized && !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, challenge)
		}
	}
	// A browser's preflight carries no token: it is answered, for a
	// loopback origin as for an allowed one.
	preflight, _ := http.NewRequest(http.MethodOptions, url+"/mcp", nil)
	preflight.Header.Set("Origin", "http://localhost:3000")
	preflight.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(preflight)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("a preflight without a token: %d %v", resp.StatusCode, resp.Header)
	}
	resp, err = http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
}

// TestProgressAndCancel: a call with a progress token gets the call's
// progress events as notifications; cancelling the request cancels the
// Toolbus call.
func TestProgressAndCancel(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, notes := connect(t, url, bearer(), legacySessions())
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := callTool(ctx, c, "demo-sleep", map[string]any{"seconds": 30}, &mcp.Meta{ProgressToken: "p1"})
		done <- err
	}()
	notes.waitFor(t, string(mcp.MethodNotificationProgress))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// The Toolbus call, filed under the session's turn, ends cancelled.
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	turn := sessionTurn(t, c)
	testenv.Eventually(t, "the call to be cancelled", func() bool {
		info, err := bus.Turn(testenv.Context(t), turn)
		return err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateCancelled
	})
}

// TestCancelWithoutProgress: a call made without a progress token, which
// the front follows by its result alone, is cancelled too when its
// request is.
func TestCancelWithoutProgress(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	turn := sessionTurn(t, c)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := callTool(ctx, c, "demo-sleep", map[string]any{"seconds": 30}, nil)
		done <- err
	}()
	testenv.Eventually(t, "the call to run", func() bool {
		info, err := bus.Turn(testenv.Context(t), turn)
		return err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateRunning
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	testenv.Eventually(t, "the call to be cancelled", func() bool {
		info, err := bus.Turn(testenv.Context(t), turn)
		return err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateCancelled
	})
}

func sessionTurn(t *testing.T, c *mcpclient.Client) string {
	t.Helper()
	_, turn, ok := strings.Cut(c.GetSessionId(), ".")
	if !ok {
		t.Fatalf("session ID %q names no turn", c.GetSessionId())
	}
	return turn
}

// TestDiscoveryChangesTheList: a call of the discovery tool in the
// session's turn is followed by list_changed, and the next tools/list
// shows the tool found. A second front, reached with the same session ID,
// finds the same turn and the same tools.
func TestDiscoveryChangesTheList(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, notes := connect(t, url, bearer(), legacySessions())
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the forecast to be discoverable", func() bool {
		res, err := callTool(ctx, c, "llm_tools-list", map[string]any{"query": "weather forecast"}, nil)
		return err == nil && !res.IsError && strings.Contains(text(res), "weather-forecast")
	})
	notes.waitFor(t, string(mcp.MethodNotificationToolsListChanged))
	if got := names(t, c); !slices.Contains(got, "weather-forecast") {
		t.Fatalf("after discovery: %v", got)
	}
	res, err := callTool(ctx, c, "weather-forecast", map[string]any{"city": "Oslo"}, nil)
	if err != nil || res.IsError || !strings.Contains(text(res), "sunny") {
		t.Fatalf("discovered tool: %+v %v", res, err)
	}
	// On the wire: list_changed is on the call's own stream, before the
	// result.
	status, header, raw := post(t, url, c.GetSessionId(), `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"llm_tools-list","arguments":{"query":"weather forecast"}}}`)
	changed, result := strings.Index(raw, `"method":"notifications/tools/list_changed"`), strings.Index(raw, `"result"`)
	if status != http.StatusOK || header.Get("Content-Type") != "text/event-stream" || changed < 0 || result < changed {
		t.Fatalf("the discovery call's stream (%d, %s):\n%s", status, header.Get("Content-Type"), raw)
	}

	// Another front, as another replica behind a load balancer.
	_, other := s.front(t)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
	req, _ := http.NewRequest(http.MethodPost, other+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", c.GetSessionId())
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(listed), `"weather-forecast"`) {
		t.Fatalf("the session on another front lost its turn: %d %s", resp.StatusCode, listed)
	}
}

// TestNamedTurn: a session names its turn with the Toolbus-Turn header,
// and a stateless request names it in _meta.
func TestNamedTurn(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(mcpfront.TurnHeader, "t-named"), legacySessions())
	if got := sessionTurn(t, c); got != "t-named" {
		t.Fatalf("turn %q", got)
	}
	ctx := testenv.Context(t)
	if _, err := callTool(ctx, c, "demo-echo", map[string]any{"text": "a"}, nil); err != nil {
		t.Fatal(err)
	}
	modern, _ := connect(t, url, bearer())
	if _, err := callTool(ctx, modern, "demo-echo", map[string]any{"text": "b"}, &mcp.Meta{AdditionalFields: map[string]any{mcpfront.TurnMetaKey: "t-named"}}); err != nil {
		t.Fatal(err)
	}
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	info, err := bus.Turn(ctx, "t-named")
	if err != nil || len(info.Calls) != 2 {
		t.Fatalf("turn t-named: %+v %v", info, err)
	}
	// A stateless request cannot be asked through elicitation, even by a
	// client that could answer: it is told that its call awaits approval.
	asking, _ := connect(t, url, bearer(), mcpclient.WithElicitationHandler(elicitor{approve: true}))
	res, err := callTool(ctx, asking, "ops-restart", map[string]any{"city": "web"}, nil)
	if err != nil || !res.IsError || res.Meta == nil || res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateAwaitingApproval) {
		t.Fatalf("a prompt approval of a stateless request: %+v %v", res, err)
	}
}

// TestStdio: a stdio session is the configured agent's, in the configured
// turn: it lists, calls with progress, and discovery changes its list.
func TestStdio(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client:    testenv.Client(t, s.url, client.Options{}),
		Agent:     "analyst",
		StdioTurn: "t-stdio",
		Logger:    testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	ctx, stop := context.WithCancel(testenv.Context(t))
	served := serveStdio(ctx, f, serverIn, serverOut)
	t.Cleanup(func() {
		stop()
		clientOut.Close()
		<-served
		serverOut.Close()
	})
	c := mcpclient.NewClient(transport.NewIO(clientIn, clientOut, nil))
	notes := &notifications{seen: make(chan struct{}, 1)}
	c.OnNotification(notes.add)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, c); !slices.Contains(got, "demo-sleep") || slices.Contains(got, "weather-forecast") {
		t.Fatalf("tools/list: %v", got)
	}
	res, err := callTool(ctx, c, "demo-sleep", map[string]any{"seconds": 0.3}, &mcp.Meta{ProgressToken: 7})
	if err != nil || res.IsError {
		t.Fatalf("demo-sleep: %+v %v", res, err)
	}
	notes.waitFor(t, string(mcp.MethodNotificationProgress))
	testenv.Eventually(t, "the forecast to be discoverable", func() bool {
		res, err := callTool(ctx, c, "llm_tools-list", map[string]any{"query": "weather forecast"}, nil)
		return err == nil && !res.IsError && strings.Contains(text(res), "weather-forecast")
	})
	notes.waitFor(t, string(mcp.MethodNotificationToolsListChanged))
	if got := names(t, c); !slices.Contains(got, "weather-forecast") {
		t.Fatalf("after discovery: %v", got)
	}
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	info, err := bus.Turn(ctx, "t-stdio")
	if err != nil || len(info.Calls) == 0 {
		t.Fatalf("turn t-stdio: %+v %v", info, err)
	}

	// The client cancels a call (notifications/cancelled): the Toolbus
	// call ends cancelled, and the session goes on.
	callCtx, cancelCall := context.WithCancel(ctx)
	defer cancelCall()
	done := make(chan error, 1)
	go func() {
		_, err := callTool(callCtx, c, "demo-sleep", map[string]any{"seconds": 30}, nil)
		done <- err
	}()
	running := func(state messages.CallState) func() bool {
		return func() bool {
			info, err := bus.Turn(ctx, "t-stdio")
			return err == nil && slices.ContainsFunc(info.Calls, func(c messages.CallInfo) bool {
				return c.Tool == "demo-sleep" && c.State == state && c.Arguments != nil && strings.Contains(string(c.Arguments), "30")
			})
		}
	}
	testenv.Eventually(t, "the long sleep to run", running(messages.StateRunning))
	cancelCall()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	testenv.Eventually(t, "the long sleep to be cancelled", running(messages.StateCancelled))
	if got := names(t, c); !slices.Contains(got, "demo-sleep") {
		t.Fatalf("tools/list after the cancel: %v", got)
	}
}

// rpc sends one JSON-RPC request in the session, as any front may receive
// it, and decodes its result.
func rpc(t *testing.T, url, sessionID, method string, params any, out any) *rpcError {
	t.Helper()
	return rpcAs(t, url, token, sessionID, method, params, out)
}

type rpcError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

// rpcAs is rpc with the bearer token given.
func rpcAs(t *testing.T, url, bearerToken, sessionID, method string, params any, out any) *rpcError {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+bearerToken)
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reply struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	// A response streamed as server-sent events ends with the reply.
	if i := bytes.LastIndex(raw, []byte("data: ")); i >= 0 {
		raw = raw[i+len("data: "):]
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		t.Fatalf("%s: status %d: %v: %s", method, resp.StatusCode, err, raw)
	}
	if reply.Error == nil && out != nil {
		if err := json.Unmarshal(reply.Result, out); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
	}
	return reply.Error
}

// TestTasksFromTheLedger: a task-augmented call answers at once with the
// Toolbus call's ID as the task's; the task is polled to its result, listed
// and cancelled through a front started after the first one stopped.
func TestTasksFromTheLedger(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f1, first := s.frontServer(t)
	url := first.URL
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()
	listed, err := c.ListTools(testenv.Context(t), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range listed.Tools {
		if tool.Execution == nil || tool.Execution.TaskSupport != mcp.TaskSupportOptional {
			t.Fatalf("%s does not offer tasks: %+v", tool.Name, tool.Execution)
		}
	}
	var created mcp.CreateTaskResult
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "demo-sleep", "arguments": map[string]any{"seconds": 0.5}, "task": map[string]any{}}, &created); e != nil {
		t.Fatalf("task-augmented call: %+v", e)
	}
	var long mcp.CreateTaskResult
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "demo-sleep", "arguments": map[string]any{"seconds": 60}, "task": map[string]any{}}, &long); e != nil {
		t.Fatalf("task-augmented call: %+v", e)
	}
	id := created.Task.TaskId
	if id == "" || created.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("created: %+v", created.Task)
	}
	// The first front stops; its calls run on.
	_ = c.Close()
	f1.Shutdown(testenv.Context(t))
	first.Close()

	_, other := s.front(t)
	testenv.Eventually(t, "the task to complete", func() bool {
		var got mcp.GetTaskResult
		if e := rpc(t, other, session, "tasks/get", map[string]any{"taskId": id}, &got); e != nil {
			t.Fatalf("tasks/get: %+v", e)
		}
		return got.Status == mcp.TaskStatusCompleted
	})
	var result struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool           `json:"isError"`
		Meta    map[string]any `json:"_meta"`
	}
	if e := rpc(t, other, session, "tasks/result", map[string]any{"taskId": id}, &result); e != nil {
		t.Fatalf("tasks/result: %+v", e)
	}
	if result.IsError || len(result.Content) == 0 || result.Meta[mcpfront.MetaCallID] != id {
		t.Fatalf("tasks/result: %+v", result)
	}
	var list mcp.ListTasksResult
	if e := rpc(t, other, session, "tasks/list", map[string]any{}, &list); e != nil {
		t.Fatalf("tasks/list: %+v", e)
	}
	if len(list.Tasks) != 2 {
		t.Fatalf("tasks/list: %+v", list.Tasks)
	}
	var cancelled mcp.CancelTaskResult
	if e := rpc(t, other, session, "tasks/cancel", map[string]any{"taskId": long.Task.TaskId}, &cancelled); e != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v %+v", cancelled, e)
	}
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	res, err := bus.Wait(testenv.Context(t), long.Task.TaskId)
	if err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("the cancelled task's call: %+v %v", res, err)
	}
	// An ID that names no call is no task.
	if e := rpc(t, other, session, "tasks/get", map[string]any{"taskId": "nosuchcall"}, nil); e == nil {
		t.Error("tasks/get of no such task answered")
	}
}

// elicitor answers every elicitation with approve, or with action when
// it is set.
type elicitor struct {
	approve bool
	action  mcp.ElicitationResponseAction
}

func (e elicitor) Elicit(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	if e.action != "" {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: e.action}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"approve": e.approve}}}, nil
}

// TestPromptApprovalByElicitation: a call held for the user's approval is
// asked of the user through elicitation; approved, it runs; refused, its
// result says denied.
func TestPromptApprovalByElicitation(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	ctx := testenv.Context(t)
	yes, _ := connect(t, url, bearer(), legacySessions(), mcpclient.WithElicitationHandler(elicitor{approve: true}))
	res, err := callTool(ctx, yes, "ops-restart", map[string]any{"city": "web"}, nil)
	if err != nil || res.IsError || !strings.Contains(text(res), "restart is sunny") {
		t.Fatalf("approved: %+v %v", res, err)
	}
	no, _ := connect(t, url, bearer(), legacySessions(), mcpclient.WithElicitationHandler(elicitor{approve: false}))
	res, err = callTool(ctx, no, "ops-restart", map[string]any{"city": "web"}, nil)
	if err != nil || !res.IsError || res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateDenied) {
		t.Fatalf("refused: %+v %v", res, err)
	}
	// Declined, the call is denied too.
	declined, _ := connect(t, url, bearer(), legacySessions(), mcpclient.WithElicitationHandler(elicitor{action: mcp.ElicitationResponseActionDecline}))
	res, err = callTool(ctx, declined, "ops-restart", map[string]any{"city": "web"}, nil)
	if err != nil || !res.IsError || res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateDenied) || res.Meta.AdditionalFields[mcpfront.MetaCode] != messages.ResultDenied {
		t.Fatalf("declined: %+v %v", res, err)
	}
	// A client without elicitation is told the call awaits approval, and
	// so is one whose user cancelled the question: the approval stays
	// pending.
	plain, _ := connect(t, url, bearer(), legacySessions())
	dismissed, _ := connect(t, url, bearer(), legacySessions(), mcpclient.WithElicitationHandler(elicitor{action: mcp.ElicitationResponseActionCancel}))
	operator := testenv.Client(t, s.url, client.Options{})
	for name, c := range map[string]*mcpclient.Client{"without elicitation": plain, "cancelled": dismissed} {
		res, err = callTool(ctx, c, "ops-restart", map[string]any{"city": "web"}, nil)
		if err != nil || !res.IsError || res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateAwaitingApproval) {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		id, _ := res.Meta.AdditionalFields[mcpfront.MetaApprovalID].(string)
		if !strings.Contains(text(res), id) || !strings.Contains(text(res), "(prompt mode)") || !strings.Contains(text(res), "Restarts interrupt users.") {
			t.Errorf("%s: %q", name, text(res))
		}
		pending, err := operator.ListApprovals(ctx, messages.ListApprovalsRequest{Agent: "analyst", Turn: sessionTurn(t, c)})
		if err != nil || len(pending.Approvals) != 1 || pending.Approvals[0].ApprovalID != id {
			t.Errorf("%s: pending approvals %+v %v", name, pending, err)
		}
	}
}

// TestAnotherAgentsSession: a session ID presented with another agent's
// token gets nothing of the session's turn: its tools/list and its calls
// are refused.
func TestAnotherAgentsSession(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client: testenv.Client(t, s.url, client.Options{}),
		Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}, "token-of-ops": {Agent: "ops"}},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	c, _ := connect(t, hs.URL, bearer(), legacySessions())
	if _, err := callTool(testenv.Context(t), c, "demo-echo", map[string]any{"text": "mine"}, nil); err != nil {
		t.Fatal(err)
	}
	intruder, _ := connect(t, hs.URL, map[string]string{"Authorization": "Bearer token-of-ops"}, legacySessions())
	if _, err := intruder.ListTools(testenv.Context(t), mcp.ListToolsRequest{}); err != nil {
		t.Fatalf("ops in its own session: %v", err)
	}
	session := c.GetSessionId()
	if e := rpcAs(t, hs.URL, "token-of-ops", session, "tools/list", map[string]any{}, nil); e == nil || e.Code != mcp.INVALID_REQUEST || !strings.HasPrefix(e.Message, "tools.list: conflict: ") {
		t.Fatalf("another agent's session listed: %+v", e)
	}
	var res mcp.CallToolResult
	if e := rpcAs(t, hs.URL, "token-of-ops", session, "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "theirs"}}, &res); e != nil {
		t.Fatalf("tools/call: %+v", e)
	}
	if !res.IsError || res.Meta == nil || res.Meta.AdditionalFields[mcpfront.MetaCode] != "conflict" {
		t.Fatalf("another agent's session called: %+v", res)
	}

	// Nor can it cancel a call of the session: a notifications/cancelled
	// for the session's request, with another agent's token, is ignored.
	var slept mcp.CallToolResult
	called := make(chan *rpcError, 1)
	go func() {
		called <- rpcAs(t, hs.URL, token, session, "tools/call", map[string]any{"name": "demo-sleep", "arguments": map[string]any{"seconds": 1}}, &slept)
	}()
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	testenv.Eventually(t, "the sleep to run", func() bool {
		info, err := bus.Turn(testenv.Context(t), sessionTurn(t, c))
		return err == nil && slices.ContainsFunc(info.Calls, func(c messages.CallInfo) bool {
			return c.Tool == "demo-sleep" && c.State == messages.StateRunning
		})
	})
	notify(t, hs.URL, "token-of-ops", session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"not mine"}}`)
	if e := <-called; e != nil || slept.IsError || !strings.HasPrefix(text(&slept), "slept") {
		t.Fatalf("the session's call, after another agent cancelled it: %+v %+v", slept, e)
	}
}

// notify posts a JSON-RPC notification in a session.
func notify(t *testing.T, url, bearerToken, sessionID, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+bearerToken)
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notification: status %d", resp.StatusCode)
	}
}

// TestGuards: a request from a foreign origin, one naming a foreign host on
// a loopback listener, and a body over the limit are refused.
func TestGuards(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client:          testenv.Client(t, s.url, client.Options{}),
		Agent:           "analyst",
		AllowedOrigins:  []string{"https://app.example"},
		MaxRequestBytes: 1 << 10,
		Logger:          testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	post := func(body io.Reader, headers map[string]string, host string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	if got := post(strings.NewReader(initialize), nil, ""); got != http.StatusOK {
		t.Fatalf("a loopback client without a token: %d", got)
	}
	if got := post(strings.NewReader(initialize), map[string]string{"Origin": "https://app.example"}, ""); got != http.StatusOK {
		t.Errorf("an allowed origin: %d", got)
	}
	if got := post(strings.NewReader(initialize), map[string]string{"Origin": "https://evil.example"}, ""); got != http.StatusForbidden {
		t.Errorf("a foreign origin: %d", got)
	}
	if got := post(strings.NewReader(initialize), nil, "evil.example"); got != http.StatusForbidden {
		t.Errorf("a foreign host on loopback: %d", got)
	}
	// A page of an allowed origin may read the answers (CORS), and its
	// browser's preflight is answered.
	preflight := func(origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, hs.URL+"/mcp", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-session-id")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := preflight("https://app.example"); resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") || !strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("the preflight of an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("the preflight of a foreign origin: %d %v", resp.StatusCode, resp.Header)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Origin", "https://app.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
		t.Errorf("initialize from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	// The requests the front answers itself, not mcp-go, are refused too:
	// a session's tools/call (its ID made up: it carries a turn, nothing
	// else) and a task request.
	forged := map[string]string{"Mcp-Session-Id": "AAAAAAAAAAAAAAAAAAAAAA.t-rebound", "Mcp-Protocol-Version": mcp.LATEST_LEGACY_PROTOCOL_VERSION}
	for method, body := range map[string]string{
		"tools/call": `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"rebound"}}}`,
		"tasks/list": `{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}`,
		"tasks/get":  `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"x"}}`,
	} {
		if got := post(strings.NewReader(body), forged, "evil.example:8080"); got != http.StatusForbidden {
			t.Errorf("%s with a foreign host on loopback: %d", method, got)
		}
	}
	if got := post(strings.NewReader(initialize), nil, "localhost:8080"); got != http.StatusOK {
		t.Errorf("the Host localhost: %d", got)
	}
	// Without tokens, a client that is not on this machine is refused,
	// whichever address it reached (here as a proxy on loopback would
	// pass it on, and as a listener on all interfaces would see it).
	for _, local := range []string{"127.0.0.1:8080", "192.0.2.7:8080"} {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initialize))
		req.Host = "localhost:8080"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.RemoteAddr = "192.0.2.1:50000"
		addr, _ := net.ResolveTCPAddr("tcp", local)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, addr))
		w := httptest.NewRecorder()
		f.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusForbidden {
			t.Errorf("a remote client reaching %s without a token: %d", local, w.Code)
		}
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"pad":"` + strings.Repeat("x", 2<<10) + `"}}}`
	if got := post(strings.NewReader(big), nil, ""); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d", got)
	}
	// Without a Content-Length (chunked), the body is cut at the limit as
	// it is read.
	if got := post(io.MultiReader(strings.NewReader(big)), nil, ""); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the limit: %d", got)
	}
}

func TestParseTokens(t *testing.T) {
	got, err := mcpfront.ParseTokens("a1=support, b2=analyst,")
	if err != nil || len(got) != 2 || got["a1"].Agent != "support" || got["b2"].Agent != "analyst" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"a1", "=support", "a1="} {
		if _, err := mcpfront.ParseTokens(bad); !errors.Is(err, mcpfront.ErrConfig) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "tokens:\n  t0k3n: {agent: support}\n")
	if got, err := mcpfront.LoadTokens(path); err != nil || got["t0k3n"].Agent != "support" {
		t.Fatalf("%v %v", got, err)
	}
}

// legacySessions makes the client open a session with the initialize
// handshake, on which the front's session-to-turn mapping rests; clients
// of the stateless protocol name their turn on each request instead
// (docs/mcp.md).
//
//lint:ignore SA1019 sessions are what these tests exercise
var legacySessions = mcpclient.WithLegacyProtocolOnly

// TestQueueApprovalWithProgress: a call held for an operator's approval,
// made with a progress token, is told so in a progress notification that
// names the approval and who decides it, stays open while the operator
// decides, and then gets the call's own progress and its result.
func TestQueueApprovalWithProgress(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, notes := connect(t, url, bearer(), legacySessions())
	ctx := testenv.Context(t)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := callTool(ctx, c, "batch-reindex", map[string]any{}, &mcp.Meta{ProgressToken: "q1"})
		done <- answer{res, err}
	}()
	notes.waitFor(t, string(mcp.MethodNotificationProgress))
	operator := testenv.Client(t, s.url, client.Options{})
	pending, err := operator.ListApprovals(ctx, messages.ListApprovalsRequest{Agent: "analyst", Turn: sessionTurn(t, c)})
	if err != nil || len(pending.Approvals) != 1 {
		t.Fatalf("pending approvals: %+v %v", pending, err)
	}
	approval := pending.Approvals[0]
	first := notes.all(string(mcp.MethodNotificationProgress))[0]
	waiting, _ := first.Params.AdditionalFields["message"].(string)
	for _, want := range []string{approval.ApprovalID, "queue mode", "Reason: Reindexing loads the database.", "An operator decides it"} {
		if !strings.Contains(waiting, want) {
			t.Errorf("the waiting notification %q does not say %q", waiting, want)
		}
	}
	select {
	case a := <-done:
		t.Fatalf("answered before the operator decided: %+v %v", a.res, a.err)
	default:
	}
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: approval.ApprovalID, Decision: messages.DecisionApprove, Reason: "off-peak", By: "operator"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError || text(a.res) != "reindexed" || a.res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateCompleted) {
		t.Fatalf("after approval: %+v %v", a.res, a.err)
	}
	// The notifications come on the session's stream, not the answer's:
	// one may come after the answer on a busy machine.
	var progress []mcp.JSONRPCNotification
	testenv.Eventually(t, "progress of the call after the approval", func() bool {
		progress = notes.all(string(mcp.MethodNotificationProgress))
		return len(progress) >= 2
	})
	last := -1.0
	for i, note := range progress {
		value, _ := note.Params.AdditionalFields["progress"].(float64)
		if value <= last && i > 0 {
			t.Errorf("progress %v after %v", value, last)
		}
		last = value
		if message, _ := note.Params.AdditionalFields["message"].(string); i > 0 && !strings.HasPrefix(message, "reindexed") {
			t.Errorf("notification %d after the approval: %q", i, message)
		}
	}

	// Denied, the request gets the call's denied result.
	go func() {
		res, err := callTool(ctx, c, "batch-reindex", map[string]any{}, &mcp.Meta{ProgressToken: "q2"})
		done <- answer{res, err}
	}()
	var second *messages.ListApprovalsReply
	testenv.Eventually(t, "the second approval", func() bool {
		var err error
		second, err = operator.ListApprovals(ctx, messages.ListApprovalsRequest{Agent: "analyst", Turn: sessionTurn(t, c)})
		return err == nil && len(second.Approvals) == 1
	})
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: second.Approvals[0].ApprovalID, Decision: messages.DecisionDeny, Reason: "not today", By: "operator"}); err != nil {
		t.Fatal(err)
	}
	a = <-done
	if a.err != nil || !a.res.IsError || a.res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateDenied) {
		t.Fatalf("after a denial: %+v %v", a.res, a.err)
	}
}

// stdioSession is a raw stdio session with a front: JSON-RPC messages, one
// a line.
type stdioSession struct {
	t       *testing.T
	in      *io.PipeWriter
	replies chan map[string]json.RawMessage
	next    int
	// close ends the session, once.
	close func()
}

// stdioSlot lets the tests serve their stdio sessions one at a time, as a
// process must (mcpfront.ErrStdioInUse).
var stdioSlot sync.Mutex

// serveStdio serves a stdio session once no other test serves one; the
// channel gets ServeStdio's error.
func serveStdio(ctx context.Context, f *mcpfront.Front, in io.Reader, out io.Writer) chan error {
	stdioSlot.Lock()
	served := make(chan error, 1)
	go func() {
		err := f.ServeStdio(ctx, in, out)
		stdioSlot.Unlock()
		served <- err
	}()
	return served
}

func startStdio(t *testing.T, f *mcpfront.Front) *stdioSession {
	t.Helper()
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	ctx, stop := context.WithCancel(testenv.Context(t))
	served := serveStdio(ctx, f, serverIn, serverOut)
	s := &stdioSession{t: t, in: clientOut, replies: make(chan map[string]json.RawMessage, 16)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		dec := json.NewDecoder(clientIn)
		for {
			var msg map[string]json.RawMessage
			if dec.Decode(&msg) != nil {
				return
			}
			if _, isReply := msg["id"]; isReply && msg["method"] == nil {
				s.replies <- msg
			}
		}
	}()
	s.close = sync.OnceFunc(func() {
		stop()
		clientOut.Close()
		<-served
		serverOut.Close()
		<-read
	})
	t.Cleanup(s.close)
	return s
}

// call sends a request and returns its result, or fails the test with its error.
func (s *stdioSession) call(method string, params any, out any) {
	s.t.Helper()
	reply := s.request(method, params)
	if reply["error"] != nil {
		s.t.Fatalf("%s: %s %s", method, reply["id"], reply["error"])
	}
	if out != nil {
		if err := json.Unmarshal(reply["result"], out); err != nil {
			s.t.Fatalf("%s: %v", method, err)
		}
	}
}

// request sends a request and returns its reply, result or error.
func (s *stdioSession) request(method string, params any) map[string]json.RawMessage {
	s.t.Helper()
	s.next++
	line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.next, "method": method, "params": params})
	if _, err := s.in.Write(append(line, '\n')); err != nil {
		s.t.Fatal(err)
	}
	select {
	case reply := <-s.replies:
		if string(reply["id"]) != fmt.Sprint(s.next) {
			s.t.Fatalf("%s: the reply to %s", method, reply["id"])
		}
		return reply
	case <-time.After(testenv.Patience):
		s.t.Fatalf("%s: no reply", method)
	}
	return nil
}

// TestStdioTasks: over stdio too, tools are offered as tasks, a
// task-augmented call answers at once with the call's ID as the task's,
// and the task is read from the ledger to its result; a second stdio
// session, as after the desktop app restarted the command, reads it too.
func TestStdioTasks(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	newFront := func() *mcpfront.Front {
		f, err := mcpfront.New(mcpfront.Config{
			Client:    testenv.Client(t, s.url, client.Options{}),
			Agent:     "analyst",
			StdioTurn: "t-stdio-tasks",
			Logger:    testenv.Logger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first := startStdio(t, newFront())
	var init struct {
		Capabilities struct {
			Tasks       json.RawMessage `json:"tasks"`
			Elicitation json.RawMessage `json:"elicitation"`
		} `json:"capabilities"`
	}
	first.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}, &init)
	if len(init.Capabilities.Tasks) == 0 {
		t.Fatal("no tasks capability over stdio")
	}
	// Elicitation is a capability of clients: a server that lists it
	// among its own says something the protocol does not define.
	if init.Capabilities.Elicitation != nil {
		t.Fatalf("the server lists elicitation among its capabilities: %s", init.Capabilities.Elicitation)
	}
	var listed mcp.ListToolsResult
	first.call("tools/list", map[string]any{}, &listed)
	if len(listed.Tools) == 0 || listed.Tools[0].Execution == nil || listed.Tools[0].Execution.TaskSupport != mcp.TaskSupportOptional {
		t.Fatalf("tools over stdio are not offered as tasks: %+v", listed.Tools)
	}
	var created mcp.CreateTaskResult
	first.call("tools/call", map[string]any{"name": "demo-sleep", "arguments": map[string]any{"seconds": 0.3}, "task": map[string]any{}}, &created)
	if created.Task.TaskId == "" || created.Task.Status != mcp.TaskStatusWorking {
		t.Fatalf("created: %+v", created.Task)
	}
	var result struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Meta map[string]any `json:"_meta"`
	}
	first.call("tasks/result", map[string]any{"taskId": created.Task.TaskId}, &result)
	if len(result.Content) == 0 || !strings.HasPrefix(result.Content[0].Text, "slept") || result.Meta[mcpfront.MetaCallID] != created.Task.TaskId {
		t.Fatalf("tasks/result: %+v", result)
	}

	first.close()
	second := startStdio(t, newFront())
	second.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}, nil)
	var got mcp.GetTaskResult
	second.call("tasks/get", map[string]any{"taskId": created.Task.TaskId}, &got)
	if got.Status != mcp.TaskStatusCompleted {
		t.Fatalf("tasks/get in a new session: %+v", got)
	}
	var list mcp.ListTasksResult
	second.call("tasks/list", map[string]any{}, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskId != created.Task.TaskId {
		t.Fatalf("tasks/list: %+v", list.Tasks)
	}

	// A tasks/result that waits does not hold up the session: a ping made
	// after it is answered first.
	var long mcp.CreateTaskResult
	second.call("tools/call", map[string]any{"name": "demo-sleep", "arguments": map[string]any{"seconds": 60}, "task": map[string]any{}}, &long)
	if _, err := io.WriteString(second.in, `{"jsonrpc":"2.0","id":"late","method":"tasks/result","params":{"taskId":"`+long.Task.TaskId+`"}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	second.call("ping", map[string]any{}, nil)
	if _, err := testenv.Client(t, s.url, client.Options{Agent: "analyst"}).Cancel(testenv.Context(t), long.Task.TaskId, "the test is over"); err != nil {
		t.Fatal(err)
	}
	select {
	case reply := <-second.replies:
		if string(reply["id"]) != `"late"` || !strings.Contains(string(reply["result"]), `"isError":true`) || !strings.Contains(string(reply["result"]), `"toolbus/state":"cancelled"`) {
			t.Fatalf("the waiting tasks/result: %s", reply)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("the waiting tasks/result was not answered")
	}
}

// TestContentPassesThrough: every kind of content block, the structured
// content and the annotations reach the client as MCP has them (a json
// block as a text block holding the JSON), over the path the front serves
// itself (a session's tools/call over HTTP) and over mcp-go's (stdio); the
// tool's own error and a call past its deadline are results with isError,
// the call's state and the Toolbus code in _meta.
func TestContentPassesThrough(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	b64 := base64.StdEncoding.EncodeToString
	want := []any{
		map[string]any{"type": "text", "text": "a chart", "annotations": map[string]any{"audience": []any{"user"}, "priority": 0.5}},
		map[string]any{"type": "image", "data": b64([]byte("PNG\x00\x01")), "mimeType": "image/png"},
		map[string]any{"type": "audio", "data": b64([]byte("RIFF\x00")), "mimeType": "audio/wav"},
		map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///notes.md", "mimeType": "text/markdown", "text": "# notes"}},
		map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///blob.bin", "mimeType": "application/octet-stream", "blob": b64([]byte{0, 1, 2})}},
		map[string]any{"type": "resource_link", "uri": "https://example.com/report", "name": "report", "description": "The full report", "mimeType": "text/html"},
		map[string]any{"type": "text", "text": `{"points":3}`},
	}
	type result struct {
		Content           []any          `json:"content"`
		StructuredContent any            `json:"structuredContent"`
		IsError           bool           `json:"isError"`
		Meta              map[string]any `json:"_meta"`
	}
	check := func(path string, call func(name string) result) {
		t.Helper()
		got := call("media-mixed")
		if got.IsError || !reflect.DeepEqual(got.Content, want) {
			gotJSON, _ := json.Marshal(got.Content)
			wantJSON, _ := json.Marshal(want)
			t.Errorf("%s: content\n got %s\nwant %s", path, gotJSON, wantJSON)
		}
		if !reflect.DeepEqual(got.StructuredContent, map[string]any{"points": 3.0}) || got.Meta[mcpfront.MetaState] != "completed" || got.Meta[mcpfront.MetaCallID] == nil {
			t.Errorf("%s: structured content %v, _meta %v", path, got.StructuredContent, got.Meta)
		}
		got = call("media-broken")
		if !got.IsError || got.Meta[mcpfront.MetaCode] != messages.ResultToolError || !strings.Contains(fmt.Sprint(got.Content), "the printer is on fire") {
			t.Errorf("%s: the tool's error: %+v", path, got)
		}
		got = call("media-slow")
		if !got.IsError || got.Meta[mcpfront.MetaCode] != messages.ResultTimedOut || got.Meta[mcpfront.MetaState] != string(messages.StateTimedOut) || len(got.Content) == 0 {
			t.Errorf("%s: past the deadline: %+v", path, got)
		}
	}
	check("a session over HTTP", func(name string) result {
		var res result
		if e := rpc(t, url, c.GetSessionId(), "tools/call", map[string]any{"name": name, "arguments": map[string]any{}}, &res); e != nil {
			t.Fatalf("%s: %+v", name, e)
		}
		return res
	})
	stdioFront, err := mcpfront.New(mcpfront.Config{Client: testenv.Client(t, s.url, client.Options{}), Agent: "analyst", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stdio := startStdio(t, stdioFront)
	stdio.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}, nil)
	check("stdio", func(name string) result {
		var res result
		stdio.call("tools/call", map[string]any{"name": name, "arguments": map[string]any{}}, &res)
		return res
	})
}

// twoAgentsFront is a front with the analyst's token and the ops agent's,
// "token-of-ops".
func (s stack) twoAgentsFront(t *testing.T) string {
	t.Helper()
	f, err := mcpfront.New(mcpfront.Config{
		Client: testenv.Client(t, s.url, client.Options{}),
		Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}, "token-of-ops": {Agent: "ops"}},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestTaskStates: a task's status follows its call (working with the
// latest progress message, input_required naming the approval, completed,
// failed with the error's message, cancelled); its result carries the
// related-task _meta; an ended task cannot be cancelled; another agent's
// task is no task; a refused submit is a JSON-RPC error with the Toolbus
// code in data. Every request names the session by an ID no front issued:
// the ID carries the turn, and that is all a front needs.
func TestTaskStates(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	url := s.twoAgentsFront(t)
	session := "AAAAAAAAAAAAAAAAAAAAAA.t-task-states"
	submit := func(name string, args map[string]any) mcp.Task {
		t.Helper()
		var created mcp.CreateTaskResult
		if e := rpc(t, url, session, "tools/call", map[string]any{"name": name, "arguments": args, "task": map[string]any{"ttl": 60000}}, &created); e != nil {
			t.Fatalf("%s as a task: %+v", name, e)
		}
		// The ttl asked for is not applied: the ledger keeps the call.
		if created.Task.TaskId == "" || created.Task.PollInterval == nil || *created.Task.PollInterval != 1000 || created.Task.TTL != nil {
			t.Fatalf("%s: created %+v", name, created.Task)
		}
		return created.Task
	}
	get := func(id string) mcp.Task {
		t.Helper()
		var got mcp.GetTaskResult
		if e := rpc(t, url, session, "tasks/get", map[string]any{"taskId": id}, &got); e != nil {
			t.Fatalf("tasks/get %s: %+v", id, e)
		}
		return got.Task
	}

	sleep := submit("demo-sleep", map[string]any{"seconds": 60})
	if sleep.Status != mcp.TaskStatusWorking {
		t.Errorf("a running call's task: %+v", sleep)
	}
	testenv.Eventually(t, "the sleep's progress as the task's status message", func() bool {
		got := get(sleep.TaskId)
		return got.Status == mcp.TaskStatusWorking && got.StatusMessage != ""
	})

	held := submit("demo-sha256", map[string]any{"text": "x"})
	if held.Status != mcp.TaskStatusInputRequired || !strings.Contains(held.StatusMessage, "awaits approval") {
		t.Errorf("a call held for approval, created: %+v", held)
	}
	if got := get(held.TaskId); got.Status != mcp.TaskStatusInputRequired || !strings.Contains(got.StatusMessage, "queue mode") {
		t.Errorf("a call held for approval: %+v", got)
	}
	// Approved by an operator, the held call runs, and its result is the
	// task's.
	operator := testenv.Client(t, s.url, client.Options{})
	info, err := operator.Get(testenv.Context(t), held.TaskId)
	if err != nil || info.Approval == nil {
		t.Fatalf("the held call: %+v %v", info, err)
	}
	if _, err := operator.Operator().Decide(testenv.Context(t), messages.DecideRequest{ApprovalID: info.Approval.ApprovalID, Decision: messages.DecisionApprove, Reason: "fine", By: "operator"}); err != nil {
		t.Fatal(err)
	}
	var digest mcp.CallToolResult
	if e := rpc(t, url, session, "tasks/result", map[string]any{"taskId": held.TaskId}, &digest); e != nil || digest.IsError || len(text(&digest)) != 64 {
		t.Errorf("tasks/result of the approved call: %+v %+v", digest, e)
	}

	done := submit("demo-echo", map[string]any{"text": "task"})
	var result struct {
		Content []mcp.TextContent `json:"content"`
		IsError bool              `json:"isError"`
		Meta    map[string]any    `json:"_meta"`
	}
	if e := rpc(t, url, session, "tasks/result", map[string]any{"taskId": done.TaskId}, &result); e != nil {
		t.Fatalf("tasks/result: %+v", e)
	}
	related, _ := result.Meta[mcp.RelatedTaskMetaKey].(map[string]any)
	if result.IsError || len(result.Content) != 1 || result.Content[0].Text != "task" || related["taskId"] != done.TaskId || result.Meta[mcpfront.MetaState] != "completed" {
		t.Errorf("tasks/result: %+v", result)
	}
	if got := get(done.TaskId); got.Status != mcp.TaskStatusCompleted {
		t.Errorf("a completed call's task: %+v", got)
	}
	if e := rpc(t, url, session, "tasks/cancel", map[string]any{"taskId": done.TaskId}, nil); e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("tasks/cancel of an ended task: %+v", e)
	}

	slow := submit("media-slow", map[string]any{})
	if e := rpc(t, url, session, "tasks/result", map[string]any{"taskId": slow.TaskId}, &result); e != nil || !result.IsError || result.Meta[mcpfront.MetaCode] != messages.ResultTimedOut {
		t.Errorf("tasks/result of a call past its deadline: %+v %+v", result, e)
	}
	if got := get(slow.TaskId); got.Status != mcp.TaskStatusFailed || !strings.Contains(got.StatusMessage, "deadline") {
		t.Errorf("a timed-out call's task: %+v", got)
	}

	// Another agent, even in the same session, gets none of these tasks.
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		if e := rpcAs(t, url, "token-of-ops", session, method, map[string]any{"taskId": sleep.TaskId}, nil); e == nil || e.Code != mcp.INVALID_PARAMS {
			t.Errorf("%s of another agent's task: %+v", method, e)
		}
	}
	var others mcp.ListTasksResult
	if e := rpcAs(t, url, "token-of-ops", "AAAAAAAAAAAAAAAAAAAAAA.t-ops-own", "tasks/list", map[string]any{"_meta": map[string]any{mcpfront.TurnMetaKey: "t-task-states"}}, &others); e != nil || len(others.Tasks) != 0 {
		t.Errorf("tasks/list of another agent's turn: %+v %+v", others, e)
	}
	var list mcp.ListTasksResult
	if e := rpc(t, url, session, "tasks/list", map[string]any{}, &list); e != nil || len(list.Tasks) != 4 {
		t.Errorf("tasks/list: %+v %+v", list, e)
	}

	var cancelled mcp.CancelTaskResult
	if e := rpc(t, url, session, "tasks/cancel", map[string]any{"taskId": sleep.TaskId}, &cancelled); e != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Errorf("tasks/cancel: %+v %+v", cancelled, e)
	}
	testenv.Eventually(t, "the cancelled task's call to end", func() bool { return get(sleep.TaskId).Status == mcp.TaskStatusCancelled })

	// A refused submit is a JSON-RPC error with the Toolbus code.
	for _, tc := range []struct {
		name string
		args map[string]any
		code int
		want messages.ErrorCode
	}{
		{"nosuch-tool", map[string]any{}, mcp.INVALID_PARAMS, messages.CodeToolNotFound},
		{"demo-word_count", map[string]any{"text": 7}, mcp.INVALID_PARAMS, messages.CodeInvalidArguments},
	} {
		e := rpc(t, url, session, "tools/call", map[string]any{"name": tc.name, "arguments": tc.args, "task": map[string]any{}}, nil)
		if e == nil || e.Code != tc.code || e.Data[mcpfront.MetaCode] != string(tc.want) {
			t.Errorf("%s as a task: %+v", tc.name, e)
		}
	}
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "demo-word_count", "arguments": map[string]any{"text": 7}, "task": map[string]any{}}, nil); e == nil || len(fmt.Sprint(e.Data[mcpfront.MetaDetails])) < 3 {
		t.Errorf("invalid arguments as a task, no details: %+v", e)
	}
	// Another agent's turn is not the ops agent's to file calls in.
	if e := rpcAs(t, url, "token-of-ops", session, "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}}, nil); e == nil || e.Code != mcp.INTERNAL_ERROR || e.Data[mcpfront.MetaCode] != string(messages.CodeConflict) {
		t.Errorf("a task in another agent's turn: %+v", e)
	}
}

// post sends one JSON-RPC message in a session, with more headers, and
// returns the response's status, headers and body as they came.
func post(t *testing.T, url, sessionID, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(raw)
}

// TestSessionsAndTurns: a new session's ID is "<22 random characters>.
// mcp-<random>", its turn; one request files its call under the turn its
// Toolbus-Turn header names, or its _meta (which wins over the header);
// a DELETE ends nothing, and the session carries on in its turn.
func TestSessionsAndTurns(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()
	if !regexp.MustCompile(`^[A-Za-z0-9]{22}\.mcp-[A-Za-z0-9]+$`).MatchString(session) {
		t.Fatalf("session ID %q", session)
	}
	turn := sessionTurn(t, c)
	echo := func(text string, meta string, headers ...string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"` + text + `"}` + meta + `}}`
		if status, _, raw := post(t, url, session, body, headers...); status != http.StatusOK || !strings.Contains(raw, `"text":"`+text+`"`) {
			t.Fatalf("%s: %d %s", text, status, raw)
		}
	}
	echo("in the session's turn", "")
	// A turn to resume that is no turn's name is refused, rather than
	// replaced by a new turn.
	status, _, raw := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, mcpfront.TurnHeader, "my turn!")
	if status != http.StatusBadRequest || !strings.Contains(raw, `"code":-32602`) || !strings.Contains(raw, mcpfront.TurnHeader) {
		t.Errorf("initialize with an invalid turn: %d %s", status, raw)
	}
	echo("in the header's turn", "", mcpfront.TurnHeader, "t-header")
	echo("in the meta's turn", `,"_meta":{"toolbus/turn":"t-meta"}`, mcpfront.TurnHeader, "t-header")

	req, _ := http.NewRequest(http.MethodDelete, url+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	echo("after the DELETE", "")
	// A session-based request without its session ID is a bad request (an
	// unknown ID would be 404: a session that ended).
	if status, _, raw := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`); status != http.StatusBadRequest || !strings.Contains(raw, "Mcp-Session-Id") {
		t.Errorf("tools/list without a session ID: %d %s", status, raw)
	}
	if status, _, raw := post(t, url, "not-a-session", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`); status != http.StatusNotFound {
		t.Errorf("tools/list with an ID no front issued: %d %s", status, raw)
	}
	// Malformed JSON is the parse error, an unknown method -32601.
	if status, _, raw := post(t, url, session, `{"jsonrpc":"2.0","id":1,"method":`); status != http.StatusBadRequest || !strings.Contains(raw, `"code":-32700`) {
		t.Errorf("malformed JSON: %d %s", status, raw)
	}
	if _, _, raw := post(t, url, session, `{"jsonrpc":"2.0","id":1,"method":"nosuch/method"}`); !strings.Contains(raw, `"code":-32601`) {
		t.Errorf("an unknown method: %s", raw)
	}
	// A request's ID is a string or a number (MCP): null, an object, an
	// array or a boolean is an invalid request, answered with the ID null.
	for _, id := range []string{`null`, `{"n":1}`, `[1]`, `true`} {
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"x"}}}`
		if status, _, raw := post(t, url, session, body); status != http.StatusBadRequest || !strings.Contains(raw, `"code":-32600`) || !strings.Contains(raw, `"id":null`) {
			t.Errorf("a request with the ID %s: %d %s", id, status, raw)
		}
	}
	if status, _, raw := post(t, url, session, `{"jsonrpc":"2.0","id":"s-1","method":"ping"}`); status != http.StatusOK || !strings.Contains(raw, `"id":"s-1"`) {
		t.Errorf("a request with a string ID: %d %s", status, raw)
	}
	// A JSON-RPC batch is not MCP since 2025-06-18.
	if status, _, raw := post(t, url, session, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`); status != http.StatusBadRequest || !strings.Contains(raw, `"code":-32700`) {
		t.Errorf("a batch: %d %s", status, raw)
	}
	// A protocol version the front does not speak is refused, on the
	// requests the front answers itself as on mcp-go's.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"from the past"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
	} {
		if status, _, raw := post(t, url, session, body, "Mcp-Protocol-Version", "1999-01-01"); status != http.StatusBadRequest {
			t.Errorf("an unsupported protocol version: %d %s", status, raw)
		}
	}

	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	for turn, want := range map[string][]string{
		turn:       {"after the DELETE", "in the session's turn"},
		"t-header": {"in the header's turn"},
		"t-meta":   {"in the meta's turn"},
	} {
		info, err := bus.Turn(testenv.Context(t), turn)
		if err != nil {
			t.Fatalf("turn %s: %v", turn, err)
		}
		var got []string
		for _, call := range info.Calls {
			var args struct{ Text string }
			_ = json.Unmarshal(call.Arguments, &args)
			got = append(got, args.Text)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("turn %s: calls %q, want %q", turn, got, want)
		}
	}
}

// TestDrainLeavesCallsRunning: once the front drains, a request that ends
// before its result (its connection closed at the drain's end) leaves its
// call running on the bus, and the call completes.
func TestDrainLeavesCallsRunning(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, hs := s.frontServer(t)
	c, _ := connect(t, hs.URL, bearer(), legacySessions())
	turn := sessionTurn(t, c)
	done := make(chan error, 1)
	go func() {
		_, err := callTool(testenv.Context(t), c, "demo-sleep", map[string]any{"seconds": 1}, nil)
		done <- err
	}()
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	var callID string
	testenv.Eventually(t, "the call to run", func() bool {
		info, err := bus.Turn(testenv.Context(t), turn)
		if err != nil || len(info.Calls) != 1 || info.Calls[0].State != messages.StateRunning {
			return false
		}
		callID = info.Calls[0].CallID
		return true
	})
	f.Shutdown(testenv.Context(t))
	hs.CloseClientConnections()
	if err := <-done; err == nil {
		t.Fatal("the request got its result through a closed connection")
	}
	res, err := bus.Wait(testenv.Context(t), callID)
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the call of the drained request: %+v %v", res, err)
	}
}

// TestStdioSessionEnds: a stdio session whose input closes ends, and its
// call in flight runs on to its result; a message longer than
// MaxRequestBytes ends the session.
func TestStdioSessionEnds(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client:          testenv.Client(t, s.url, client.Options{}),
		Agent:           "analyst",
		StdioTurn:       "t-stdio-ends",
		MaxRequestBytes: 4 << 10,
		Logger:          testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	// serve serves the lines, then whatever more comes on more.
	serve := func(more io.Reader, lines ...string) chan error {
		in := io.MultiReader(strings.NewReader(strings.Join(lines, "\n")+"\n"), more)
		return serveStdio(testenv.Context(t), f, in, io.Discard)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	open, closeInput := io.Pipe()
	t.Cleanup(func() { closeInput.Close() })
	served := serve(open, initialize, `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo-sleep","arguments":{"seconds":1}}}`)
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	var callID string
	testenv.Eventually(t, "the call to run", func() bool {
		info, err := bus.Turn(testenv.Context(t), "t-stdio-ends")
		if err != nil || len(info.Calls) != 1 || info.Calls[0].State != messages.StateRunning {
			return false
		}
		callID = info.Calls[0].CallID
		return true
	})
	// The process serves one stdio session at a time.
	if err := f.ServeStdio(testenv.Context(t), strings.NewReader(initialize+"\n"), io.Discard); !errors.Is(err, mcpfront.ErrStdioInUse) {
		t.Errorf("a second stdio session at once: %v", err)
	}
	closeInput.Close()
	<-served
	if res, err := bus.Wait(testenv.Context(t), callID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the call of the closed session: %+v %v", res, err)
	}

	// The input stays open after the long line: only the line ends the
	// session.
	stillOpen, _ := io.Pipe()
	served = serve(stillOpen, initialize, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"pad":"`+strings.Repeat("x", 5<<10)+`"}}}`)
	select {
	case err := <-served:
		if !errors.Is(err, bufio.ErrTooLong) || !strings.Contains(err.Error(), "longer than 4096 bytes") {
			t.Errorf("the session over a long line ended with %v", err)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("a message over the limit did not end the session")
	}
}

// TestElicitationAnswerIsTheAgents: the answer to the front's elicitation
// counts only with the token of the agent whose call asked it: another
// agent's token with the session's ID and the request's ID approves
// nothing. (The session's ID says that its client declared elicitation.)
func TestElicitationAnswerIsTheAgents(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	url := s.twoAgentsFront(t)
	session := "BBBBBBBBBBBBBBBBBBBBBB-e.t-elicit"
	events := make(chan json.RawMessage, 4)
	go func() {
		defer close(events)
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ops-restart","arguments":{"city":"web"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		resp, err := http.DefaultClient.Do(req.WithContext(testenv.Context(t)))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				events <- json.RawMessage(data)
			}
		}
	}()
	var asked struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(<-events, &asked); err != nil || asked.Method != "elicitation/create" {
		t.Fatalf("the first event of the call's stream: %+v %v", asked, err)
	}
	answer := `{"jsonrpc":"2.0","id":` + string(asked.ID) + `,"result":{"action":"accept","content":{"approve":true}}}`
	status := func(bearerToken string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(answer))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+bearerToken)
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("token-of-ops"); got == http.StatusAccepted {
		t.Fatalf("another agent's answer was accepted")
	}
	pending, err := testenv.Client(t, s.url, client.Options{}).ListApprovals(testenv.Context(t), messages.ListApprovalsRequest{Agent: "analyst", Turn: "t-elicit"})
	if err != nil || len(pending.Approvals) != 1 {
		t.Fatalf("after another agent's answer, pending approvals: %+v %v", pending, err)
	}
	if got := status(token); got != http.StatusAccepted {
		t.Fatalf("the agent's own answer: %d", got)
	}
	var result struct {
		Result mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal(<-events, &result); err != nil || result.Result.IsError || text(&result.Result) != "restart is sunny" {
		t.Fatalf("the call's result after the agent's answer: %+v %v", result, err)
	}
}

// TestElicitationOnlyIfDeclared: the front asks through elicitation only a
// client that declared the capability on initialize, which its session's
// ID then says; another gets at once the result saying the call awaits
// its approval, as one JSON body.
func TestElicitationOnlyIfDeclared(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	initialize := func(capabilities string) string {
		t.Helper()
		status, header, raw := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+capabilities+`,"clientInfo":{"name":"t","version":"1"}}}`)
		if status != http.StatusOK {
			t.Fatalf("initialize: %d %s", status, raw)
		}
		return header.Get("Mcp-Session-Id")
	}
	if id := initialize(`{"elicitation":{}}`); !regexp.MustCompile(`^[A-Za-z0-9]{22}-e\.mcp-`).MatchString(id) {
		t.Errorf("the session ID of a client with elicitation: %q", id)
	}
	plain := initialize(`{}`)
	if !regexp.MustCompile(`^[A-Za-z0-9]{22}\.mcp-`).MatchString(plain) {
		t.Errorf("the session ID of a client without elicitation: %q", plain)
	}
	status, header, raw := post(t, url, plain, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ops-restart","arguments":{"city":"web"}}}`)
	if status != http.StatusOK || header.Get("Content-Type") != "application/json" || strings.Contains(raw, "elicitation/create") || !strings.Contains(raw, `"toolbus/state":"awaiting_approval"`) {
		t.Fatalf("a prompt approval for a client without elicitation: %d %s\n%s", status, header.Get("Content-Type"), raw)
	}
}

// TestFirstMeetingAnnounced: the first time a front meets a tool name, the
// sessions with a stream open on it (GET) are told that the list changed.
func TestFirstMeetingAnnounced(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	listener, _ := connect(t, url, bearer(), legacySessions())
	req, _ := http.NewRequestWithContext(testenv.Context(t), http.MethodGet, url+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", listener.GetSessionId())
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	events := make(chan string, 16)
	go func() {
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				events <- data
			}
		}
		close(events)
	}()

	// Another session discovers the forecast and lists it: the front meets
	// its name for the first time.
	c, _ := connect(t, url, bearer(), legacySessions())
	testenv.Eventually(t, "the forecast to be discoverable", func() bool {
		res, err := callTool(testenv.Context(t), c, "llm_tools-list", map[string]any{"query": "weather forecast"}, nil)
		return err == nil && !res.IsError && strings.Contains(text(res), "weather-forecast")
	})
	if got := names(t, c); !slices.Contains(got, "weather-forecast") {
		t.Fatalf("after discovery: %v", got)
	}
	for event := range events {
		if strings.Contains(event, `"notifications/tools/list_changed"`) {
			return
		}
	}
	t.Fatal("the stream ended without list_changed")
}

// TestBusTrouble: a front without a coordinator answers tools/list with a
// JSON-RPC error; one that lost its connection to the bus answers a call
// of a tool it knows with the JSON-RPC internal error.
func TestBusTrouble(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	lonely := testenv.Server(t)
	f, err := mcpfront.New(mcpfront.Config{Client: testenv.Client(t, lonely.URL(), client.Options{}), Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	session := "CCCCCCCCCCCCCCCCCCCCCC.t-trouble"
	if e := rpc(t, hs.URL, session, "tools/list", map[string]any{}, nil); e == nil || e.Code != mcp.INVALID_REQUEST || !strings.HasPrefix(e.Message, "tools.list: no_responders: ") {
		t.Errorf("tools/list without a coordinator: %+v", e)
	}

	nc := testenv.Connect(t, s.url)
	bus, err := client.New(nc, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err = mcpfront.New(mcpfront.Config{Client: bus, Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs = httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	if e := rpc(t, hs.URL, session, "tools/list", map[string]any{}, nil); e != nil {
		t.Fatalf("tools/list: %+v", e)
	}
	nc.Close()
	for name, meta := range map[string]map[string]any{"without progress": {}, "with progress": {"progressToken": 1}} {
		e := rpc(t, hs.URL, session, "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "x"}, "_meta": meta}, nil)
		if e == nil || e.Code != mcp.INTERNAL_ERROR || !strings.Contains(e.Message, "connection closed") {
			t.Errorf("a call %s after the front lost the bus: %+v", name, e)
		}
	}
}

// TestNotAdmitted: a tool that exists but that the agent's rules do not
// admit is an unknown tool (a JSON-RPC error) while no session of the front
// has listed it, and, once one has, a result with isError and the code
// not_admitted.
func TestNotAdmitted(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client: testenv.Client(t, s.url, client.Options{}),
		Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}, "token-of-guest": {Agent: "guest"}},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(f.Handler())
	t.Cleanup(hs.Close)
	guest := "FFFFFFFFFFFFFFFFFFFFFF.t-guest"
	var listed mcp.ListToolsResult
	if e := rpcAs(t, hs.URL, "token-of-guest", guest, "tools/list", map[string]any{}, &listed); e != nil || len(listed.Tools) == 0 || slices.ContainsFunc(listed.Tools, func(tool mcp.Tool) bool { return tool.Name == "demo-word_count" }) {
		t.Fatalf("the guest's tools: %+v %+v", listed.Tools, e)
	}
	count := map[string]any{"name": "demo-word_count", "arguments": map[string]any{"text": "a b"}}
	if e := rpcAs(t, hs.URL, "token-of-guest", guest, "tools/call", count, nil); e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("a tool no session of the front listed: %+v", e)
	}
	if e := rpc(t, hs.URL, "FFFFFFFFFFFFFFFFFFFFFF.t-analyst", "tools/list", map[string]any{}, nil); e != nil {
		t.Fatal(e)
	}
	var res mcp.CallToolResult
	if e := rpcAs(t, hs.URL, "token-of-guest", guest, "tools/call", count, &res); e != nil || !res.IsError || res.Meta == nil || res.Meta.AdditionalFields[mcpfront.MetaCode] != string(messages.CodeNotAdmitted) {
		t.Errorf("a tool another session listed: %+v %+v", res, e)
	}
}

// TestDroppedRequestCancels: an HTTP client that drops a tools/call before
// its result, sending no notifications/cancelled, cancels the call, with
// a progress token or without.
func TestDroppedRequestCancels(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	for i, meta := range []string{``, `,"_meta":{"progressToken":"p"}`} {
		turn := fmt.Sprintf("t-dropped-%d", i)
		ctx, drop := context.WithCancel(testenv.Context(t))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo-sleep","arguments":{"seconds":30}`+meta+`}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", "HHHHHHHHHHHHHHHHHHHHHH."+turn)
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		testenv.Eventually(t, "the call to run", func() bool {
			info, err := bus.Turn(testenv.Context(t), turn)
			return err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateRunning
		})
		drop()
		<-done
		testenv.Eventually(t, "the dropped call to be cancelled", func() bool {
			info, err := bus.Turn(testenv.Context(t), turn)
			return err == nil && len(info.Calls) == 1 && info.Calls[0].State == messages.StateCancelled
		})
	}
}

// TestActivationShows: a tool activated in the session's turn through the
// API (tools.activate, by the agent's program beside the MCP client) is in
// the session's next tools/list, and callable.
func TestActivationShows(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	if got := names(t, c); slices.Contains(got, "weather-forecast") {
		t.Fatalf("before the activation: %v", got)
	}
	agent := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	if _, err := agent.Activate(testenv.Context(t), sessionTurn(t, c), "weather-forecast"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, c); !slices.Contains(got, "weather-forecast") {
		t.Fatalf("after the activation: %v", got)
	}
	res, err := callTool(testenv.Context(t), c, "weather-forecast", map[string]any{"city": "Oslo"}, nil)
	if err != nil || res.IsError || !strings.Contains(text(res), "sunny") {
		t.Fatalf("the activated tool: %+v %v", res, err)
	}
}

// TestResumedConversation: a new session naming the turn of an earlier
// one (Toolbus-Turn on initialize), on another front, finds the turn's
// discovered tools and its calls.
func TestResumedConversation(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, first := s.front(t)
	c, _ := connect(t, first, bearer(mcpfront.TurnHeader, "t-resumed"), legacySessions())
	testenv.Eventually(t, "the forecast to be discoverable", func() bool {
		res, err := callTool(testenv.Context(t), c, "llm_tools-list", map[string]any{"query": "weather forecast"}, nil)
		return err == nil && !res.IsError && strings.Contains(text(res), "weather-forecast")
	})
	_ = c.Close()

	_, second := s.front(t)
	resumed, _ := connect(t, second, bearer(mcpfront.TurnHeader, "t-resumed"), legacySessions())
	if got := sessionTurn(t, resumed); got != "t-resumed" {
		t.Fatalf("the resumed session's turn: %q", got)
	}
	if got := names(t, resumed); !slices.Contains(got, "weather-forecast") {
		t.Fatalf("the resumed session's tools: %v", got)
	}
	var list mcp.ListTasksResult
	if e := rpc(t, second, resumed.GetSessionId(), "tasks/list", map[string]any{}, &list); e != nil || len(list.Tasks) == 0 {
		t.Fatalf("the resumed turn's calls: %+v %+v", list, e)
	}
}

// TestStdioElicitation: over stdio too, a prompt approval is asked of a
// client that declared elicitation, and the call runs once approved; a
// client that did not declare it, or that speaks 2026-07-28, is told the
// call awaits approval.
func TestStdioElicitation(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	ctx := testenv.Context(t)
	// call makes the call in a stdio session of its own, which ends with it.
	call := func(opts ...mcpclient.ClientOption) *mcp.CallToolResult {
		t.Helper()
		f, err := mcpfront.New(mcpfront.Config{Client: testenv.Client(t, s.url, client.Options{}), Agent: "analyst", Logger: testenv.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		clientIn, serverOut := io.Pipe()
		serverIn, clientOut := io.Pipe()
		sessionCtx, stop := context.WithCancel(ctx)
		served := serveStdio(sessionCtx, f, serverIn, serverOut)
		defer func() {
			stop()
			clientOut.Close()
			<-served
			serverOut.Close()
		}()
		c := mcpclient.NewClient(transport.NewIO(clientIn, clientOut, nil), opts...)
		if err := c.Start(sessionCtx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Initialize(sessionCtx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
			t.Fatal(err)
		}
		res, err := callTool(sessionCtx, c, "ops-restart", map[string]any{"city": "web"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(legacySessions(), mcpclient.WithElicitationHandler(elicitor{approve: true})); res.IsError || text(res) != "restart is sunny" {
		t.Fatalf("approved over stdio: %+v", res)
	}
	for name, opts := range map[string][]mcpclient.ClientOption{
		"without elicitation": {legacySessions()},
		// 2026-07-28 has no requests from the server: its elicitation is a
		// multi round-trip request, which the front does not make.
		"in the protocol 2026-07-28": {mcpclient.WithElicitationHandler(elicitor{approve: true})},
	} {
		if res := call(opts...); !res.IsError || res.Meta == nil || res.Meta.AdditionalFields[mcpfront.MetaState] != string(messages.StateAwaitingApproval) {
			t.Errorf("%s over stdio: %+v", name, res)
		}
	}
}

// TestACancelledRequestIsNotAnswered: a tools/call its client cancels
// (notifications/cancelled) gets no answer, as MCP has it: its response
// stream ends with the progress it carried and no result or error; the
// Toolbus call ends cancelled.
func TestACancelledRequestIsNotAnswered(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()
	if _, err := c.ListTools(testenv.Context(t), mcp.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	body := `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"demo-sleep","arguments":{"seconds":30},"_meta":{"progressToken":"p41"}}}`
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first progress notification says the call runs.
	stream := bufio.NewReader(resp.Body)
	for {
		line, err := stream.ReadString('\n')
		if err != nil {
			t.Fatalf("the call's stream ended before its first progress: %v", err)
		}
		if strings.Contains(line, "notifications/progress") {
			break
		}
	}
	notify(t, url, token, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41,"reason":"the user stopped it"}}`)
	rest, err := io.ReadAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rest), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(data), &msg) == nil && (msg.Result != nil || msg.Error != nil) {
			t.Fatalf("the cancelled request was answered: %s", data)
		}
	}
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	testenv.Eventually(t, "the cancelled call to end cancelled", func() bool {
		info, err := bus.Turn(testenv.Context(t), sessionTurn(t, c))
		return err == nil && slices.ContainsFunc(info.Calls, func(c messages.CallInfo) bool {
			return c.Tool == "demo-sleep" && c.State == messages.StateCancelled
		})
	})
}

// TestStdioCancelRightBeforeTheInputEnds: a client that cancels its request
// and closes its input at once (an SDK's abort, then close) cancels the
// call; the end of the input alone would leave it running.
func TestStdioCancelRightBeforeTheInputEnds(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	f, err := mcpfront.New(mcpfront.Config{
		Client:    testenv.Client(t, s.url, client.Options{}),
		Agent:     "analyst",
		StdioTurn: "t-stdio-cancel-close",
		Logger:    testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	input, writeInput := io.Pipe()
	t.Cleanup(func() { writeInput.Close() })
	served := serveStdio(testenv.Context(t), f, input, io.Discard)
	for _, line := range []string{initialize, `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo-sleep","arguments":{"seconds":60}}}`} {
		if _, err := io.WriteString(writeInput, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	var callID string
	testenv.Eventually(t, "the call to run", func() bool {
		info, err := bus.Turn(testenv.Context(t), "t-stdio-cancel-close")
		if err != nil || len(info.Calls) != 1 || info.Calls[0].State != messages.StateRunning {
			return false
		}
		callID = info.Calls[0].CallID
		return true
	})
	if _, err := io.WriteString(writeInput, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"stop"}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	writeInput.Close()
	<-served
	if res, err := bus.Wait(testenv.Context(t), callID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("the call cancelled just before the input ended: %+v %v, want it cancelled", res, err)
	}
}
