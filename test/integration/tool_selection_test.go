package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/internal/service/workerconfig"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// lockedBuffer is a log the worker writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestToolSelectionFromTheConfiguration: a worker's configuration selects
// the tools of the MCP reference server and of an HTTP API by name pattern
// and tag, renames tools and sets their titles, descriptions and tags. The
// catalog (tools.list), discovery and the MCP front show exactly the
// selected tools under their configured names; a renamed tool is called by
// its new name and reaches the source's tool; a tool left out is no tool;
// a pattern that matches nothing is logged.
func TestToolSelectionFromTheConfiguration(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/openapi.yaml":
			io.WriteString(w, `openapi: 3.0.3
info: {title: pets, version: "1"}
paths:
  /pets:
    get:
      operationId: listPets
      summary: Lists the pets of the shop.
      responses:
        "200":
          description: the pets
          content:
            application/json:
              schema: {type: array, items: {type: object, properties: {name: {type: string}}}}
    post:
      operationId: createPet
      summary: Adds a pet to the shop.
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {"201": {description: created}}
  /pets/{id}:
    delete:
      operationId: deletePet
      summary: Removes a pet from the shop.
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {"204": {description: gone}}
`)
		case r.URL.Path == "/pets" && r.Method == http.MethodGet:
			io.WriteString(w, `[{"name":"Rex"}]`)
		default:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"name":"new"}`)
		}
	}))
	t.Cleanup(api.Close)

	file := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(file, []byte(`
