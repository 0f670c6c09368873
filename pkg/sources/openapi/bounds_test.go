package openapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
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

// exponentialAPI is a document whose operation postX has a request body
// whose references double at each of 40 levels (inlining it would never
// end), and, with small, an operation postY whose body is small.
func exponentialAPI(small bool) string {
	doc := `{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {
  "/x": {"post": {"operationId": "postX", "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}},
    "responses": {"200": {"description": "ok"}}}}`
	if small {
		doc += `,
  "/y": {"post": {"operationId": "postY", "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}},
    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}}`
	}
	doc += `}, "components": {"schemas": {`
	for i := range 40 {
		doc += fmt.Sprintf(`"S%d": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/S%d"}, "b": {"$ref": "#/components/schemas/S%d"}}}, `, i, i+1, i+1)
	}
	return doc + `"S40": {"type": "string"}}}}`
}

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

// TestExponentialSchemaSkipsItsOperation starts a worker on an API with
// such an operation beside a small one, and on an API with only such an
// operation: the start succeeds within a bound and the small operation is
// called; the other is not served (a call of it is tool_not_found), and the
// log names it and says why, and says of the second API that it serves no
// tool.
func TestExponentialSchemaSkipsItsOperation(t *testing.T) {
	t.Parallel()
	api, requests := petsAPI(t, exponentialAPI(true))
	onlyBad, _ := petsAPI(t, exponentialAPI(false))
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	mixed, err := openapi.New(openapi.Config{Name: "mixed", Namespace: "x", Spec: api.URL + "/openapi.json", BaseURL: api.URL, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := openapi.New(openapi.Config{Name: "bad", Namespace: "x", Spec: onlyBad.URL + "/openapi.json", BaseURL: onlyBad.URL, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.NoBuiltinTools = true })
	began := time.Now()
	testenv.Worker(t, srv.URL(), worker.Config{Logger: logger}, worker.Namespace{Name: "x", Sources: []worker.Source{mixed, bad}})
	if d := time.Since(began); d > testenv.Patience {
		t.Fatalf("the worker took %v to start", d)
	}
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "x-postY", map[string]any{"name": "small"})
	if err != nil || res.IsError || res.Status != messages.StateCompleted {
		t.Fatalf("x-postY: %+v %v", res, err)
	}
	if req := <-requests; req.method != http.MethodPost || req.path != "/y" {
		t.Fatalf("the API got %s %s", req.method, req.path)
	}
	if _, err := c.Call(ctx, "x-postX", map[string]any{}); !errors.Is(err, messages.ErrToolNotFound) {
		t.Fatalf("x-postX: %v, want tool_not_found", err)
	}
	logged := log.String()
	skips := 0
	for _, line := range strings.Split(logged, "\n") {
		if strings.Contains(line, `msg="operation skipped: it is not served as a tool"`) {
			skips++
			if !strings.Contains(line, "tool=x-postX") || !strings.Contains(line, `operation="POST /x"`) || !strings.Contains(line, "more than 10000 schemas") {
				t.Errorf("the skip's line does not name the tool, the operation and the bound: %s", line)
			}
		}
	}
	if skips != 2 {
		t.Errorf("%d operations logged as skipped, want postX of each API:\n%s", skips, logged)
	}
	if !strings.Contains(logged, "level=ERROR msg=\"the API serves no tool: every operation was skipped\" openapi_service=bad") || strings.Contains(logged, "openapi_service=mixed skipped=") {
		t.Errorf("the log does not say that the bad API alone serves no tool:\n%s", logged)
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
	tools, err := startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: spec})
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
		_, err := startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + path, MaxSpecSize: limit})
		if err == nil || !strings.Contains(err.Error(), "larger than 65536 bytes") {
			t.Fatalf("%s: Start: %v", path, err)
		}
	}
	// Under the limit the same document loads.
	if _, err := startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + "/main.json", MaxSpecSize: 4 * limit}); err != nil {
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
	_, err := startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: api.URL + "/openapi.json", LoadTimeout: 200 * time.Millisecond})
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
	tools, err := startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, head+`    A: {type: object, properties: {name: {type: string}, next: {$ref: "#/components/schemas/B"}}}
    B: {type: object, properties: {back: {$ref: "#/components/schemas/A"}}}
`)})
	if err != nil || len(tools) != 1 {
		t.Fatalf("a schema that contains itself: %v %v", tools, err)
	}
	_, err = startWithin(t, testenv.Patience, openapi.Config{Name: "x", Namespace: "x", Spec: writeSpec(t, head+`    A: {$ref: "#/components/schemas/B"}
    B: {$ref: "#/components/schemas/A"}
`)})
	if err == nil || !strings.Contains(err.Error(), "#/components/schemas/") {
		t.Fatalf("references that only point at each other: %v", err)
	}
}
