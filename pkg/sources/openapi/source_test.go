package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

// swaggerPets is a Swagger 2.0 document without a host: requests go to
// the host that serves it, under its base path.
const swaggerPets = `{
  "swagger": "2.0",
  "info": {"title": "pets", "version": "1"},
  "basePath": "/api",
  "consumes": ["application/json"],
  "produces": ["application/json"],
  "paths": {
    "/pets/{id}": {
      "put": {
        "operationId": "updatePet",
        "summary": "Replace a pet.",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "type": "string", "description": "The pet's ID"},
          {"name": "pet", "in": "body", "required": true, "schema": {"$ref": "#/definitions/Pet"}}
        ],
        "responses": {"200": {"description": "the pet", "schema": {"$ref": "#/definitions/Pet"}}}
      }
    }
  },
  "definitions": {
    "Pet": {
      "type": "object",
      "required": ["name"],
      "properties": {
        "zeta": {"type": "string"},
        "name": {"type": "string"},
        "id": {"type": "string", "description": "The pet's own ID"},
        "tag": {"type": "string"}
      }
    }
  }
}`

// received is a request as the API saw it.
type received struct {
	method, path string
	header       http.Header
	body         []byte
}

// petsAPI serves the Swagger document at /swagger.json and answers every
// other request with its body, passing the request on.
func petsAPI(t *testing.T, document string) (*httptest.Server, <-chan received) {
	t.Helper()
	requests := make(chan received, 16)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/swagger.json" || r.URL.Path == "/openapi.json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, document)
			return
		}
		body, _ := io.ReadAll(r.Body)
		requests <- received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(api.Close)
	return api, requests
}

func startSource(t *testing.T, cfg openapi.Config) map[string]worker.Tool {
	t.Helper()
	src, err := openapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := src.Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Stop(context.Background()) })
	out := map[string]worker.Tool{}
	for _, tool := range tools {
		out[tool.Definition.Method] = tool
	}
	return out
}

// propertyNames lists the names of a JSON schema's properties in the order
// the schema's text has them.
func propertyNames(t *testing.T, schema []byte) []string {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(top["properties"]))
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

func call(t *testing.T, tool worker.Tool, args string) *worker.Result {
	t.Helper()
	res, err := tool.Handler.Handle(context.Background(), &worker.Call{ID: "c1", Tool: tool.Definition.Method, Arguments: []byte(args), Attempt: 1})
	if err != nil {
		t.Fatalf("%s: %v", tool.Definition.Method, err)
	}
	return res
}