namespaces:
  - name: kit
    sources:
      - mcp:
          name: everything
          command: `+strconv.Quote(server)+`
          args: [stdio]
          include: {names: ["get-*", echo, simulate-research-query]}
          exclude: {names: [get-env, "nosuch-*"]}
          tools:
            get-sum: {name: add, title: Add two numbers, description: Answers the sum of the numbers a and b., tags: [arithmetic]}
            echo: {description: "Repeats the message it is given, word for word."}
      - openapi:
          name: pets
          spec: `+api.URL+`/openapi.yaml
          base_url: `+api.URL+`
          exclude: {tags: [destructive]}
          tools:
            listPets: {name: pets_list, title: Pets, tags: [inventory]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := workerconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	nss, err := cfg.WorkerNamespaces(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, nss...)
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)

	want := []string{"kit-add", "kit-createPet", "kit-echo", "kit-get-annotated-message", "kit-get-resource-links",
		"kit-get-resource-reference", "kit-get-structured-content", "kit-get-tiny-image", "kit-pets_list", "kit-simulate-research-query"}
	tools := map[string]messages.ToolEntry{}
	testenv.Eventually(t, "the coordinator to list the worker's tools", func() bool {
		list, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "kit"})
		if err != nil {
			t.Fatal(err)
		}
		clear(tools)
		for _, e := range list.Tools {
			tools[e.Name] = e
		}
		return len(tools) >= len(want)
	})
	if got := slices.Sorted(maps.Keys(tools)); !slices.Equal(got, want) {
		t.Fatalf("the catalog lists\n%v\nwant\n%v", got, want)
	}
	add := tools["kit-add"]
	if add.OriginalName != "get-sum" || add.Title != "Add two numbers" || add.Description != "Answers the sum of the numbers a and b." ||
		!add.Metadata.HasTag("arithmetic") || !add.Metadata.HasTag(messages.TagReadOnly) || add.Source.Name != "everything" {
		t.Errorf("kit-add in the catalog: %+v", add)
	}
	if echo := tools["kit-echo"]; echo.Description != "Repeats the message it is given, word for word." || echo.OriginalName != "" {
		t.Errorf("kit-echo in the catalog: %+v", echo)
	}
	if pets := tools["kit-pets_list"]; pets.OriginalName != "listPets" || pets.Title != "Pets" || !pets.Metadata.HasTag("inventory") || pets.Description != "Lists the pets of the shop." {
		t.Errorf("kit-pets_list in the catalog: %+v", pets)
	}

	// Deliveries follow the sources' rules: the server's hints
	// (idempotentHint: false is at most once), the HTTP methods (POST is).
	for name, d := range map[string]messages.Delivery{
		"kit-add": messages.DeliveryAtLeastOnce, "kit-simulate-research-query": messages.DeliveryAtMostOnce,
		"kit-pets_list": messages.DeliveryAtLeastOnce, "kit-createPet": messages.DeliveryAtMostOnce,
	} {
		if tools[name].Delivery != d {
			t.Errorf("%s: delivery %q, want %q", name, tools[name].Delivery, d)
		}
	}

	// The renamed tools are called by their new names and reach the
	// source's tools.
	res, err := c.Call(ctx, "kit-add", map[string]any{"a": 2, "b": 3})
	if err != nil || res.IsError || textOf(res) != "The sum of 2 and 3 is 5." {
		t.Fatalf("kit-add: %+v %v", res, err)
	}
	res, err = c.Call(ctx, "kit-pets_list", map[string]any{})
	if err != nil || res.IsError || string(res.StructuredContent) != `[{"name":"Rex"}]` {
		t.Fatalf("kit-pets_list: %+v %v", res, err)
	}
	for _, name := range []string{"kit-get-sum", "kit-get-env", "kit-deletePet", "kit-listPets", "kit-toggle-simulated-logging"} {
		if _, err := c.Submit(ctx, messages.SubmitRequest{Tool: name, Arguments: messages.JSON(`{}`)}); messages.CodeOf(err) != messages.CodeToolNotFound {
			t.Errorf("%s: %v, want tool_not_found", name, err)
		}
	}

	// Discovery finds a tool by its configured description, under its
	// new name, and never a tool left out.
	testenv.Eventually(t, "discovery to find kit-add", func() bool {
		r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "sum of the numbers arithmetic"})
		return err == nil && len(r.Hits) > 0 && r.Hits[0].Name == "kit-add"
	})
	for _, query := range []string{"environment variables", "remove a pet delete", "get-sum"} {
		r, err := c.Discover(ctx, messages.DiscoverRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Hits {
			if !slices.Contains(want, h.Name) {
				t.Errorf("discovery of %q finds %s, which the configuration leaves out", query, h.Name)
			}
		}
	}

	// The MCP front lists the same tools, with their titles.
	front, err := mcpfront.New(mcpfront.Config{Client: testenv.Client(t, srv.URL(), client.Options{}),
		Tokens: map[string]mcpfront.Identity{"token-of-tester": {Agent: "tester"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(front.Handler())
	t.Cleanup(hs.Close)
	tr, err := transport.NewStreamableHTTP(hs.URL+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer token-of-tester"}))
	if err != nil {
		t.Fatal(err)
	}
	mc := mcpclient.NewClient(tr)
	if err := mc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	if _, err := mc.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{ClientInfo: mcpgo.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	listed, err := mc.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mcpNames []string
	for _, tool := range listed.Tools {
		if strings.HasPrefix(tool.Name, "kit-") {
			mcpNames = append(mcpNames, tool.Name)
		}
		if tool.Name == "kit-add" && (tool.Title != "Add two numbers" || tool.Description != "Answers the sum of the numbers a and b.") {
			t.Errorf("kit-add in tools/list: %+v", tool)
		}
	}
	if slices.Sort(mcpNames); !slices.Equal(mcpNames, want) {
		t.Errorf("the MCP front lists %v, want %v", mcpNames, want)
	}
	called, err := mc.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "kit-add", Arguments: map[string]any{"a": 1, "b": 1}}})
	if err != nil || called.IsError || len(called.Content) == 0 {
		t.Fatalf("kit-add through the MCP front: %+v %v", called, err)
	}
	if text, _ := called.Content[0].(mcpgo.TextContent); text.Text != "The sum of 1 and 1 is 2." {
		data, _ := json.Marshal(called)
		t.Errorf("kit-add through the MCP front: %s", data)
	}

	if !strings.Contains(logs.String(), `msg="a selection of the configuration matches no tool the source lists" source=everything exclude="names nosuch-*"`) {
		t.Errorf("no warning of the pattern that matches nothing:\n%s", logs.String())
	}
}
