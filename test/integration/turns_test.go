package integration

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// rawRequest sends a request to a coordinator endpoint in JSON, as a client
// without the SDK does, and returns the reply's body and headers.
func rawRequest(t *testing.T, nc *nats.Conn, endpoint string, body any) ([]byte, nats.Header) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("toolbus.api." + endpoint)
	msg.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
	msg.Data = data
	reply, err := nc.RequestMsg(msg, testenv.Patience)
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	return reply.Data, reply.Header
}

// TestTurnsGetAnswersTheSavedState: turns.get returns the turn's saved
// state, also of a turn that has state but no calls; a turn with neither is
// turn_not_found.
func TestTurnsGetAnswersTheSavedState(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)

	testenv.Eventually(t, "the tools to be in the catalog", func() bool {
		_, err := c.Activate(ctx, "t-state", "catalog-details")
		return err == nil
	})
	info, err := c.Turn(ctx, "t-state")
	if err != nil {
		t.Fatalf("a turn with state and no calls: %v", err)
	}
	if info.State == nil || info.State.Agent != "support" || !slices.Equal(info.State.Activated, []string{"catalog-details"}) || len(info.Calls) != 0 {
		t.Fatalf("turns.get = %+v (state %+v)", info, info.State)
	}
	// JSON clients see the state and an empty list of calls.
	body, h := rawRequest(t, testenv.Connect(t, srv.URL()), messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: "t-state"})
	if h.Get("Nats-Service-Error") != "" || !strings.Contains(string(body), `"state":{`) || !strings.Contains(string(body), `"calls":[]`) {
		t.Fatalf("turns.get in JSON: %s %v", body, h)
	}

	if _, err := c.Call(ctx, "catalog-details", map[string]any{"query": "x"}, client.WithTurn("t-state")); err != nil {
		t.Fatal(err)
	}
	info, err = c.Turn(ctx, "t-state")
	if err != nil || info.State == nil || len(info.State.Activated) != 1 || len(info.Calls) != 1 {
		t.Fatalf("turns.get with a call: %+v %v", info, err)
	}

	if _, err := c.Turn(ctx, "t-never"); messages.CodeOf(err) != messages.CodeTurnNotFound {
		t.Fatalf("a turn that does not exist: %v", err)
	}
}

// TestFastCallsHaveTheirStartTime: a call that ends before its worker
// records a started event reports when the worker began it in JSON, never
// the zero time; a call not started yet has no started_at at all.
func TestFastCallsHaveTheirStartTime(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	// A start delay longer than the test makes sure no started event is stored.
	testenv.Worker(t, srv.URL(), worker.Config{StartDelay: time.Hour}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)
	before := time.Now()
	res, err := c.Call(ctx, "catalog-details", map[string]any{"query": "x"}, client.WithTurn("t-fast"))
	if err != nil {
		t.Fatal(err)
	}
	nc := testenv.Connect(t, srv.URL())
	for _, req := range []struct {
		endpoint string
		body     any
	}{
		{messages.EndpointCallsGet, messages.GetCallRequest{CallID: res.CallID}},
		{messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: "t-fast"}},
	} {
		body, _ := rawRequest(t, nc, req.endpoint, req.body)
		if strings.Contains(string(body), "0001-01-01") {
			t.Errorf("%s shows the zero time: %s", req.endpoint, body)
		}
	}
	info, err := c.Get(ctx, res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if info.StartedAt.Before(before.Add(-time.Second)) || info.StartedAt.After(info.Result.FinishedAt) || !info.StartedAt.Equal(info.Result.StartedAt) {
		t.Errorf("started_at %v; the result says %v, finished %v", info.StartedAt, info.Result.StartedAt, info.Result.FinishedAt)
	}

	// A queued call: no worker serves its namespace.
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "idle", Tools: catalogTools()}).Stop(ctx)
	reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "idle-details", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := rawRequest(t, nc, messages.EndpointCallsGet, messages.GetCallRequest{CallID: reply.CallID})
	if strings.Contains(string(body), "started_at") || !strings.Contains(string(body), `"queued_at"`) {
		t.Errorf("a queued call: %s", body)
	}
}