// TestSwagger2Document serves the operation of a Swagger 2.0 document
// through a worker and calls it as an agent would.
func TestSwagger2Document(t *testing.T) {
	t.Parallel()
	api, requests := petsAPI(t, swaggerPets)
	src, err := openapi.New(openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/swagger.json", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.NoBuiltinTools = true })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "pets", Sources: []worker.Source{src}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "pets-updatePet", map[string]any{"id": "p 1", "body_id": "7", "name": "Rex", "zeta": "z"})
	if err != nil {
		t.Fatal(err)
	}
	req := <-requests
	if req.method != http.MethodPut || req.path != "/api/pets/p 1" {
		t.Fatalf("the API got %s %s", req.method, req.path)
	}
	var body map[string]any
	if err := json.Unmarshal(req.body, &body); err != nil || body["id"] != "7" || body["name"] != "Rex" || body["zeta"] != "z" {
		t.Fatalf("body %s (%v)", req.body, err)
	}
	var echoed map[string]any
	if res.IsError || res.Status != messages.StateCompleted || json.Unmarshal(res.StructuredContent, &echoed) != nil || echoed["name"] != "Rex" {
		t.Fatalf("result %+v", res)
	}
}

func TestNullBodyFieldIsSent(t *testing.T) {
	t.Parallel()
	api, requests := petsAPI(t, swaggerPets)
	tools := startSource(t, openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/swagger.json"})
	call(t, tools["updatePet"], `{"id": "1", "name": "Rex", "tag": null}`)
	req := <-requests
	var body map[string]any
	if err := json.Unmarshal(req.body, &body); err != nil {
		t.Fatal(err)
	}
	if tag, sent := body["tag"]; !sent || tag != nil {
		t.Fatalf("body %s: want \"tag\": null", req.body)
	}
	if _, sent := body["zeta"]; sent {
		t.Fatalf("body %s: an argument left out was sent", req.body)
	}
}

func TestPropertiesKeepDeclarationOrder(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	err := os.WriteFile(spec, []byte(`
openapi: 3.0.3
info: {title: t, version: "1"}
servers: [{url: "http://127.0.0.1:1"}]
paths:
  /things:
    post:
      operationId: makeThing
      parameters:
        - {name: zone, in: query, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Thing"}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Thing"}
components:
  schemas:
    Thing:
      type: object
      properties:
        size: {type: integer}
        colour:
          type: object
          properties:
            red: {type: integer}
            green: {type: integer}
            blue: {type: integer}
        age: {type: integer}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	def := startSource(t, openapi.Config{Name: "things", Namespace: "things", Spec: spec})["makeThing"].Definition
	if got := propertyNames(t, def.InputSchema); !slices.Equal(got, []string{"zone", "size", "colour", "age"}) {
		t.Errorf("input properties %v", got)
	}
	if got := propertyNames(t, def.OutputSchema); !slices.Equal(got, []string{"size", "colour", "age"}) {
		t.Errorf("output properties %v", got)
	}
	var input struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(def.InputSchema, &input); err != nil {
		t.Fatal(err)
	}
	if got := propertyNames(t, input.Properties["colour"]); !slices.Equal(got, []string{"red", "green", "blue"}) {
		t.Errorf("nested properties %v", got)
	}
}

func TestRenamedFieldDescription(t *testing.T) {
	t.Parallel()
	api, _ := petsAPI(t, swaggerPets)
	def := startSource(t, openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/swagger.json"})["updatePet"].Definition
	if got := propertyNames(t, def.InputSchema); !slices.Equal(got, []string{"id", "zeta", "name", "body_id", "tag"}) {
		t.Errorf("properties %v", got)
	}
	var schema struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(def.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	want := `The pet's own ID. Sent as the body property "id"; renamed because "id" is the path parameter "id".`
	if got := schema.Properties["body_id"].Description; got != want {
		t.Errorf("body_id description\n got %q\nwant %q", got, want)
	}
	if !strings.HasPrefix(schema.Properties["id"].Description, "The pet's ID") {
		t.Errorf("id description %q", schema.Properties["id"].Description)
	}
}

func TestConfiguredHeaders(t *testing.T) {
	t.Parallel()
	api, requests := petsAPI(t, swaggerPets)
	tools := startSource(t, openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/swagger.json", Headers: map[string]string{"X-Team": "tools"}})
	call(t, tools["updatePet"], `{"id": "1", "name": "Rex"}`)
	if req := <-requests; req.header.Get("X-Team") != "tools" {
		t.Fatalf("headers %v", req.header)
	}
}

// TestWorkerRegistersAllOrNothing starts a worker whose second namespace
// has a broken spec: the start fails and the first namespace's tools are
// not left in the catalog.
func TestWorkerRegistersAllOrNothing(t *testing.T) {
	t.Parallel()
	api, _ := petsAPI(t, swaggerPets)
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	err := os.WriteFile(broken, []byte(`
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    get:
      operationId: getX
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Missing"}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.NoBuiltinTools = true })
	good, err := openapi.New(openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/swagger.json"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := openapi.New(openapi.Config{Name: "broken", Namespace: "broken", Spec: broken, BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Conn: testenv.Connect(t, srv.URL()), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []worker.Namespace{{Name: "pets", Sources: []worker.Source{good}}, {Name: "broken", Sources: []worker.Source{bad}}} {
		if err := w.Serve(ns); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testenv.Context(t)
	if err := w.Start(ctx); err == nil || !strings.Contains(err.Error(), "Missing") {
		t.Fatalf("worker start: %v", err)
	}
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "toolbus_catalog")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "tools.pets.>")
	if err != nil {
		t.Fatal(err)
	}
	for key := range keys.Keys() {
		t.Errorf("%s is in the catalog after a failed start", key)
	}
}
