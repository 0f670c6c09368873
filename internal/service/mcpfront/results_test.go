package mcpfront_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

// storeDocument describes, in OpenAPI 3.1, an operation whose 200 body is
// a string or null, and one whose body is an object too large for the
// default max_result_size.
const storeDocument = `openapi: 3.1.0
info: {title: store, version: "1"}
paths:
  /maybe:
    get:
      operationId: maybe
      responses:
        "200":
          description: a name, or null
          content:
            application/json:
              schema: {type: [string, "null"]}
  /big:
    get:
      operationId: big
      responses:
        "200":
          description: a large object
          content:
            application/json:
              schema: {type: object}
`

// bigBody is the body of GET /big: about 400 KB, more than the default
// max_result_size (256 KiB).
var bigBody = `{"items":["` + strings.Repeat("x", 400_000) + `"]}`

// startResults starts a stack whose tools answer null and results larger
// than their max_result_size: an OpenAPI source (store), and a Go tool
// without an output schema (texts-long). No workspace: the analyst sees
// every tool.
func startResults(t *testing.T) stack {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/openapi.yaml":
			w.Header().Set("Content-Type", "application/yaml")
			io.WriteString(w, storeDocument)
		case "/maybe":
			io.WriteString(w, `null`)
		case "/big":
			io.WriteString(w, bigBody)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(api.Close)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	store, err := openapi.New(openapi.Config{Name: "store", Namespace: "store", Spec: api.URL + "/openapi.yaml", BaseURL: api.URL, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "store", Sources: []worker.Source{store}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "texts", Tools: []worker.Tool{
		worker.Func("long", "Answers a long text.", func(context.Context, struct{}) (string, error) {
			return strings.Repeat("word ", 80_000), nil
		}),
	}})
	bus := testenv.Client(t, srv.URL(), client.Options{})
	testenv.Eventually(t, "the coordinator to list every tool", func() bool {
		reply, err := bus.ListTools(testenv.Context(t), messages.ListToolsRequest{Agent: "analyst"})
		if err != nil {
			return false
		}
		n := 0
		for _, e := range reply.Tools {
			if e.Namespace == "store" || e.Namespace == "texts" {
				n++
			}
		}
		return n == 3
	})
	return stack{url: srv.URL()}
}

// mcpResult is a tools/call result as a client reads it.
type mcpResult struct {
	Content           []map[string]any `json:"content"`
	StructuredContent json.RawMessage  `json:"structuredContent"`
	IsError           bool             `json:"isError"`
	Meta              map[string]any   `json:"_meta"`
}

// TestNullResult: an OpenAPI operation whose 200 body is null, with an
// output schema that admits null, answers structuredContent
// {"result": null}, which conforms to the outputSchema of tools/list, and
// the text null.
func TestNullResult(t *testing.T) {
	t.Parallel()
	s := startResults(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()

	schemas := outputSchemas(t, url, session)
	schema := schemas["store-maybe"]
	if len(schema) == 0 {
		t.Fatalf("store-maybe has no outputSchema: %v", schemas)
	}

	var got mcpResult
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "store-maybe", "arguments": map[string]any{}}, &got); e != nil {
		t.Fatalf("tools/call: %+v", e)
	}
	var value any
	if err := json.Unmarshal(got.StructuredContent, &value); err != nil || !reflect.DeepEqual(value, map[string]any{"result": nil}) {
		t.Fatalf("structuredContent %s, want {\"result\":null}: %+v", got.StructuredContent, got)
	}
	if got.IsError || got.Meta[mcpfront.MetaWrapped] != true || len(got.Content) != 1 || got.Content[0]["type"] != "text" || got.Content[0]["text"] != "null" {
		t.Fatalf("result %+v, want the text null, wrapped", got)
	}
	if err := compileSchema(t, schema).Validate(value); err != nil {
		t.Fatalf("structuredContent %s does not conform to the outputSchema %s: %v", got.StructuredContent, schema, err)
	}
}

