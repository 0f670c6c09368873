package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Written beside it and renamed, as editors save, so that the
	// coordinator's watcher never reads a file half written.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func namesOf(reply *messages.ListToolsReply) []string {
	var out []string
	for _, e := range reply.Tools {
		out = append(out, e.Name)
	}
	return out
}

func catalogTools() []worker.Tool {
	tool := func(method string) worker.Tool {
		return worker.Func(method, "Catalog "+method+".", func(ctx context.Context, in struct {
			Query string `json:"query,omitempty"`
		}) (string, error) {
			return method + ":" + in.Query, nil
		})
	}
	return []worker.Tool{tool("lookup"), tool("lookupAll"), tool("details"), tool("help")}
}

func TestExposureThroughTheCoordinator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bundles", "catalog.yaml"), `
id: catalog
title: Catalog
match:
  - name: "catalog:lookup"
    tier: critical
  - name: "catalog:details"
    tier: onDemand
  - name: "catalog:help"
    tier: onDemand
    alwaysInclude: true
`)
	writeFile(t, filepath.Join(dir, "bundles", "text.yaml"), `
id: text
match:
  - name: "demo/*"
    exclude: ["demo:sleep"]
  - name: "demo:sleep"
    approval: {mode: prompt, message: "Sleeping takes a while"}
    tier: onDemand
`)
	writeFile(t, filepath.Join(dir, "agents", "support.yaml"), `
id: support
tool:
  bundles: [catalog, text]
  items:
    - name: "demo:sha256"
      exclude: []
`)
	srv := testenv.Server(t)
	coordCfg := func(cfg *coordinator.Config) {
		cfg.WorkspaceDir = dir
		cfg.WorkspaceReloadInterval = 20 * time.Millisecond
	}
	testenv.Coordinator(t, srv.URL(), coordCfg)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)

	list := func(req messages.ListToolsRequest) *messages.ListToolsReply {
		t.Helper()
		req.Agent = "support"
		reply, err := c.ListTools(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	admin := testenv.Client(t, srv.URL(), client.Options{})
	testenv.Eventually(t, "the coordinator to see the workers' tools", func() bool {
		r, err := admin.ListTools(ctx, messages.ListToolsRequest{})
		n := 0
		for _, e := range r.Tools {
			if e.Available && (e.Namespace == "catalog" || e.Namespace == demo.Name) {
				n++
			}
		}
		return err == nil && n == 8
	})
	// No intake: critical, alwaysInclude and base tools; onDemand hidden.
	got := namesOf(list(messages.ListToolsRequest{Turn: "turn-a"}))
	want := []string{"catalog-help", "catalog-lookup", "demo-echo", "demo-sha256", "demo-word_count"}
	if !slices.Equal(got, want) {
		t.Fatalf("no intake: %v, want %v", got, want)
	}
	// An empty intake drops the base tools.
	got = namesOf(list(messages.ListToolsRequest{Intake: &messages.IntakeSelection{}}))
	if !slices.Equal(got, []string{"catalog-help", "catalog-lookup"}) {
		t.Fatalf("empty intake: %v", got)
	}
	// An exact intake selection promotes an onDemand tool; selecting its bundle does not.
	got = namesOf(list(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Bundles: []string{"catalog"}}}))
	if slices.Contains(got, "catalog-details") {
		t.Fatalf("bundle selection promoted details: %v", got)
	}
	got = namesOf(list(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Tools: []string{"catalog:details"}}}))
	if !slices.Equal(got, []string{"catalog-details", "catalog-help", "catalog-lookup"}) {
		t.Fatalf("exact intake: %v", got)
	}

	// Activation promotes for the rest of the turn; it survives a new coordinator.
	if _, err := c.Activate(ctx, "turn-a", "catalog-details", "demo-sleep"); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), coordCfg)
	reply := list(messages.ListToolsRequest{Turn: "turn-a", Format: "anthropic", Think: true})
	got = namesOf(reply)
	if !slices.Contains(got, "catalog-details") || !slices.Contains(got, "demo-sleep") {
		t.Fatalf("after activation: %v", got)
	}
	for i, e := range reply.Tools {
		if e.Name == "demo-sleep" && (e.Exposure == nil || e.Exposure.Approval != "prompt" || e.Exposure.Tier != "onDemand") {
			t.Fatalf("demo-sleep exposure %+v", e.Exposure)
		}
		var schema struct {
			Name        string `json:"name"`
			InputSchema struct {
				Properties map[string]any `json:"properties"`
				Required   []string       `json:"required"`
			} `json:"input_schema"`
		}
		if err := json.Unmarshal(reply.Schemas[i], &schema); err != nil || schema.Name != e.Name {
			t.Fatalf("schema %d: %s (%v)", i, reply.Schemas[i], err)
		}
		if _, ok := schema.InputSchema.Properties["thought"]; !ok {
			t.Fatalf("schema of %s has no thought: %s", e.Name, reply.Schemas[i])
		}
	}
	// The model's thought is removed before the call runs.
	res, err := c.Call(ctx, "demo-echo", map[string]string{"thought": "the user wants an echo", "text": "hi"})
	if err != nil || res.Content[0].Text != "hi" {
		t.Fatalf("call with a thought: %+v %v", res, err)
	}

	// A tool that leaves the catalog is dropped from the turn without an error.
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	kv, _ := js.KeyValue(ctx, names.CatalogBucket())
	if err := kv.Delete(ctx, "tools.catalog.details"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "details to leave the view", func() bool {
		r := list(messages.ListToolsRequest{Turn: "turn-a"})
		return !slices.Contains(namesOf(r), "catalog-details")
	})
	turn, err := c.Turn(ctx, "turn-a")
	if err != nil && !errors.Is(err, messages.ErrTurnNotFound) {
		t.Fatal(err)
	}
	if turn != nil && turn.State != nil && slices.Contains(turn.State.Activated, "catalog-details") {
		t.Fatalf("vanished tool kept in the turn: %+v", turn.State)
	}

	// Another agent cannot use this turn.
	if _, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: "intruder", Turn: "turn-a"}); !errors.Is(err, &messages.Error{Code: messages.CodeConflict}) {
		t.Fatalf("another agent's use of the turn: %v", err)
	}

	// Reloading the workspace takes effect without a restart: exclude echo.
	writeFile(t, filepath.Join(dir, "agents", "support.yaml"), `
