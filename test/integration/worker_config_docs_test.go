package integration

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestWorkerConfiguredFromTheDocs does what docs/workers.md tells a new
// user to: one namespace with the MCP reference server over stdio and an
// HTTP service described by OpenAPI, secrets in ${ENV} and file: header
// values, served by the worker command. It checks what the page promises:
// the service gets the headers, an operation whose operationId holds a dot
// is renamed with a hash suffix and `toolbus tools` prints its original
// name, the renamed tool is called by its method, and the stdio server sees
// the allowlisted and named variables but not the worker's secrets.
func TestWorkerConfiguredFromTheDocs(t *testing.T) {
	// Not parallel: the worker inherits variables the test sets.
	t.Setenv("DOCS_TEST_API_TOKEN", "t0ken-from-env")
	t.Setenv("DOCS_TEST_INHERITED", "passed-on")
	t.Setenv("DOCS_TEST_OTHER_SECRET", "never-passed-on")
	server := everythingServer(t)

	type seen struct{ authorization, apiKey, path string }
	requests := make(chan seen, 4)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.yaml" {
			io.WriteString(w, `openapi: 3.1.0
info: {title: items, version: "1"}
servers: [{url: /api}]
paths:
  /items/{id}:
    get:
      operationId: items.get
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: the item}}
`)
			return
		}
		requests <- seen{r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.URL.Path}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "`+strings.TrimPrefix(r.URL.Path, "/api/items/")+`"}`)
	}))
	t.Cleanup(api.Close)

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "items-key"), []byte("k3y-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "worker.yaml")
	err := os.WriteFile(config, []byte(`
namespaces:
  - name: docs
    sources:
      - mcp:
          name: everything
          command: `+strconv.Quote(server)+`
          args: [stdio]
          env: {DOCS_TEST_SET_BY_FILE: "yes"}
          inherit_env: [DOCS_TEST_INHERITED]
      - openapi:
          name: items
          spec: `+api.URL+`/openapi.yaml
          headers:
            Authorization: "Bearer ${DOCS_TEST_API_TOKEN}"
            X-Api-Key: "file:secrets/items-key"
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}

	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", srv.URL(), "--config", config, "--id", "documented")
	w.WaitLine(t, "worker documented ready")
	t.Cleanup(func() { w.Interrupt(t) })

	// items.get → items_get_ and the first six hex digits of the name's SHA-256.
	const method = "docs-items_get_"
	var (
		out  []byte
		line string
	)
	// The worker has registered its tools; the coordinator's view of the
	// catalog follows them.
	testenv.Eventually(t, "toolbus tools to list the renamed operation", func() bool {
		out, err = exec.Command(testenv.Binary(t, "./cmd/toolbus"), "--server", srv.URL(), "tools").CombinedOutput()
		if err != nil {
			t.Fatalf("toolbus tools: %v\n%s", err, out)
		}
		line = regexp.MustCompile(`(?m)^` + method + `[0-9a-f]{6} .*$`).FindString(string(out))
		return line != ""
	})
	if !strings.HasSuffix(line, "source's name: items.get") {
		t.Fatalf("toolbus tools shows no renamed items.get with its original name:\n%s", out)
	}
	name := strings.Fields(line)[0]

	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, name, map[string]any{"id": "42"})
	if err != nil || res.IsError || !strings.Contains(string(res.StructuredContent), `"42"`) {
		t.Fatalf("%s: %+v %v", name, res, err)
	}
	if got := receive(t, requests, "the request of "+name); got != (seen{"Bearer t0ken-from-env", "k3y-from-file", "/api/items/42"}) {
		t.Fatalf("the service got %+v", got)
	}

	res, err = c.Call(ctx, "docs-get-env", map[string]any{})
	if err != nil || res.IsError {
		t.Fatalf("get-env: %+v %v", res, err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(textOf(res)), &env); err != nil {
		t.Fatalf("get-env answered %q: %v", textOf(res), err)
	}
	if env["DOCS_TEST_INHERITED"] != "passed-on" || env["DOCS_TEST_SET_BY_FILE"] != "yes" || env["PATH"] == "" {
		t.Errorf("the server lacks variables it was given: %v", env)
	}
	for _, secret := range []string{"DOCS_TEST_API_TOKEN", "DOCS_TEST_OTHER_SECRET"} {
		if v, ok := env[secret]; ok {
			t.Errorf("the server inherited %s=%s", secret, v)
		}
	}
}