// TestTruncatedResult: a result cut to its tool's max_result_size says so
// in _meta, with the object that holds the whole of it, which
// calls.full_result reads. A tool that declares an outputSchema answers it
// as an error result, since what is left is not what the schema describes
// (a client would refuse it without structuredContent), whose first text
// says where the whole result is; over tools/call and tasks/result alike.
// A tool without one answers the cut text.
func TestTruncatedResult(t *testing.T) {
	t.Parallel()
	s := startResults(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})

	fullResult := func(what string, got mcpResult) *messages.ObjectRef {
		t.Helper()
		if got.Meta[mcpfront.MetaTruncated] != true || got.Meta[mcpfront.MetaState] != "completed" {
			t.Fatalf("%s: _meta %v, want %s", what, got.Meta, mcpfront.MetaTruncated)
		}
		raw, _ := json.Marshal(got.Meta[mcpfront.MetaFullResult])
		var ref messages.ObjectRef
		if err := json.Unmarshal(raw, &ref); err != nil || ref.Bucket == "" || ref.Name == "" || ref.Size == 0 {
			t.Fatalf("%s: _meta %s %s", what, mcpfront.MetaFullResult, raw)
		}
		return &ref
	}
	checkSchemaTool := func(what string, got mcpResult) {
		t.Helper()
		ref := fullResult(what, got)
		if !got.IsError || got.StructuredContent != nil || len(got.Content) < 2 {
			t.Fatalf("%s: isError %v, structuredContent %.100s, %d blocks", what, got.IsError, got.StructuredContent, len(got.Content))
		}
		notice, _ := got.Content[0]["text"].(string)
		for _, want := range []string{"max_result_size", ref.Bucket, ref.Name, "calls.full_result", "toolbus calls get --full"} {
			if !strings.Contains(notice, want) {
				t.Errorf("%s: the first text %q does not say %q", what, notice, want)
			}
		}
		whole, err := bus.FullResult(testenv.Context(t), ref)
		if err != nil {
			t.Fatalf("%s: calls.full_result: %v", what, err)
		}
		if string(whole.StructuredContent) != bigBody {
			t.Fatalf("%s: the whole result's structured content is %d bytes, want %d", what, len(whole.StructuredContent), len(bigBody))
		}
	}

	var got mcpResult
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "store-big", "arguments": map[string]any{}}, &got); e != nil {
		t.Fatalf("tools/call: %+v", e)
	}
	checkSchemaTool("tools/call store-big", got)

	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "store-big", "arguments": map[string]any{}, "task": map[string]any{}}, &created); e != nil || created.Task.TaskID == "" {
		t.Fatalf("tools/call as a task: %+v %+v", e, created)
	}
	got = mcpResult{}
	if e := rpc(t, url, session, "tasks/result", map[string]any{"taskId": created.Task.TaskID}, &got); e != nil {
		t.Fatalf("tasks/result: %+v", e)
	}
	checkSchemaTool("tasks/result store-big", got)

	got = mcpResult{}
	if e := rpc(t, url, session, "tools/call", map[string]any{"name": "texts-long", "arguments": map[string]any{}}, &got); e != nil {
		t.Fatalf("tools/call: %+v", e)
	}
	fullResult("tools/call texts-long", got)
	if got.IsError || len(got.Content) != 1 {
		t.Fatalf("texts-long: isError %v, %d blocks", got.IsError, len(got.Content))
	}
	if cut, _ := got.Content[0]["text"].(string); !strings.HasPrefix(cut, "word word") || !strings.Contains(cut, "bytes cut") || len(cut) > messages.DefaultMaxResultSize {
		t.Fatalf("texts-long: a text of %d bytes, want the cut text", len(cut))
	}
}

// TestListCursor: the front's tools/list is one page and gives no cursor,
// so a tools/list with one, base64 or not, is refused with -32602 naming
// the cursor, over HTTP and over stdio; one without a cursor is listed.
func TestListCursor(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()
	for _, cursor := range []string{"not base64!", "ZGVtby1lY2hv"} {
		e := rpc(t, url, session, "tools/list", map[string]any{"cursor": cursor}, nil)
		if e == nil || e.Code != -32602 || !strings.Contains(e.Message, "invalid cursor") || !strings.Contains(e.Message, "not a cursor this server gave") {
			t.Errorf("tools/list with the cursor %q over HTTP: %+v", cursor, e)
		}
	}
	var listed struct {
		Tools      []map[string]any `json:"tools"`
		NextCursor string           `json:"nextCursor"`
	}
	if e := rpc(t, url, session, "tools/list", map[string]any{}, &listed); e != nil || len(listed.Tools) == 0 || listed.NextCursor != "" {
		t.Fatalf("tools/list: %+v %+v", e, listed)
	}

	f, err := mcpfront.New(mcpfront.Config{Client: testenv.Client(t, s.url, client.Options{}), Agent: "guest", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stdio := startStdio(t, f)
	var init struct {
		Instructions string `json:"instructions"`
	}
	stdio.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}, &init)
	for _, cursor := range []string{"not base64!", "ZGVtby1lY2hv"} {
		reply := stdio.request("tools/list", map[string]any{"cursor": cursor})
		var e rpcError
		if json.Unmarshal(reply["error"], &e) != nil || e.Code != -32602 || !strings.Contains(e.Message, "not a cursor this server gave") {
			t.Errorf("tools/list with the cursor %q over stdio: %s", cursor, reply["error"])
		}
	}
	// The guest's rules do not show the discovery tool: the session's
	// instructions do not say it has it.
	stdio.call("tools/list", map[string]any{}, &listed)
	for _, tool := range listed.Tools {
		if tool["name"] == "llm_tools-list" {
			t.Fatal("the guest sees llm_tools-list")
		}
	}
	if !strings.Contains(init.Instructions, "If llm_tools-list is among your tools") {
		t.Fatalf("instructions %q", init.Instructions)
	}
}

// TestTypeScriptSDKResults: the official TypeScript SDK client takes a
// null result and truncated results without throwing, and gets an invalid
// params error for a tools/list cursor the front did not give.
func TestTypeScriptSDKResults(t *testing.T) {
	t.Parallel()
	node := nodeWithSDK(t)
	s := startResults(t)
	_, url := s.front(t)
	runSDKTests(t, node, "testdata/sdk_results.test.mjs", "TOOLBUS_MCP_URL="+url+"/mcp", "TOOLBUS_MCP_TOKEN="+token)
}