id: support
tool:
  bundles: [catalog, text]
  items:
    - name: "demo:*"
      exclude: ["demo:echo"]
    - name: "demo:zzz_none"
      exclude: []
`)
	writeFile(t, filepath.Join(dir, "bundles", "text.yaml"), `
id: text
match:
  - name: "demo/*"
    exclude: ["demo:echo", "demo:sleep"]
`)
	testenv.Eventually(t, "the reloaded workspace", func() bool {
		// word_count stays: a list without the demo namespace at all (its
		// worker's heartbeat late on a busy machine) is not the reload.
		// Two coordinators serve the lists (the second started above), each
		// reloading on its own: the reload is seen once 20 lists in a row,
		// which the server spreads over both at random, all show it.
		for range 20 {
			names := namesOf(list(messages.ListToolsRequest{}))
			if slices.Contains(names, "demo-echo") || !slices.Contains(names, "demo-word_count") {
				return false
			}
		}
		return true
	})
	// An invalid workspace is refused and the previous one stays.
	writeFile(t, filepath.Join(dir, "bundles", "broken.yaml"), "id: broken\nmatch:\n  - name: \"demo:*\"\n    tier: sometimes\n")
	if got := namesOf(list(messages.ListToolsRequest{})); slices.Contains(got, "demo-echo") || !slices.Contains(got, "catalog-lookup") {
		t.Fatalf("after an invalid edit: %v", got)
	}
}

func TestExcludedToolIsNotCallable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents", "narrow.yaml"), `
id: narrow
tool:
  items:
    - name: "demo"
      exclude: ["demo:sha256"]
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "narrow"})
	ctx := testenv.Context(t)
	if _, err := c.Call(ctx, "demo-sha256", map[string]string{"text": "x", "api_key": "sk-live-123"}); !errors.Is(err, &messages.Error{Code: messages.CodeNotAdmitted}) {
		t.Fatalf("excluded tool: %v", err)
	}
	// The refusal is in the audit log by the time it is answered, its
	// arguments redacted as a denial's are. (A copy of the submit that
	// the SDK sent before the answer came is refused, and recorded, too.)
	page, err := c.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditNotAdmitted})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("the refused call is not audited: %+v %v", page, err)
	}
	for _, rec := range page.Records {
		var args map[string]string
		if err := json.Unmarshal(rec.Arguments, &args); err != nil {
			t.Fatalf("record's arguments %s: %v", rec.Arguments, err)
		}
		if rec.Decision != messages.AuditNotAdmitted || rec.Tool != "demo-sha256" || rec.Agent != "narrow" || rec.CallID == "" ||
			rec.Reason != `the exposure rules of agent "narrow" exclude demo-sha256` || args["text"] != "x" || args["api_key"] != "[redacted]" {
			t.Fatalf("record %+v, arguments %v", rec, args)
		}
	}
	if _, err := c.Activate(ctx, "t1", "demo-sha256"); !errors.Is(err, &messages.Error{Code: messages.CodeNotAdmitted}) {
		t.Fatalf("activating an excluded tool: %v", err)
	}
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "ok"}); err != nil || res.IsError {
		t.Fatalf("admitted tool: %+v %v", res, err)
	}
	if _, err := c.ListTools(ctx, messages.ListToolsRequest{Format: "cobol"}); !errors.Is(err, &messages.Error{Code: messages.CodeBadRequest}) {
		t.Fatalf("unknown format: %v", err)
	}
}
