package openapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

// claimsSpec has what docs/workers.md says of operations: names made for
// operations without an operationId (two of which would share one), a
// summary with a description, a body with a readOnly property, and
// responses of several kinds.
const claimsSpec = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pets/{petId}:
    get:
      summary: Get a pet.
      description: The pet with its owner.
      parameters:
        - {name: petId, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
  /items/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
  /items/id:
    get:
      responses: {"200": {description: ok}}
  /pets:
    post:
      operationId: addPet
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                id: {type: string, readOnly: true}
                name: {type: string}
      responses: {"200": {description: ok}}
  /response/{kind}:
    get:
      operationId: respond
      parameters:
        - {name: kind, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
`

func claimsAPI(t *testing.T) *httptest.Server {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/response/text":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("plain words"))
		case "/v1/response/image":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG fake"))
		case "/v1/response/zip":
			w.Header().Set("Content-Type", "application/zip")
			w.Write([]byte("PK\x03\x04\x00\x01"))
		case "/v1/response/huge":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte(strings.Repeat("x", 4<<20+1)))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	return api
}

func TestOperationsAsDocumented(t *testing.T) {
	t.Parallel()
	api := claimsAPI(t)
	spec := writeSpec(t, claimsSpec)
	tools := startSource(t, openapi.Config{Name: "x", Namespace: "x", Spec: spec, BaseURL: api.URL + "/v1"})

	// Without an operationId: method and path; "GET /items/{id}" and
	// "GET /items/id" would both be get_items_id, so both are named by
	// method and path, and renamed: GET_items_id_<hash>.
	pet, ok := tools["get_pets_petId"]
	if !ok || pet.Definition.OriginalName != "GET /pets/{petId}" {
		t.Fatalf("tools %v", keys(tools))
	}
	if _, clash := tools["get_items_id"]; clash {
		t.Fatalf("two operations named get_items_id: %v", keys(tools))
	}
	originals := map[string]bool{}
	for method, tool := range tools {
		if strings.HasPrefix(method, "GET_items_id_") && len(method) == len("GET_items_id_")+6 {
			originals[tool.Definition.OriginalName] = true
		}
	}
	if !originals["GET /items/{id}"] || !originals["GET /items/id"] {
		t.Fatalf("renamed operations %v (tools %v)", originals, keys(tools))
	}
	if pet.Definition.Description != "Get a pet.\n\nThe pet with its owner." {
		t.Errorf("description %q", pet.Definition.Description)
	}

	// A readOnly property is the server's to set: not in the input schema.
	if names := propertyNames(t, tools["addPet"].Definition.InputSchema); strings.Join(names, ",") != "name" {
		t.Errorf("addPet properties %v", names)
	}

	for kind, want := range map[string]messages.ContentBlock{
		"text":  messages.TextBlock("plain words"),
		"image": messages.ImageBlock([]byte("\x89PNG fake"), "image/png"),
		"zip":   {Type: messages.ContentResource, URI: api.URL + "/v1/response/zip", MIMEType: "application/zip", Data: []byte("PK\x03\x04\x00\x01")},
	} {
		res := call(t, tools["respond"], `{"kind":"`+kind+`"}`)
		got, _ := json.Marshal(res.Content)
		wanted, _ := json.Marshal([]messages.ContentBlock{want})
		if res.IsError || string(got) != string(wanted) {
			t.Errorf("%s: %s, want %s", kind, got, wanted)
		}
	}
	// A response larger than 4 MiB is the tool's error.
	res, err := tools["respond"].Handler.Handle(context.Background(), &worker.Call{ID: "c1", Arguments: []byte(`{"kind":"huge"}`), Attempt: 1})
	if errors.Is(err, worker.ErrRetry) || err == nil && !res.IsError || err != nil && !strings.Contains(err.Error(), "larger than 4194304 bytes") {
		t.Errorf("huge response: %+v %v", res, err)
	}
}

// TestRelativeServerNeedsABaseURL: a document read from a file whose
// server URL is relative cannot say where requests go.
func TestRelativeServerNeedsABaseURL(t *testing.T) {
	t.Parallel()
	spec := writeSpec(t, strings.Replace(claimsSpec, "paths:", "servers: [{url: /api}]\npaths:", 1))
	src, err := openapi.New(openapi.Config{Name: "x", Namespace: "x", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), `server URL "/api" is relative and the spec is a file: set a base URL`) {
		t.Fatalf("Start: %v", err)
	}
}

// TestRefusedConnectionIsRetried: nothing reached the service, so the call
// is handed back for another attempt.
func TestRefusedConnectionIsRetried(t *testing.T) {
	t.Parallel()
	addr := testenv.FreeAddress(t)
	tools := startSource(t, openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, claimsSpec), BaseURL: "http://" + addr})
	_, err := tools["respond"].Handler.Handle(context.Background(), &worker.Call{ID: "c1", Arguments: []byte(`{"kind":"text"}`), Attempt: 1})
	if !errors.Is(err, worker.ErrRetry) {
		t.Fatalf("a refused connection: %v, want a retry", err)
	}
}

func keys(m map[string]worker.Tool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestUnsetCredentialFailsStart: an auth variable that is not set stops
// the start, naming it.
func TestUnsetCredentialFailsStart(t *testing.T) {
	t.Parallel()
	for _, auth := range []openapi.Auth{{BearerEnv: "TOOLBUS_TEST_NEVER_SET"}, {APIKeyEnv: "TOOLBUS_TEST_NEVER_SET", Query: "key"}} {
		src, err := openapi.New(openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, claimsSpec), BaseURL: "http://127.0.0.1:1", Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "auth: environment variable TOOLBUS_TEST_NEVER_SET") || !strings.Contains(err.Error(), "is not set") {
			t.Errorf("%+v: Start: %v", auth, err)
		}
	}
}