// TestSubmitRespectsTheTurnsOwner: a turn belongs to the first agent that
// names it, whether by tools.list or by calls.submit; another agent's
// submit or batch in it is refused with conflict, as its tools.list is.
func TestSubmitRespectsTheTurnsOwner(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	alice := testenv.Client(t, srv.URL(), client.Options{Agent: "alice"})
	bob := testenv.Client(t, srv.URL(), client.Options{Agent: "bob"})
	ctx := testenv.Context(t)
	args := map[string]any{"query": "x"}

	// Claimed by tools.list.
	if _, err := alice.ListTools(ctx, messages.ListToolsRequest{Turn: "t-listed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Call(ctx, "catalog-details", args, client.WithTurn("t-listed")); messages.CodeOf(err) != messages.CodeConflict {
		t.Errorf("bob's submit in alice's listed turn: %v", err)
	}
	// The coordinator remembers the owner a list found: the batch that
	// follows a list reads nothing to tell it.
	batch, err := bob.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "t-listed",
		ToolCalls: messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"catalog-details","input":{"query":"x"}}]`)})
	if err != nil || len(batch.Calls) != 1 || batch.Calls[0].CallID != "" || batch.Calls[0].Error == nil || batch.Calls[0].Error.Code != messages.CodeConflict {
		t.Errorf("bob's batch in alice's listed turn: %+v %v", batch, err)
	}
	if _, err := alice.Call(ctx, "catalog-details", args, client.WithTurn("t-listed")); err != nil {
		t.Errorf("alice's submit in her turn: %v", err)
	}
	if res, err := alice.RunToolCalls(ctx, "anthropic", `[{"type":"tool_use","id":"toolu_2","name":"catalog-details","input":{"query":"x"}}]`, client.WithTurn("t-listed")); err != nil || !res.Complete || res.Calls[0].Error != nil {
		t.Errorf("alice's batch in her listed turn: %+v %v", res, err)
	}

	// Claimed by calls.submit.
	if _, err := alice.Call(ctx, "catalog-details", args, client.WithTurn("t-called")); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Call(ctx, "catalog-details", args, client.WithTurn("t-called")); messages.CodeOf(err) != messages.CodeConflict {
		t.Errorf("bob's submit in alice's turn: %v", err)
	}
	if _, err := bob.ListTools(ctx, messages.ListToolsRequest{Turn: "t-called"}); messages.CodeOf(err) != messages.CodeConflict {
		t.Errorf("bob's tools.list in alice's turn: %v", err)
	}
	info, err := alice.Turn(ctx, "t-called")
	if err != nil || info.State == nil || info.State.Agent != "alice" || len(info.Calls) != 1 {
		t.Fatalf("alice's turn: %+v %v", info, err)
	}
}

// TestDiscoverySelectionsSurviveBriefUnavailability: a discovered or
// activated tool that stays in the catalog but has no live worker, or is
// disabled, is hidden and kept in the turn; it shows again once back. Only
// a tool removed from the catalog is dropped from the turn.
func TestDiscoverySelectionsSurviveBriefUnavailability(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	weather := func() worker.Namespace {
		return worker.Namespace{Name: "weather", Tools: []worker.Tool{
			describedTool("forecast", "Returns the weather forecast for a city for the next days."),
			describedTool("current_conditions", "Returns the current temperature, wind and humidity at a location."),
		}}
	}
	w := testenv.Worker(t, srv.URL(), worker.Config{}, weather())
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ops := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx := testenv.Context(t)
	const turn = "t-brief"

	testenv.Eventually(t, "the forecast to be discoverable", func() bool {
		r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "weather-forecast"})
		return err == nil && len(r.Hits) > 0
	})
	if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: "weather-forecast", Turn: turn, PageSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Activate(ctx, turn, "weather-current_conditions"); err != nil {
		t.Fatal(err)
	}
	both := []string{"weather-current_conditions", "weather-forecast"}
	visible := func() ([]string, *messages.ListToolsReply) {
		t.Helper()
		l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: turn})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range namesOf(l) {
			if strings.HasPrefix(n, "weather-") {
				names = append(names, n)
			}
		}
		return names, l
	}
	kept := func(what string) {
		t.Helper()
		info, err := c.Turn(ctx, turn)
		if err != nil || info.State == nil || !slices.Equal(info.State.Discovered, []string{"weather-forecast"}) || !slices.Equal(info.State.Activated, []string{"weather-current_conditions"}) {
			t.Fatalf("%s: the turn lost its selections: %+v %v", what, info, err)
		}
	}
	if got, _ := visible(); !slices.Equal(got, both) {
		t.Fatalf("visible after discovery: %v", got)
	}

	// The worker stops: hidden, kept.
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the stopped worker's tools to be hidden", func() bool {
		got, l := visible()
		if len(l.Dropped) > 0 {
			t.Fatalf("unavailable tools reported dropped: %v", l.Dropped)
		}
		return len(got) == 0
	})
	kept("worker stopped")

	// It starts again: shown again.
	testenv.Worker(t, srv.URL(), worker.Config{}, weather())
	testenv.Eventually(t, "the tools to show again", func() bool {
		got, _ := visible()
		return slices.Equal(got, both)
	})

	// Disabled, then enabled: the same.
	if err := ops.Operator().SetToolEnabled(ctx, "weather-forecast", false, "maintenance"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the disabled tool to be hidden", func() bool {
		got, l := visible()
		if len(l.Dropped) > 0 {
			t.Fatalf("a disabled tool reported dropped: %v", l.Dropped)
		}
		return slices.Equal(got, []string{"weather-current_conditions"})
	})
	kept("tool disabled")
	if err := ops.Operator().SetToolEnabled(ctx, "weather-forecast", true, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the enabled tool to show again", func() bool {
		got, _ := visible()
		return slices.Equal(got, both)
	})

	// Removed from the catalog: dropped from the turn.
	fx := testenv.Catalog(t, srv.URL())
	if err := fx.Store.DeleteTool(ctx, messages.ToolName{Namespace: "weather", Method: "forecast"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the removed tool to be dropped", func() bool {
		got, l := visible()
		if slices.Contains(got, "weather-forecast") {
			return false
		}
		if !slices.Equal(l.Dropped, []string{"weather-forecast"}) {
			t.Fatalf("dropped = %v", l.Dropped)
		}
		return true
	})
	info, err := c.Turn(ctx, turn)
	if err != nil || info.State == nil || len(info.State.Discovered) != 0 || !slices.Equal(info.State.Activated, []string{"weather-current_conditions"}) {
		t.Fatalf("after the removal: %+v %v", info.State, err)
	}
}

// TestDiscoveryToolFilters: the built-in discovery tool offers the model
// the namespace and tag filters of tools.discover, in its input schema and
// in what it finds.
func TestDiscoveryToolFilters(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{
		describedTool("send_alert", "Sends a storm alert message to subscribers.", worker.WithTags("notify")),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "mail", Tools: []worker.Tool{
		describedTool("send", "Sends an email message to a recipient."),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ctx := testenv.Context(t)

	var schema struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	all, err := c.ListTools(ctx, messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all.Tools {
		if e.Name == "llm_tools-list" {
			if err := json.Unmarshal(e.InputSchema, &schema); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range []string{"query", "namespaces", "tags", "page", "page_size"} {
		if _, ok := schema.Properties[p]; !ok {
			t.Errorf("llm_tools-list takes no %s: %+v", p, schema.Properties)
		}
	}
	if schema.Properties["namespaces"].Type != "array" || schema.Properties["tags"].Type != "array" {
		t.Errorf("namespaces and tags are not arrays: %+v", schema.Properties)
	}

	find := func(args map[string]any) []string {
		t.Helper()
		res, err := c.Call(ctx, "llm_tools-list", args)
		if err != nil || res.IsError {
			t.Fatalf("llm_tools-list %v: %+v %v", args, res, err)
		}
		var found struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(res.StructuredContent, &found); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range found.Tools {
			names = append(names, f.Name)
		}
		slices.Sort(names)
		return names
	}
	testenv.Eventually(t, "both tools to be discoverable", func() bool {
		return slices.Equal(find(map[string]any{"query": "send message"}), []string{"mail-send", "weather-send_alert"})
	})
	if got := find(map[string]any{"query": "send message", "namespaces": []string{"mail"}}); !slices.Equal(got, []string{"mail-send"}) {
		t.Errorf("namespaces [mail]: %v", got)
	}
	if got := find(map[string]any{"query": "send message", "tags": []string{"notify"}}); !slices.Equal(got, []string{"weather-send_alert"}) {
		t.Errorf("tags [notify]: %v", got)
	}
}

// TestIntakeRefusesPatterns: intake.tools names tools exactly; a pattern
// in it is refused with invalid_name and a message saying so, rather than
// selecting nothing.
func TestIntakeRefusesPatterns(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ctx := testenv.Context(t)
	for _, name := range []string{"weather:*", "weather-fore*", "*"} {
		_, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-intake", Intake: &messages.IntakeSelection{Tools: []string{name}}})
		if messages.CodeOf(err) != messages.CodeInvalidName || !strings.Contains(err.Error(), "intake.bundles") {
			t.Errorf("intake.tools %q: %v", name, err)
		}
	}
}

// TestIterationInputsAsDocumented: what protocol.md says the inputs of one
// iteration do to the tools shown: chosen lasts one iteration; a
// clarification hides base tools for that iteration only; an empty intake
// hides base tools for the turn's later iterations; critical tools stay.
func TestIterationInputsAsDocumented(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bundles", "weather.yaml"), `
id: weather
match:
  - name: "weather:current_conditions"
    tier: critical
  - name: "weather:forecast"
    tier: base
  - name: "weather:history"
    tier: onDemand