// TestDevWorkerConfigReplacesDemo: `toolbus dev --worker-config FILE`
// serves the file's namespaces from the dev process, and a namespace named
// demo in the file takes the place of the built-in demo tools.
func TestDevWorkerConfigReplacesDemo(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.yaml" {
			io.WriteString(w, `openapi: 3.0.3
info: {title: greet, version: "1"}
servers: [{url: /}]
paths:
  /greeting:
    get:
      operationId: greet
      responses: {"200": {description: a greeting}}
`)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from the service")
	}))
	t.Cleanup(api.Close)
	config := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(config, []byte("namespaces:\n  - name: demo\n    sources:\n      - openapi: {name: greet, spec: "+api.URL+"/openapi.yaml}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.Binary(t, "./cmd/toolbus")
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir(), "--worker-config", config)
	url := strings.TrimSpace(strings.TrimPrefix(dev.WaitLine(t, "NATS URL:"), "NATS URL:"))
	dev.WaitLine(t, "Press Ctrl-C")
	// What the README says dev prints: the NATS URL (a free port with
	// --port 0), the MCP front's and the console's URLs, example commands;
	// not calls of the demo tools the file's namespace replaced.
	printed := dev.Output()
	for _, want := range []string{"NATS URL: nats://127.0.0.1:", "MCP endpoint: http://127.0.0.1:", "/mcp", "Admin console: http://127.0.0.1:",
		"go run ./cmd/toolbus --server " + url + " tools"} {
		if !strings.Contains(printed, want) {
			t.Errorf("toolbus dev did not print %q:\n%s", want, printed)
		}
	}
	if strings.Contains(printed, "demo-word_count") {
		t.Errorf("toolbus dev suggests a call of a demo tool it does not serve:\n%s", printed)
	}
	if strings.Contains(url, ":4222") {
		t.Errorf("--port 0 took the default port: %s", url)
	}
	t.Cleanup(func() { dev.Interrupt(t) })
	cli := func(args ...string) string {
		// Standard output alone: a call says its ID on standard error.
		out, err := exec.Command(bin, append([]string{"--server", url}, args...)...).Output()
		if err != nil {
			var stderr []byte
			if exit, ok := err.(*exec.ExitError); ok {
				stderr = exit.Stderr
			}
			t.Fatalf("toolbus %v: %v\n%s%s", args, err, out, stderr)
		}
		return string(out)
	}
	var out string
	testenv.Eventually(t, "toolbus tools to list demo-greet", func() bool {
		out = cli("tools")
		return strings.Contains(out, "demo-greet")
	})
	if strings.Contains(out, "demo-word_count") || strings.Contains(out, "demo-echo") {
		t.Fatalf("the built-in demo tools are served beside the file's demo namespace:\n%s", out)
	}
	if got := strings.TrimSpace(cli("call", "demo-greet", "{}")); got != "hello from the service" {
		t.Fatalf("demo-greet printed %q", got)
	}
}

// TestConfiguredHTTPServerAwayAtStart is the restart table's "network MCP
// server unreachable at start", for a worker run from a configuration
// file whose MCP source sets a delivery: the worker starts anyway and
// serves its other namespace; the server's tools, registered on an earlier
// run, are listed unavailable naming the source and refused at submit;
// once the server answers they are served again, without a restart.
func TestConfiguredHTTPServerAwayAtStart(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	port := strconv.Itoa(testenv.FreePort(t))
	startServer := func() *testenv.Process {
		p := testenv.Start(t, "/usr/bin/env", "PORT="+port, server, "streamableHttp")
		p.WaitLine(t, "listening on port "+port)
		return p
	}
	config := filepath.Join(t.TempDir(), "worker.yaml")
	err := os.WriteFile(config, []byte(`
namespaces:
  - name: remote
    sources:
      - mcp:
          name: everything
          url: http://127.0.0.1:`+port+`/mcp
          delivery: at_least_once
  - name: local
    sources:
      - demo: true
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	bin := testenv.Binary(t, "./cmd/worker")
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	operator := testenv.Client(t, srv.URL(), client.Options{}) // lists unavailable tools too
	ctx := testenv.Context(t)
	availability := func(name string) (bool, string) {
		reply, err := operator.ListTools(ctx, messages.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range reply.Tools {
			if e.Name == name {
				return e.Available, e.Unavailable
			}
		}
		return false, "not in the catalog"
	}

	// A first run registers the server's tools.
	first := startServer()
	w := testenv.Start(t, bin, "--server", srv.URL(), "--config", config, "--id", "first")
	w.WaitLine(t, "worker first ready")
	testenv.Eventually(t, "remote-get-sum to be available", func() bool { ok, _ := availability("remote-get-sum"); return ok })
	if err := w.Interrupt(t); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	first.Kill()
	_ = first.Wait(ctx)

	// The server is away when the worker starts again.
	w = testenv.Start(t, bin, "--server", srv.URL(), "--config", config, "--id", "second")
	w.WaitLine(t, "worker second ready")
	t.Cleanup(func() { w.Interrupt(t) })
	if res, err := c.Call(ctx, "local-echo", map[string]any{"text": "still here"}); err != nil || res.IsError {
		t.Fatalf("local-echo: %+v %v", res, err)
	}
	var reason string
	testenv.Eventually(t, "remote-get-sum to be listed unavailable", func() bool {
		var ok bool
		ok, reason = availability("remote-get-sum")
		return !ok && reason != "not in the catalog"
	})
	if !strings.Contains(reason, "source everything is down") {
		t.Fatalf("unavailable for %q, want the source named", reason)
	}
	if _, err := c.Submit(ctx, messages.SubmitRequest{Tool: "remote-get-sum", Arguments: []byte(`{"a":1,"b":2}`)}); !errors.Is(err, messages.ErrToolUnavailable) {
		t.Fatalf("submit while the server is away: %v, want tool_unavailable", err)
	}

	// The server comes; the worker, still running, serves its tools.
	startServer()
	testenv.Eventually(t, "remote-get-sum to be available again", func() bool { ok, _ := availability("remote-get-sum"); return ok })
	res, err := c.Call(ctx, "remote-get-sum", map[string]any{"a": 40, "b": 2})
	if err != nil || res.IsError || textOf(res) != "The sum of 40 and 2 is 42." {
		t.Fatalf("remote-get-sum once the server answers: %+v %v", res, err)
	}
}
