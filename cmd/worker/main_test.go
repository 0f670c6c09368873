package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
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

// lockedBuffer is a buffer that run writes to while the test reads it.
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

// signedInstallation makes an installation with namespaces demo and ops,
// starts its server and a coordinator, and returns it with the server's
// URL and a worker configuration of both namespaces.
func signedInstallation(t *testing.T) (*setup.Installation, string, string) {
	t.Helper()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{"demo", "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.InstallationServer(t, in)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) {
		c.Conn = testenv.Connect(t, srv.URL(), nats.UserCredentials(in.CredsFile("coordinator")), nats.CustomInboxPrefix("_INBOX_coordinator"))
	})
	config := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(config, []byte("namespaces:\n  - name: demo\n    sources: [{demo: true}]\n  - name: ops\n    sources: [{demo: true}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return in, srv.URL(), config
}

// TestOneWorkerServesNamespacesWithTheirOwnCredentials: with --creds-dir,
// one worker process serves two namespaces of an installation with
// signed identities, each on a connection with its own namespace's
// credentials (a user of one namespace's account reaches only that
// namespace), and calls of both are served.
func TestOneWorkerServesNamespacesWithTheirOwnCredentials(t *testing.T) {
	t.Parallel()
	in, url, config := signedInstallation(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--server", url, "--creds-dir", in.CredsDir(), "--config", config}, &out)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the worker stopped with %v", err)
		}
	}()
	agent := testenv.Connect(t, url, nats.UserCredentials(in.CredsFile("admin")), nats.CustomInboxPrefix("_INBOX_admin"))
	c, err := client.New(agent, client.Options{CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"demo-echo", "ops-echo"} {
		var res *messages.CallResult
		deadline := time.Now().Add(testenv.Patience)
		for {
			res, err = c.Call(testenv.Context(t), tool, map[string]string{"text": tool})
			if err == nil || time.Now().After(deadline) {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("the worker stopped: %v\n%s", err, out.String())
			case <-time.After(50 * time.Millisecond): // the worker registers its tools on its own time
			}
		}
		if err != nil || res.Status != messages.StateCompleted || res.Content[0].Text != tool {
			t.Fatalf("%s: %+v %v\n%s", tool, res, err, out.String())
		}
	}
}

// TestNamespaceWithoutItsCredentialsFailsItsStart: a namespace whose
// credentials are missing, cannot be read, are refused by the server, or
// are another namespace's fails the worker's start with an error naming
// the namespace and the credentials file, without waiting for a
// coordinator's answer that cannot come.
func TestNamespaceWithoutItsCredentialsFailsItsStart(t *testing.T) {
	t.Parallel()
	in, url, config := signedInstallation(t)
	other, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	demoCreds, err := os.ReadFile(in.CredsFile("worker_demo"))
	if err != nil {
		t.Fatal(err)
	}
	otherCreds, err := os.ReadFile(other.CredsFile("worker_ops"))
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]struct {
		ops  []byte // the file worker_ops.creds, none when nil
		want string
	}{
		"missing":                {nil, "no such file"},
		"truncated":              {demoCreds[:200], "truncated"},
		"another namespace's":    {demoCreds, "not namespace ops's"},
		"another installation's": {otherCreds, "the server refused the credentials"},
	} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "worker_demo.creds"), demoCreds, 0o600); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "worker_ops.creds")
			if c.ops != nil {
				if err := os.WriteFile(file, c.ops, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			began := time.Now()
			var out lockedBuffer
			err := run(testenv.Context(t), []string{"--server", url, "--creds-dir", dir, "--config", config}, &out)
			if err == nil {
				t.Fatal("the worker started")
			}
			if text := err.Error(); !strings.Contains(text, "namespace ops") || !strings.Contains(text, file) || !strings.Contains(text, c.want) {
				t.Fatalf("error:\n%s\nwant it to name namespace ops, %s and say %q", text, file, c.want)
			}
			t.Logf("%s: refused after %v: %v", what, time.Since(began).Round(time.Millisecond), err)
		})
	}
}

// TestOneUserForSeveralNamespacesFailsAtOnce: without --creds-dir, one
// connection serves every namespace; a user of one namespace's account
// may not serve another's, and the start fails at once saying so and how
// to give each namespace its own credentials, not after the request for
// the other namespace's consumer timed out.
func TestOneUserForSeveralNamespacesFailsAtOnce(t *testing.T) {
	t.Parallel()
	in, url, config := signedInstallation(t)
	var out lockedBuffer
	err := run(testenv.Context(t), []string{"--server", url, "--creds", in.CredsFile("worker_demo"), "--config", config}, &out)
	if err == nil {
		t.Fatal("the worker started")
	}
	for _, want := range []string{in.CredsFile("worker_demo"), "demo, ops", "--creds-dir", "toolbus.consumers.ops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