`)
	writeFile(t, filepath.Join(dir, "agents", "analyst.yaml"), `
id: analyst
tool:
  bundles: [weather]
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{
		describedTool("current_conditions", "Current conditions."),
		describedTool("forecast", "Forecast."),
		describedTool("history", "Past weather."),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ctx := testenv.Context(t)
	shown := func(req messages.ListToolsRequest) []string {
		t.Helper()
		req.Turn = "t-inputs"
		l, err := c.ListTools(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return namesOf(l)
	}
	critical, base, onDemand := "weather-current_conditions", "weather-forecast", "weather-history"
	testenv.Eventually(t, "the tools to be listed", func() bool {
		return slices.Equal(shown(messages.ListToolsRequest{}), []string{critical, base})
	})
	if got := shown(messages.ListToolsRequest{Chosen: []string{onDemand}}); !slices.Equal(got, []string{critical, base, onDemand}) {
		t.Errorf("chosen: %v", got)
	}
	if got := shown(messages.ListToolsRequest{}); !slices.Equal(got, []string{critical, base}) {
		t.Errorf("the iteration after chosen: %v", got)
	}
	if got := shown(messages.ListToolsRequest{Clarification: true}); !slices.Equal(got, []string{critical}) {
		t.Errorf("clarification: %v", got)
	}
	if got := shown(messages.ListToolsRequest{}); !slices.Equal(got, []string{critical, base}) {
		t.Errorf("the iteration after a clarification: %v", got)
	}
	if got := shown(messages.ListToolsRequest{Intake: &messages.IntakeSelection{}}); !slices.Equal(got, []string{critical}) {
		t.Errorf("an empty intake: %v", got)
	}
	if got := shown(messages.ListToolsRequest{}); !slices.Equal(got, []string{critical}) {
		t.Errorf("the iteration after an empty intake (saved): %v", got)
	}
	if got := shown(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Tools: []string{"weather:history"}}}); !slices.Equal(got, []string{critical, onDemand}) {
		t.Errorf("an intake naming an onDemand tool: %v", got)
	}
	if got := shown(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Bundles: []string{"weather"}}}); !slices.Equal(got, []string{critical, base}) {
		t.Errorf("an intake selecting the bundle: %v", got)
	}
}
