package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/testenv"
)

func TestHelpPointsToTheConfigurationDocs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(out.String(), "docs/workers.md") || !strings.Contains(out.String(), "-config") {
		t.Fatalf("--help says:\n%s", out.String())
	}
}

// TestStartErrorNamesTheWorkerOnce checks the text of the error of a
// worker whose source does not start: the worker's name comes once, then
// the namespace, the source and the source's own words.
func TestStartErrorNamesTheWorkerOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.NoBuiltinTools = true })
	dir := t.TempDir()
	spec := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(spec, []byte("openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n  /x:\n    get:\n      responses:\n        \"200\":\n          description: ok\n          content:\n            application/json:\n              schema: {$ref: \"#/components/schemas/Missing\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(config, []byte("namespaces:\n  - name: broken\n    sources:\n      - openapi: {name: api, spec: broken.yaml, base_url: \"http://127.0.0.1:1\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(testenv.Context(t), []string{"--server", srv.URL(), "--config", config}, &out)
	if err == nil {
		t.Fatal("the worker started with a broken spec")
	}
	const want = "worker: namespace broken: start source api: openapi: service api: load spec "
	if text := err.Error(); !strings.HasPrefix(text, want) || strings.Count(text, "worker:") != 1 || !strings.Contains(text, "Missing") {
		t.Fatalf("error:\n%s\nwant it to start with %q and name the worker once", text, want)
	}
}
