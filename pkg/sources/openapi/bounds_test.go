package openapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/sources/openapi"
)

// doublingSchemas writes a chain of n object schemas, each with two
// properties referring to the next: inlined, S0 holds 2^n copies of the last.
func doublingSchemas(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "    S%d: {type: object, properties: {a: {$ref: \"#/components/schemas/S%d\"}, b: {$ref: \"#/components/schemas/S%d\"}}}\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "    S%d: {type: string}\n", n)
	return b.String()
}

func writeSpec(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "openapi.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startWithin starts a source and fails the test if Start takes longer than
// limit: the bounds under test are what keeps it short.
func startWithin(t *testing.T, limit time.Duration, cfg openapi.Config) (map[string]bool, error) {
	t.Helper()
	src, err := openapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	began := time.Now()
	tools, err := src.Start(ctx, nil)
	if ctx.Err() != nil {
		t.Fatalf("Start took %v, the test's limit: %v", time.Since(began), err)
	}
	t.Cleanup(func() { src.Stop(context.Background()) })
	methods := map[string]bool{}
	for _, tool := range tools {
		methods[tool.Definition.Method] = len(tool.Definition.OutputSchema) > 0
	}
	return methods, err
}

// TestExponentialSchemaFailsStart gives an operation a request body whose
// references double at each of 40 levels: inlining it would never end.
// Start fails at once naming the operation and the bound.
func TestExponentialSchemaFailsStart(t *testing.T) {
	t.Parallel()
	spec := writeSpec(t, `openapi: 3.0.3
info: {title: t, version: "1"}
servers: [{url: "http://127.0.0.1:1"}]
paths:
  /x:
    post:
      operationId: postX
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/S0"}
      responses: {"200": {description: ok}}
components:
  schemas:
`+doublingSchemas(40))
	_, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: spec})
	if err == nil || !strings.Contains(err.Error(), "POST /x") || !strings.Contains(err.Error(), "more than 10000 schemas") {
		t.Fatalf("Start: %v", err)
	}
}

// TestExponentialOutputSchemaIsLeftOut gives an operation such a response:
// the tool is served without an output schema, as the schema only
// describes the result.
func TestExponentialOutputSchemaIsLeftOut(t *testing.T) {
	t.Parallel()
	spec := writeSpec(t, `openapi: 3.0.3
info: {title: t, version: "1"}
servers: [{url: "http://127.0.0.1:1"}]
paths:
  /x:
    get:
      operationId: getX
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/S0"}
  /y:
    get:
      operationId: getY
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/S37"}
components:
  schemas:
`+doublingSchemas(40))
	tools, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if hasOutput, ok := tools["getX"]; !ok || hasOutput {
		t.Fatalf("getX served %v, with an output schema %v", ok, hasOutput)
	}
	if !tools["getY"] {
		t.Fatal("getY, whose output schema is small, lost it")
	}
}

// TestSpecLargerThanTheLimitFailsStart serves a document larger than
// MaxSpecSize, once in one piece and once split over a $ref to a second
// URL: the limit counts both.
func TestSpecLargerThanTheLimitFailsStart(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	padding := strings.Repeat("x", limit/2+1)
	main := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"http://127.0.0.1:1"}],
"paths":{"/x":{"get":{"operationId":"getX","description":"` + padding + `","responses":{"200":{"$ref":"other.json#/components/responses/ok"}}}}}}`
	other := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{},"components":{"responses":{"ok":{"description":"` + padding + `"}}}}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/one.json":
			fmt.Fprint(w, strings.Repeat(" ", limit)+main)
		case "/main.json":
			fmt.Fprint(w, main)
		case "/other.json":
			fmt.Fprint(w, other)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	for _, path := range []string{"/one.json", "/main.json"} {
		_, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + path, MaxSpecSize: limit})
		if err == nil || !strings.Contains(err.Error(), "larger than 65536 bytes") {
			t.Fatalf("%s: Start: %v", path, err)
		}
	}
	// Under the limit the same document loads.
	if _, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + "/main.json", MaxSpecSize: 4 * limit}); err != nil {
		t.Fatalf("within the limit: %v", err)
	}
}

// TestSpecThatNeverArrivesFailsStart serves a document URL that never
// answers: Start gives up after LoadTimeout rather than hold the worker's
// start forever.
func TestSpecThatNeverArrivesFailsStart(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(release) })
	_, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + "/openapi.json", LoadTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not read within the time allowed") {
		t.Fatalf("Start: %v", err)
	}
}

// TestHeaderValuesOfOneLine refuses configured headers and credentials
// that span lines, which would add headers of their own to every request.
func TestHeaderValuesOfOneLine(t *testing.T) {
	if _, err := openapi.New(openapi.Config{Name: "x", Spec: "s.yaml", Headers: map[string]string{"X-Team": "tools\r\nX-Injected: 1"}}); err == nil ||
		!strings.Contains(err.Error(), "header X-Team: the value holds a control character") {
		t.Errorf("New: %v", err)
	}
	t.Setenv("TOOLBUS_TEST_SPLIT_TOKEN", "t0ken\nX-Injected: 1")
	src, err := openapi.New(openapi.Config{Name: "x", Spec: "s.yaml", Auth: openapi.Auth{BearerEnv: "TOOLBUS_TEST_SPLIT_TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "TOOLBUS_TEST_SPLIT_TOKEN (bearer_env): the value holds a control character") {
		t.Errorf("Start: %v", err)
	}
}

// TestReferenceLoops: a schema that contains itself through a $ref loads,
// cut at the repetition; references that only point at each other fail
// Start at once, naming one of them.
func TestReferenceLoops(t *testing.T) {
	t.Parallel()
	const head = `openapi: 3.0.3
info: {title: t, version: "1"}
servers: [{url: "http://127.0.0.1:1"}]
paths:
  /x:
    post:
      operationId: postX
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/A"}
      responses: {"200": {description: ok}}
components:
  schemas:
`
	tools, err := startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, head+`    A: {type: object, properties: {name: {type: string}, next: {$ref: "#/components/schemas/B"}}}
    B: {type: object, properties: {back: {$ref: "#/components/schemas/A"}}}
`)})
	if err != nil || len(tools) != 1 {
		t.Fatalf("a schema that contains itself: %v %v", tools, err)
	}
	_, err = startWithin(t, 20*time.Second, openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, head+`    A: {$ref: "#/components/schemas/B"}
    B: {$ref: "#/components/schemas/A"}
`)})
	if err == nil || !strings.Contains(err.Error(), "#/components/schemas/") {
		t.Fatalf("references that only point at each other: %v", err)
	}
}
