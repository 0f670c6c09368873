package mcpfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/mcp"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

type pet struct {
	Name string `json:"name"`
}

// petsDocument describes the pets API: a list endpoint whose 2xx body is
// an array, one whose body is a number, and one whose body is an object
// or, for an unknown pet, a 404.
const petsDocument = `openapi: 3.0.3
info: {title: pets, version: "1"}
paths:
  /pets:
    get:
      operationId: listPets
      responses:
        "200":
          description: the pets
          content:
            application/json:
              schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}
  /pets/{id}:
    get:
      operationId: getPet
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: the pet
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Pet"}
        "404": {description: no such pet}
  /owner:
    get:
      operationId: findOwner
      responses:
        "200":
          description: the pets' owner, null when none
          content:
            application/json:
              schema: {type: string, nullable: true}
  /count:
    get:
      operationId: countPets
      responses:
        "200":
          description: how many pets
          content:
            application/json:
              schema: {type: integer}
components:
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {type: string}
`

// startShapes starts a stack whose tools answer with structured content
// of every shape, from each kind of source: Go tools (namespace shapes),
// an HTTP API described by OpenAPI (pets) and an MCP server over
// streamable HTTP (remote). No workspace: the analyst sees every tool.
func startShapes(t *testing.T) stack {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/openapi.yaml":
			w.Header().Set("Content-Type", "application/yaml")
			io.WriteString(w, petsDocument)
		case "/pets":
			io.WriteString(w, `[{"name":"Rex"},{"name":"Tom"}]`)
		case "/pets/1":
			io.WriteString(w, `{"name":"Rex"}`)
		case "/count":
			io.WriteString(w, `2`)
		case "/owner":
			io.WriteString(w, `null`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"message":"no such pet"}`)
		}
	}))
	t.Cleanup(api.Close)

	remote := mcpserver.NewMCPServer("remote", "1", mcpserver.WithToolCapabilities(true))
	remote.AddTool(mcpgo.NewTool("list", mcpgo.WithDescription("Lists names."), mcpgo.WithRawOutputSchema(json.RawMessage(`{"type":"array","items":{"type":"string"}}`))),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent(`["a","b"]`)}, StructuredContent: []string{"a", "b"}}, nil
		})
	remote.AddTool(mcpgo.NewTool("answer", mcpgo.WithDescription("Answers a number.")),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent("42")}, StructuredContent: 42}, nil
		})
	remoteHTTP := httptest.NewServer(mcpserver.NewStreamableHTTPServer(remote))
	t.Cleanup(remoteHTTP.Close)

	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	pets, err := openapi.New(openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/openapi.yaml", BaseURL: api.URL, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "pets", Sources: []worker.Source{pets}})
	remoteSource, err := mcp.New(mcp.Config{Name: "remote", Namespace: "remote", URL: remoteHTTP.URL + "/mcp", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "remote", Sources: []worker.Source{remoteSource}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "shapes", Tools: []worker.Tool{
		worker.Func("list", "Lists pets.", func(context.Context, struct{}) ([]pet, error) {
			return []pet{{"Rex"}, {"Tom"}}, nil
		}),
		worker.Func("none", "Lists no pet.", func(context.Context, struct{}) ([]pet, error) { return nil, nil }),
		worker.Func("count", "Counts pets.", func(context.Context, struct{}) (int, error) { return 2, nil }),
		worker.Func("one", "Returns a pet.", func(context.Context, struct{}) (pet, error) { return pet{"Rex"}, nil }),
		worker.Func("nothing", "Answers null.", func(context.Context, struct{}) (*worker.Result, error) {
			return &worker.Result{Content: []messages.ContentBlock{messages.TextBlock("nothing")}, StructuredContent: messages.JSON(`null`)}, nil
		}),
		{
			// An output schema whose items refer to definitions at its root.
			Definition: messages.ToolDefinition{Method: "tree", Description: "Lists pets, by reference.",
				OutputSchema: messages.JSON(`{"type":"array","items":{"$ref":"#/definitions/pet"},"definitions":{"pet":{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}}}`)},
			Handler: worker.HandlerFunc(func(context.Context, *worker.Call) (*worker.Result, error) {
				data := messages.JSON(`[{"name":"Rex"}]`)
				return &worker.Result{Content: []messages.ContentBlock{messages.JSONBlock(data)}, StructuredContent: data}, nil
			}),
		},
	}})
	bus := testenv.Client(t, srv.URL(), client.Options{})
	testenv.Eventually(t, "the coordinator to list every tool", func() bool {
		reply, err := bus.ListTools(testenv.Context(t), messages.ListToolsRequest{Agent: "analyst"})
		if err != nil {
			return false
		}
		n := 0
		for _, e := range reply.Tools {
			if e.Namespace == "pets" || e.Namespace == "remote" || e.Namespace == "shapes" {
				n++
			}
		}
		return n == 12
	})
	return stack{url: srv.URL()}
}

// structuredCase is a call and what an MCP client reads of its result.
type structuredCase struct {
	tool string
	args map[string]any
	// structured is the result's structuredContent; wrapped whether it
	// wraps the tool's value.
	structured string
	wrapped    bool
	// text is the last text block, the tool's JSON.
	text    string
	isError bool
}

var structuredCases = []structuredCase{
	{tool: "shapes-list", structured: `{"result":[{"name":"Rex"},{"name":"Tom"}]}`, wrapped: true, text: `[{"name":"Rex"},{"name":"Tom"}]`},
	{tool: "shapes-none", structured: `{"result":[]}`, wrapped: true, text: `[]`},
	{tool: "shapes-count", structured: `{"result":2}`, wrapped: true, text: `2`},
	{tool: "shapes-one", structured: `{"name":"Rex"}`, text: `{"name":"Rex"}`},
	// A null structured result is none.
	{tool: "shapes-nothing", text: `nothing`},
	{tool: "shapes-tree", structured: `{"result":[{"name":"Rex"}]}`, wrapped: true, text: `[{"name":"Rex"}]`},
	{tool: "pets-listPets", structured: `{"result":[{"name":"Rex"},{"name":"Tom"}]}`, wrapped: true, text: `[{"name":"Rex"},{"name":"Tom"}]`},
	{tool: "pets-countPets", structured: `{"result":2}`, wrapped: true, text: `2`},
	// A null body is wrapped too: it fits the outputSchema, which admits null.
	{tool: "pets-findOwner", structured: `{"result":null}`, wrapped: true, text: `null`},
	{tool: "pets-getPet", args: map[string]any{"id": "1"}, structured: `{"name":"Rex"}`, text: `{"name":"Rex"}`},
	// An error has no structuredContent: its status and body do not fit
	// the pet's schema; they come as text.
	{tool: "pets-getPet", args: map[string]any{"id": "2"}, text: `{"body":{"message":"no such pet"},"status":404}`, isError: true},
	{tool: "remote-list", structured: `{"result":["a","b"]}`, wrapped: true, text: `["a","b"]`},
	{tool: "remote-answer", structured: `{"result":42}`, wrapped: true, text: `42`},
}

// compileSchema compiles a JSON schema as a validator of its own reads it.
func compileSchema(t *testing.T, schema json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("output.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("output.json")
	if err != nil {
		t.Fatalf("outputSchema %s: %v", schema, err)
	}
	return sch
}

// outputSchemas is tools/list's outputSchema of each tool of the session,
// by name (empty for a tool without one).
func outputSchemas(t *testing.T, url, session string) map[string]json.RawMessage {
	t.Helper()
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if e := rpc(t, url, session, "tools/list", map[string]any{}, &list); e != nil {
		t.Fatalf("tools/list: %+v", e)
	}
	schemas := map[string]json.RawMessage{}
	for _, tool := range list.Tools {
		schemas[tool.Name] = tool.OutputSchema
	}
	return schemas
}

// TestStructuredContentIsAnObject: whatever the shape of a tool's
// structured result and whatever its source (a Go tool, an OpenAPI
// operation, an MCP server), an MCP client gets a structuredContent that is
// a JSON object, conforming to the outputSchema tools/list declares for
// the tool, which is an object schema; a value that is not an object
// comes wrapped under "result", with toolbus/wrapped in _meta, and
// unwrapped in the text. An error result carries no structuredContent.
func TestStructuredContentIsAnObject(t *testing.T) {
	t.Parallel()
	s := startShapes(t)
	_, url := s.front(t)
	c, _ := connect(t, url, bearer(), legacySessions())
	session := c.GetSessionId()

	schemas := outputSchemas(t, url, session)
	for name, schema := range schemas {
		if len(schema) == 0 {
			continue
		}
		var root struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(schema, &root) != nil || root.Type != "object" {
			t.Errorf("%s: outputSchema %s is not an object schema", name, schema)
		}
	}
	for _, name := range []string{"shapes-list", "shapes-none", "shapes-count", "shapes-one", "shapes-tree", "pets-listPets", "pets-countPets", "pets-findOwner", "pets-getPet", "remote-list"} {
		if len(schemas[name]) == 0 {
			t.Errorf("%s: no outputSchema", name)
		}
	}
	var tree struct {
		Definitions map[string]any `json:"definitions"`
	}
	if json.Unmarshal(schemas["shapes-tree"], &tree) != nil || tree.Definitions["pet"] == nil {
		t.Errorf("shapes-tree: outputSchema %s, want the definitions its references name at its root", schemas["shapes-tree"])
	}

	type result struct {
		Content           []map[string]any `json:"content"`
		StructuredContent json.RawMessage  `json:"structuredContent"`
		IsError           bool             `json:"isError"`
		Meta              map[string]any   `json:"_meta"`
	}
	for _, tc := range structuredCases {
		args := tc.args
		if args == nil {
			args = map[string]any{}
		}
		var got result
		if e := rpc(t, url, session, "tools/call", map[string]any{"name": tc.tool, "arguments": args}, &got); e != nil {
			t.Errorf("%s: %+v", tc.tool, e)
			continue
		}
		if got.IsError != tc.isError || got.Meta[mcpfront.MetaState] != "completed" {
			t.Errorf("%s: isError %v, _meta %v", tc.tool, got.IsError, got.Meta)
		}
		if tc.structured == "" {
			if got.StructuredContent != nil {
				t.Errorf("%s: structuredContent %s, want none", tc.tool, got.StructuredContent)
			}
		} else {
			var gotValue, wantValue any
			_ = json.Unmarshal(got.StructuredContent, &gotValue)
			_ = json.Unmarshal([]byte(tc.structured), &wantValue)
			if !reflect.DeepEqual(gotValue, wantValue) {
				t.Errorf("%s: structuredContent %s, want %s", tc.tool, got.StructuredContent, tc.structured)
			}
			if schema := schemas[tc.tool]; len(schema) > 0 {
				inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(got.StructuredContent))
				if err != nil {
					t.Fatal(err)
				}
				if err := compileSchema(t, schema).Validate(inst); err != nil {
					t.Errorf("%s: structuredContent %s does not conform to the outputSchema %s: %v", tc.tool, got.StructuredContent, schema, err)
				}
			}
		}
		if wrapped, _ := got.Meta[mcpfront.MetaWrapped].(bool); wrapped != tc.wrapped {
			t.Errorf("%s: _meta %s: %v, want %v", tc.tool, mcpfront.MetaWrapped, got.Meta[mcpfront.MetaWrapped], tc.wrapped)
		}
		if n := len(got.Content); n == 0 || got.Content[n-1]["text"] != tc.text {
			t.Errorf("%s: content %v, want a last text block %s", tc.tool, got.Content, tc.text)
		}
	}
}

// TestTypeScriptSDKStructuredContent: the official TypeScript SDK client
// lists the tools of every shape of structured result (compiling their
// output schemas) and calls each: none is refused by the SDK's schema of a
// result or by its check of structuredContent against the outputSchema.
func TestTypeScriptSDKStructuredContent(t *testing.T) {
	t.Parallel()
	node := nodeWithSDK(t)
	s := startShapes(t)
	_, url := s.front(t)
	cases, err := json.Marshal(structuredCases)
	if err != nil {
		t.Fatal(err)
	}
	runSDKTests(t, node, "testdata/sdk_structured.test.mjs", "TOOLBUS_MCP_URL="+url+"/mcp", "TOOLBUS_MCP_TOKEN="+token, "TOOLBUS_STRUCTURED_CASES="+string(cases))
}

// MarshalJSON gives the cases to the TypeScript test.
func (c structuredCase) MarshalJSON() ([]byte, error) {
	out := map[string]any{"tool": c.tool, "args": c.args, "text": c.text, "isError": c.isError, "wrapped": c.wrapped}
	if c.args == nil {
		out["args"] = map[string]any{}
	}
	if c.structured != "" {
		out["structured"] = json.RawMessage(c.structured)
	}
	return json.Marshal(out)
}
