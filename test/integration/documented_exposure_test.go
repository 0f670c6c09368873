package integration

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
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

// The tests of this file check, from outside, what docs/protocol.md says of
// exposure, discovery, turns and approvals: each is a claim of the document,
// tried against a real coordinator and worker, in JSON as a client without
// the SDK sends it where the codes of refusals are the point.

// refusal sends a JSON request to an endpoint and returns the code of the
// error it was refused with, or "" when it was answered. It checks that the
// headers say what the body says, as "The coordinator API" promises: the
// status in Nats-Service-Error-Code, and "<code>: <message>" in
// Nats-Service-Error.
func refusal(t *testing.T, nc *nats.Conn, endpoint string, body any) (messages.ErrorCode, string) {
	t.Helper()
	data, h := rawRequest(t, nc, endpoint, body)
	header := h.Get("Nats-Service-Error")
	if header == "" {
		return "", ""
	}
	var e messages.Error
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("%s: the error's body is not an error: %s (%v)", endpoint, data, err)
	}
	if got, want := h.Get("Nats-Service-Error-Code"), strconv.Itoa(e.Code.Status()); got != want {
		t.Errorf("%s: status %s for %s; want %s", endpoint, got, e.Code, want)
	}
	if !strings.HasPrefix(header, string(e.Code)+": ") {
		t.Errorf("%s: Nats-Service-Error %q does not begin with the code %s", endpoint, header, e.Code)
	}
	return e.Code, e.Message
}

// TestRefusalsOfExposureRequestsAsDocumented: each request of the exposure
// endpoints that breaks a rule of "Field ranges" or names what does not
// exist is refused with the documented code, and a refused request saves
// no turn.
func TestRefusalsOfExposureRequestsAsDocumented(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Policy = mustPolicy(t, "default: allow\nrules:\n  - {tool: \"catalog:help\", agent: analyst, effect: deny, reason: no help for analysts}\n")
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	ops := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the catalog's tools to be listed", func() bool {
		r, err := ops.ListTools(ctx, messages.ListToolsRequest{Agent: "analyst"})
		return err == nil && slices.Contains(namesOf(r), "catalog-details")
	})
	if err := ops.Operator().SetToolEnabled(ctx, "catalog-lookupAll", false, "broken"); err != nil {
		t.Fatal(err)
	}
	nc := testenv.Connect(t, srv.URL())
	const turn = "t-refused"
	// A submit that passes the checks of Field ranges claims its turn before
	// the catalog is read, as naming the turn: those refused later name one
	// of their own.
	const submitted = "t-submitted"
	long := strings.Repeat("q", messages.MaxQueryLength+1)
	for _, tc := range []struct {
		name     string
		endpoint string
		body     any
		want     messages.ErrorCode
	}{
		{"list: unknown format", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: turn, Format: "cobol"}, messages.CodeBadRequest},
		{"list: agent with a dot", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "a.b", Turn: turn}, messages.CodeInvalidName},
		{"list: turn with a wildcard", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: "t*"}, messages.CodeInvalidName},
		{"list: namespace with a dash", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: turn, Namespace: "a-b"}, messages.CodeInvalidName},
		{"list: chosen not a tool name", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: turn, Chosen: []string{"nodash"}}, messages.CodeInvalidName},
		{"list: a pattern in intake.tools", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: turn, Intake: &messages.IntakeSelection{Tools: []string{"catalog:*"}}}, messages.CodeInvalidName},
		{"list: a bundle ID with a dot", messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: turn, Intake: &messages.IntakeSelection{Bundles: []string{"a.b"}}}, messages.CodeInvalidName},
		{"activate: no turn", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Tools: []string{"catalog-details"}}, messages.CodeBadRequest},
		{"activate: no tools", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn}, messages.CodeBadRequest},
		{"activate: a second dot", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn, Tools: []string{"catalog.details.x"}}, messages.CodeInvalidName},
		{"activate: no such tool", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn, Tools: []string{"catalog-nothing"}}, messages.CodeToolNotFound},
		{"activate: one tool of two missing", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn, Tools: []string{"catalog-details", "catalog-nothing"}}, messages.CodeToolNotFound},
		{"activate: a disabled tool", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn, Tools: []string{"catalog-lookupAll"}}, messages.CodeToolDisabled},
		{"activate: denied by policy", messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: turn, Tools: []string{"catalog-help"}}, messages.CodeDenied},
		{"discover: page_size over 100", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, PageSize: 101}, messages.CodeBadRequest},
		{"discover: negative page_size", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, PageSize: -1}, messages.CodeBadRequest},
		{"discover: negative page", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Page: -1}, messages.CodeBadRequest},
		{"discover: page over 1048576", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Page: messages.MaxDiscoverPage + 1}, messages.CodeBadRequest},
		{"discover: query over 1024 bytes", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Query: long}, messages.CodeBadRequest},
		{"discover: a namespace with a dot", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Namespaces: []string{"a.b"}}, messages.CodeInvalidName},
		{"discover: an empty tag", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Tags: []string{""}}, messages.CodeInvalidName},
		{"discover: a tag over 128 bytes", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Tags: []string{strings.Repeat("t", messages.MaxLabelLength+1)}}, messages.CodeInvalidName},
		{"discover: unknown format", messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Turn: turn, Format: "cobol"}, messages.CodeBadRequest},
		{"submit: no such tool", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: submitted, Tool: "catalog-nothing"}, messages.CodeToolNotFound},
		{"submit: a second dot", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: turn, Tool: "catalog.details.x"}, messages.CodeInvalidName},
		{"submit: timeout_ms over 7 days", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: turn, Tool: "catalog-details", TimeoutMS: messages.MaxTimeoutMS + 1}, messages.CodeBadRequest},
		{"submit: a disabled tool", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: submitted, Tool: "catalog-lookupAll"}, messages.CodeToolDisabled},
		{"submit: denied by policy", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: submitted, Tool: "catalog-help"}, messages.CodeDenied},
		{"submit: arguments outside the schema", messages.EndpointCallsSubmit, messages.SubmitRequest{Agent: "analyst", Turn: submitted, Tool: "catalog-details", Arguments: messages.JSON(`{"query":7}`)}, messages.CodeInvalidArguments},
		{"turns.get: no turn", messages.EndpointTurnsGet, messages.GetTurnRequest{}, messages.CodeBadRequest},
		{"turns.get: a turn with a dot", messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: "a.b"}, messages.CodeInvalidName},
		{"turns.get: a turn nobody named", messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: turn}, messages.CodeTurnNotFound},
	} {
		code, msg := refusal(t, nc, tc.endpoint, tc.body)
		if code != tc.want {
			t.Errorf("%s: %s %q; want %s", tc.name, code, msg, tc.want)
		}
	}
	// Nothing was saved for the refused requests: the turn they named does not exist.
	if code, msg := refusal(t, nc, messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: turn}); code != messages.CodeTurnNotFound {
		t.Errorf("the turn of refused requests: %s %q; want turn_not_found", code, msg)
	}

	// A chosen tool that does not exist is no error: the reply drops it.
	var reply messages.ListToolsReply
	data, h := rawRequest(t, nc, messages.EndpointToolsList, messages.ListToolsRequest{Agent: "analyst", Turn: "t-chosen", Chosen: []string{"catalog-nothing", "catalog:details"}})
	if err := json.Unmarshal(data, &reply); err != nil || h.Get("Nats-Service-Error") != "" {
		t.Fatalf("chosen naming a missing tool: %s %v", data, err)
	}
	if got := namesOf(&reply); !slices.Contains(got, "catalog-details") || slices.Contains(got, "catalog-help") {
		t.Errorf("chosen: %v (catalog-help is denied to the agent)", got)
	}
	if !slices.Equal(reply.Dropped, []string{"catalog-nothing"}) {
		t.Errorf("dropped = %v; want [catalog-nothing]", reply.Dropped)
	}
}

// TestRememberedApprovalsAsDocumented: what DecideRequest says of remember.
// turn lets later calls of the same tool by the same agent in the same
// turn through, and nothing else; for a call made outside any turn there is
// no turn to remember, and the decision is refused rather than remembered
// for every turn. agent_tool lets them through in every turn, and a change
// of policy voids it.
func TestRememberedApprovalsAsDocumented(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, testPolicy)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.PolicyFile = file
		cfg.WorkspaceReloadInterval = 20 * time.Millisecond
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	operator := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx := testenv.Context(t)
	asked := func(what, turn string) string {
		t.Helper()
		r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: turn})
		if err != nil || r.State != messages.StateAwaitingApproval {
			t.Fatalf("%s: %+v %v; want awaiting_approval", what, r, err)
		}
		return r.CallID
	}
	ran := func(what, turn string) {
		t.Helper()
		res, err := agent.Call(ctx, "t-wipe", nil, client.WithTurn(turn))
		if err != nil || res.Status != messages.StateCompleted {
			t.Fatalf("%s: %+v %v; want it to run without asking", what, res, err)
		}
	}
	approve := func(id, remember string) error {
		_, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: id, Decision: messages.DecisionApprove, By: "alice", Remember: remember})
		return err
	}

	// Outside any turn, remember turn has nothing to remember the approval for.
	outside := asked("a call outside any turn", "")
	err := approve(outside, messages.RememberTurn)
	if messages.CodeOf(err) != messages.CodeBadRequest || !strings.Contains(err.Error(), "turn") {
		t.Errorf("remember turn for a call outside any turn: %v; want bad_request naming the turn", err)
	}
	asked("a call in a turn after a refused remember turn", "t-a")
	if err := approve(outside, messages.RememberCall); err != nil {
		t.Fatalf("the approval, still pending, approved for the call: %v", err)
	}
	if res, err := agent.Wait(ctx, outside); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the approved call: %+v %v", res, err)
	}

	// In a turn: that turn only.
	if err := approve(asked("first call in t-b", "t-b"), messages.RememberTurn); err != nil {
		t.Fatal(err)
	}
	ran("t-b after remember turn", "t-b")
	// A call let through by a remembered approval is audited as such.
	countAudited(t, testenv.Connect(t, srv.URL()), messages.AuditRemembered, 1)
	asked("another turn after remember turn", "t-c")
	asked("outside any turn after remember turn", "")

	// agent_tool: every turn, and calls outside any turn.
	if err := approve(asked("first call in t-d", "t-d"), messages.RememberAgentTool); err != nil {
		t.Fatal(err)
	}
	ran("t-e after remember agent_tool", "t-e")
	ran("outside any turn after remember agent_tool", "")
	other := testenv.Client(t, srv.URL(), client.Options{Agent: "bot2"})
	if r, err := other.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: "t-f"}); err != nil || r.State != messages.StateAwaitingApproval {
		t.Fatalf("another agent after remember agent_tool: %+v %v; want awaiting_approval", r, err)
	}

	// A new policy voids what was remembered.
	writeFile(t, file, testPolicy+"  - {tool: \"t:root\", effect: deny, reason: still privileged}\n")
	testenv.Eventually(t, "the new policy to void the grant", func() bool {
		r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: "t-g"})
		if err != nil {
			t.Fatal(err)
		}
		if r.State != messages.StateAwaitingApproval {
			if _, err := agent.Wait(ctx, r.CallID); err != nil {
				t.Fatal(err)
			}
		}
		return r.State == messages.StateAwaitingApproval
	})
}

// TestTurnBelongsToTheFirstAgentThatNamesIt: "A turn belongs to the first
// agent that names it — in tools.list, tools.discover, tools.activate or
// calls.submit —", and every request of another agent in it is refused
// with conflict, without naming the owner and without changing the turn.
func TestTurnBelongsToTheFirstAgentThatNamesIt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	alice := testenv.Client(t, srv.URL(), client.Options{Agent: "alice"})
	bob := testenv.Client(t, srv.URL(), client.Options{Agent: "bob"})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the catalog to be discoverable", func() bool {
		r, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "catalog-details"})
		return err == nil && len(r.Hits) > 0
	})

	// Bob's every request in a turn of Alice's.
	refused := func(turn string) {
		t.Helper()
		for what, err := range map[string]error{
			"tools.list": func() error {
				_, err := bob.ListTools(ctx, messages.ListToolsRequest{Turn: turn})
				return err
			}(),
			"tools.activate": func() error { _, err := bob.Activate(ctx, turn, "catalog-help"); return err }(),
			"tools.discover": func() error {
				_, err := bob.Discover(ctx, messages.DiscoverRequest{Query: "catalog help", Turn: turn})
				return err
			}(),
			"calls.submit": func() error {
				_, err := bob.Call(ctx, "catalog-help", map[string]any{}, client.WithTurn(turn))
				return err
			}(),
		} {
			if messages.CodeOf(err) != messages.CodeConflict || strings.Contains(err.Error(), "alice") {
				t.Errorf("bob's %s in %s: %v; want conflict, without naming the owner", what, turn, err)
			}
		}
		info, err := alice.Turn(ctx, turn)
		if err != nil || info.State == nil || info.State.Agent != "alice" || slices.Contains(info.State.Activated, "catalog-help") || slices.Contains(info.State.Discovered, "catalog-help") {
			t.Errorf("%s after bob's requests: %+v %v", turn, info, err)
		}
	}

	if _, err := alice.ListTools(ctx, messages.ListToolsRequest{Turn: "t-listed"}); err != nil {
		t.Fatal(err)
	}
	refused("t-listed")
	if _, err := alice.Activate(ctx, "t-activated", "catalog-details"); err != nil {
		t.Fatal(err)
	}
	refused("t-activated")
	if _, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "catalog-details", Turn: "t-discovered", PageSize: 1}); err != nil {
		t.Fatal(err)
	}
	refused("t-discovered")
	// A search that finds nothing names the turn as well as one that finds something.
	if r, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "zebra xylophone", Turn: "t-found-nothing"}); err != nil || len(r.Hits) != 0 {
		t.Fatalf("a search for nothing: %+v %v", r, err)
	}
	refused("t-found-nothing")
	if _, err := alice.Call(ctx, "catalog-details", map[string]any{}, client.WithTurn("t-called")); err != nil {
		t.Fatal(err)
	}
	refused("t-called")

	// A turn first named by a call without an agent is the first agent's
	// that names it after: here by tools.list.
	anonymous := testenv.Client(t, srv.URL(), client.Options{})
	if _, err := anonymous.Call(ctx, "catalog-details", map[string]any{}, client.WithTurn("t-anonymous")); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.ListTools(ctx, messages.ListToolsRequest{Turn: "t-anonymous"}); err != nil {
		t.Fatal(err)
	}
	refused("t-anonymous")
}

// TestDiscoverQueriesAsDocumented: what DiscoverRequest and DiscoverReply
// say of queries: an empty query lists every tool the agent may use, by
// name, a page at a time; a query with no searchable word, or one built to
// look like a subject or an injection, finds nothing and is no error; hits
// are best first, a tool's name first of all; the tools of a returned page
// are visible on the turn's next iteration (without a tier when no rule
// admits them) and can be activated and called, and excluded or denied
// tools are never found.
func TestDiscoverQueriesAsDocumented(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents", "analyst.yaml"), `
id: analyst
tool:
  items:
    - name: "weather"
      tier: onDemand
      exclude: ["weather:delete_station"]
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) {
		c.WorkspaceDir = dir
		c.Policy = mustPolicy(t, "default: allow\nrules:\n  - {tool: \"weather:admin_console\", agent: analyst, effect: deny, reason: analysts do not administer}\n")
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{
		describedTool("forecast", "Returns the weather forecast for a city for the next days."),
		describedTool("current_conditions", "Returns the current temperature, wind and humidity at a location."),
		describedTool("delete_station", "Deletes a weather station from the network."),
		describedTool("admin_console", "Opens the weather service's administration console."),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "mail", Tools: []worker.Tool{
		describedTool("send", "Sends an email message to a recipient about the weather.", worker.WithTags(messages.TagNetwork)),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ctx := testenv.Context(t)
	discover := func(req messages.DiscoverRequest) *messages.DiscoverReply {
		t.Helper()
		r, err := c.Discover(ctx, req)
		if err != nil {
			t.Fatalf("discover %+v: %v", req, err)
		}
		if len(r.Tools) != len(r.Hits) {
			t.Fatalf("discover %+v: %d hits and %d tools", req, len(r.Hits), len(r.Tools))
		}
		for i, h := range r.Hits {
			if r.Tools[i].Name != h.Name {
				t.Fatalf("discover %+v: tool %d is %s, hit %s", req, i, r.Tools[i].Name, h.Name)
			}
		}
		return r
	}
	mayUse := []string{"llm_tools-list", "mail-send", "weather-current_conditions", "weather-forecast"}
	testenv.Eventually(t, "every tool to be discoverable", func() bool {
		return slices.Equal(discovered(discover(messages.DiscoverRequest{})), mayUse)
	})

	// An empty query pages through every tool the agent may use, by name.
	var paged []string
	for page := 0; ; page++ {
		r := discover(messages.DiscoverRequest{Page: page, PageSize: 3})
		paged = append(paged, discovered(r)...)
		if !r.More {
			if page != 1 {
				t.Errorf("an empty query in pages of 3: the last page is %d; want 1", page)
			}
			break
		}
	}
	if !slices.Equal(paged, mayUse) {
		t.Errorf("an empty query, paged: %v; want %v", paged, mayUse)
	}
	if r := discover(messages.DiscoverRequest{Page: 7, PageSize: 3}); len(r.Hits) != 0 || r.More {
		t.Errorf("a page past the end: %+v; want no hits and no more", r)
	}

	// Queries that hold no searchable word, or try to be something else.
	for _, q := range []string{"the of and", "*", ">", "toolbus.api.>", "$JS.API.>", "'; DROP TABLE x; --", "\x00\x01", "🌧️🌧️", strings.Repeat("é", messages.MaxQueryLength/2)} {
		r := discover(messages.DiscoverRequest{Query: q})
		if len(r.Hits) != 0 {
			t.Errorf("query %q found %v", q, discovered(r))
		}
	}
	// ...and in JSON the reply still has its lists.
	body, h := rawRequest(t, testenv.Connect(t, srv.URL()), messages.EndpointToolsDiscover, messages.DiscoverRequest{Agent: "analyst", Query: "*"})
	if h.Get("Nats-Service-Error") != "" || !strings.Contains(string(body), `"hits":[]`) || !strings.Contains(string(body), `"tools":[]`) {
		t.Errorf("a query that finds nothing, in JSON: %s", body)
	}

	// Best first: a tool's name first, then by score.
	r := discover(messages.DiscoverRequest{Query: "weather-forecast"})
	if len(r.Hits) == 0 || r.Hits[0].Name != "weather-forecast" || !r.Hits[0].Exact {
		t.Fatalf("a tool's name: %+v", r.Hits)
	}
	r = discover(messages.DiscoverRequest{Query: "weather station administration console delete forecast"})
	for i := 1; i < len(r.Hits); i++ {
		if r.Hits[i].Score > r.Hits[i-1].Score {
			t.Errorf("hits out of order: %+v", r.Hits)
		}
	}
	if got := discovered(r); slices.Contains(got, "weather-delete_station") || slices.Contains(got, "weather-admin_console") || !slices.Contains(got, "weather-forecast") {
		t.Errorf("excluded and denied tools must not be found: %v", got)
	}
	if got := discovered(discover(messages.DiscoverRequest{Query: "weather", Tags: []string{messages.TagNetwork}})); !slices.Equal(got, []string{"mail-send"}) {
		t.Errorf("tags [network]: %v", got)
	}
	if got := discovered(discover(messages.DiscoverRequest{Query: "weather", Namespaces: []string{"mail"}})); !slices.Equal(got, []string{"mail-send"}) {
		t.Errorf("namespaces [mail]: %v", got)
	}

	// A page returned in a turn: its tools are shown next iteration, the
	// one that no rule admits without a tier; they can be activated and called.
	const turn = "t-found"
	if got := discovered(discover(messages.DiscoverRequest{Query: "email message recipient", Turn: turn, PageSize: 1})); !slices.Equal(got, []string{"mail-send"}) {
		t.Fatalf("the page in the turn: %v", got)
	}
	l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: turn})
	if err != nil {
		t.Fatal(err)
	}
	var found *messages.ToolEntry
	for i := range l.Tools {
		if l.Tools[i].Name == "mail-send" {
			found = &l.Tools[i]
		}
	}
	if found == nil || found.Exposure == nil || found.Exposure.Tier != "" {
		t.Fatalf("the discovered tool in the next iteration: %v (%+v)", namesOf(l), found)
	}
	if slices.Contains(namesOf(l), "weather-forecast") {
		t.Errorf("a tool of no page returned is shown: %v", namesOf(l))
	}
	if a, err := c.Activate(ctx, turn, "mail-send", "weather:forecast"); err != nil || !slices.Equal(a.Activated, []string{"mail-send", "weather-forecast"}) {
		t.Errorf("activating found tools: %+v %v", a, err)
	}
	if res, err := c.Call(ctx, "mail-send", map[string]any{}, client.WithTurn(turn)); err != nil || res.IsError {
		t.Errorf("calling the found tool: %+v %v", res, err)
	}
}

// TestToolsListInEveryFormat: tools.list with a format answers schemas in
// the provider's shape, one per tool in the order of tools; think adds a
// required thought parameter, which Toolbus removes before the call runs;
// without a format there are no schemas.
func TestToolsListInEveryFormat(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the catalog to be listed", func() bool {
		l, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "catalog", Turn: "t-formats"})
		return err == nil && len(l.Tools) == 4
	})
	// Where each format puts the name and the input schema.
	shapes := map[string]struct{ name, schema []string }{
		"openai-chat":      {[]string{"function", "name"}, []string{"function", "parameters"}},
		"openai-responses": {[]string{"name"}, []string{"parameters"}},
		"anthropic":        {[]string{"name"}, []string{"input_schema"}},
		"gemini":           {[]string{"name"}, []string{"parameters"}},
		"mcp":              {[]string{"name"}, []string{"inputSchema"}},
	}
	dig := func(v any, path []string) any {
		for _, k := range path {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		return v
	}
	for format, shape := range shapes {
		for _, think := range []bool{false, true} {
			l, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "catalog", Turn: "t-formats", Format: format, Think: think})
			if err != nil {
				t.Fatalf("%s: %v", format, err)
			}
			if len(l.Schemas) != len(l.Tools) || len(l.Tools) != 4 {
				t.Fatalf("%s: %d schemas for %v", format, len(l.Schemas), namesOf(l))
			}
			for i, raw := range l.Schemas {
				var schema any
				if err := json.Unmarshal(raw, &schema); err != nil {
					t.Fatalf("%s: %v", format, err)
				}
				if name := dig(schema, shape.name); name != l.Tools[i].Name {
					t.Errorf("%s: schema %d names %v; the tool is %s: %s", format, i, name, l.Tools[i].Name, raw)
				}
				input := dig(schema, shape.schema)
				_, hasThought := dig(input, []string{"properties"}).(map[string]any)["thought"]
				required, _ := dig(input, []string{"required"}).([]any)
				if think != hasThought || think != slices.Contains(required, any("thought")) {
					t.Errorf("%s, think %v: %s", format, think, raw)
				}
			}
		}
	}
	if l, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "catalog", Turn: "t-formats"}); err != nil || l.Schemas != nil {
		t.Errorf("without a format: %v %v", l.Schemas, err)
	}
	res, err := c.Call(ctx, "catalog-details", map[string]any{"thought": "the user asked for details", "query": "q"}, client.WithTurn("t-formats"))
	if err != nil || res.IsError || res.Content[0].Text != "details:q" {
		t.Errorf("a call with the model's thought: %+v %v", res, err)
	}
}

// TestApprovalsListAndDecideAsDocumented: approvals.list filters by state
// (pending by default, or all), agent and turn; a decision answers the
// approval and the call's state; a denial ends the call denied with the
// decider's reason; a call denied by policy is refused with denied and
// the rule's reason; an approval nobody asked for is approval_not_found.
func TestApprovalsListAndDecideAsDocumented(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, testPolicy) })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	bot := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	other := testenv.Client(t, srv.URL(), client.Options{Agent: "other"})
	operator := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx := testenv.Context(t)
	hold := func(c *client.Client, turn string) string {
		t.Helper()
		r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: turn})
		if err != nil || r.State != messages.StateAwaitingApproval || r.Approval == nil || r.Approval.ApprovalID != r.CallID || r.Approval.State != messages.ApprovalPending {
			t.Fatalf("a destructive call: %+v %v", r, err)
		}
		return r.CallID
	}
	// The model sees the tool that policy asks about, and its exposure
	// names no approval: that is the exposure rules' alone. (The
	// coordinator's catalog follows the worker's registration a moment
	// after it: the list is asked until the worker's tools are in it.)
	var l *messages.ListToolsReply
	testenv.Eventually(t, "the worker's tools to be listed", func() bool {
		var err error
		l, err = bot.ListTools(ctx, messages.ListToolsRequest{Turn: "t-probe"})
		return err == nil && slices.Contains(namesOf(l), "t-wipe")
	})
	l, err := bot.ListTools(ctx, messages.ListToolsRequest{Turn: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Tools {
		if e.Name == "t-wipe" && (e.Exposure == nil || e.Exposure.Approval != "") {
			t.Errorf("t-wipe's exposure: %+v", e.Exposure)
		}
	}
	if !slices.Contains(namesOf(l), "t-wipe") {
		t.Errorf("the tool policy asks about is not shown: %v", namesOf(l))
	}
	a1, a2, a3 := hold(bot, "t-1"), hold(bot, "t-2"), hold(other, "t-3")
	ids := func(req messages.ListApprovalsRequest) []string {
		t.Helper()
		r, err := operator.ListApprovals(ctx, req)
		if err != nil {
			t.Fatalf("approvals.list %+v: %v", req, err)
		}
		var out []string
		for _, a := range r.Approvals {
			out = append(out, a.ApprovalID)
		}
		return out
	}
	if got := ids(messages.ListApprovalsRequest{}); !slices.Equal(got, []string{a1, a2, a3}) {
		t.Errorf("pending, oldest first: %v; want %v", got, []string{a1, a2, a3})
	}
	if got := ids(messages.ListApprovalsRequest{Agent: "bot"}); !slices.Equal(got, []string{a1, a2}) {
		t.Errorf("bot's: %v", got)
	}
	if got := ids(messages.ListApprovalsRequest{Turn: "t-2"}); !slices.Equal(got, []string{a2}) {
		t.Errorf("turn t-2's: %v", got)
	}

	d, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: a1, Decision: messages.DecisionDeny, By: "alice", Reason: "not today"})
	if err != nil || d.State != messages.StateDenied || d.Approval.State != messages.ApprovalDenied || d.Approval.DecidedBy != "alice" || d.Approval.DecisionReason != "not today" {
		t.Fatalf("a denial: %+v %v", d, err)
	}
	res, err := bot.Wait(ctx, a1)
	if err != nil || res.Status != messages.StateDenied || res.Error == nil || res.Error.Code != messages.ResultDenied || !strings.Contains(res.Error.Message, "not today") {
		t.Errorf("the denied call: %+v %v", res, err)
	}
	d, err = operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: a2, Decision: messages.DecisionApprove, By: "alice"})
	if err != nil || d.State != messages.StateQueued || d.Approval.State != messages.ApprovalApproved || d.Approval.Remember != messages.RememberCall {
		t.Fatalf("an approval: %+v %v", d, err)
	}
	if res, err := bot.Wait(ctx, a2); err != nil || res.Status != messages.StateCompleted {
		t.Errorf("the approved call: %+v %v", res, err)
	}
	if got := ids(messages.ListApprovalsRequest{}); !slices.Equal(got, []string{a3}) {
		t.Errorf("pending after two decisions: %v", got)
	}
	if got := ids(messages.ListApprovalsRequest{State: messages.ApprovalDenied}); !slices.Equal(got, []string{a1}) {
		t.Errorf("denied: %v", got)
	}
	if got := ids(messages.ListApprovalsRequest{State: messages.ApprovalApproved}); !slices.Equal(got, []string{a2}) {
		t.Errorf("approved: %v", got)
	}
	if got := ids(messages.ListApprovalsRequest{State: "all"}); !slices.Equal(got, []string{a1, a2, a3}) {
		t.Errorf("all: %v", got)
	}

	nc := testenv.Connect(t, srv.URL())
	for _, tc := range []struct {
		name string
		req  messages.DecideRequest
		want messages.ErrorCode
	}{
		{"no such approval", messages.DecideRequest{ApprovalID: "nobody-asked", Decision: messages.DecisionApprove, By: "alice"}, messages.CodeApprovalNotFound},
		{"decided already", messages.DecideRequest{ApprovalID: a1, Decision: messages.DecisionApprove, By: "alice"}, messages.CodeApprovalNotPending},
		{"no by", messages.DecideRequest{ApprovalID: a3, Decision: messages.DecisionApprove}, messages.CodeBadRequest},
		{"a decision that is none", messages.DecideRequest{ApprovalID: a3, Decision: "maybe", By: "alice"}, messages.CodeBadRequest},
		{"remember forever", messages.DecideRequest{ApprovalID: a3, Decision: messages.DecisionApprove, By: "alice", Remember: "forever"}, messages.CodeBadRequest},
		{"an approval ID with a dot", messages.DecideRequest{ApprovalID: "a.b", Decision: messages.DecisionApprove, By: "alice"}, messages.CodeInvalidName},
	} {
		if code, msg := refusal(t, nc, messages.EndpointApprovalsDecide, tc.req); code != tc.want {
			t.Errorf("approvals.decide, %s: %s %q; want %s", tc.name, code, msg, tc.want)
		}
	}
	if code, msg := refusal(t, nc, messages.EndpointApprovalsList, messages.ListApprovalsRequest{State: "maybe"}); code != messages.CodeBadRequest {
		t.Errorf("approvals.list of a state that is none: %s %q", code, msg)
	}
	// The refusals changed nothing: the approval still waits.
	if got := ids(messages.ListApprovalsRequest{}); !slices.Equal(got, []string{a3}) {
		t.Errorf("pending after refused decisions: %v", got)
	}

	// Denied by policy: refused at once with the rule's reason.
	if code, msg := refusal(t, nc, messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "t-login", Agent: "bot", Arguments: messages.JSON(`{"user":"admin","password":"x"}`)}); code != messages.CodeDenied || !strings.Contains(msg, "nobody logs in as admin") {
		t.Errorf("a call that policy denies: %s %q", code, msg)
	}
}

// TestSelectionsAsDocumented: what TurnState says of a turn's selections:
// chosen and activated tools are shown outside the agent's tiers; an
// intake naming a tool that no rule admits drops it; a selected tool that
// policy comes to deny the agent, or that the rules come to exclude, is
// dropped from the turn and listed in that iteration's dropped.
func TestSelectionsAsDocumented(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agentFile := filepath.Join(dir, "agents", "support.yaml")
	writeFile(t, agentFile, `
id: support
tool:
  items:
    - name: "catalog:lookup"
`)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policyFile, "default: allow\n")
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.WorkspaceDir = dir
		cfg.PolicyFile = policyFile
		cfg.WorkspaceReloadInterval = 20 * time.Millisecond
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)
	const turn = "t-selections"
	list := func(req messages.ListToolsRequest) *messages.ListToolsReply {
		t.Helper()
		req.Turn, req.Namespace = turn, "catalog"
		l, err := c.ListTools(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	testenv.Eventually(t, "the catalog to be listed", func() bool {
		return slices.Equal(namesOf(list(messages.ListToolsRequest{})), []string{"catalog-lookup"})
	})
	// Outside the tiers: chosen for one iteration, activated for the turn.
	if got := namesOf(list(messages.ListToolsRequest{Chosen: []string{"catalog-help"}})); !slices.Equal(got, []string{"catalog-help", "catalog-lookup"}) {
		t.Errorf("chosen outside the tiers: %v", got)
	}
	if _, err := c.Activate(ctx, turn, "catalog-details", "catalog-lookupAll"); err != nil {
		t.Fatal(err)
	}
	if got := namesOf(list(messages.ListToolsRequest{})); !slices.Equal(got, []string{"catalog-details", "catalog-lookup", "catalog-lookupAll"}) {
		t.Errorf("activated outside the tiers: %v", got)
	}
	// An intake naming a tool that no rule admits: dropped from the intake.
	l := list(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Tools: []string{"catalog-help"}}})
	if slices.Contains(namesOf(l), "catalog-help") || !slices.Equal(l.Dropped, []string{"catalog-help"}) {
		t.Errorf("an intake naming a tool no rule admits: %v, dropped %v", namesOf(l), l.Dropped)
	}
	if info, err := c.Turn(ctx, turn); err != nil || info.State.Intake == nil || len(info.State.Intake.Tools) != 0 {
		t.Errorf("the turn's intake after the drop: %+v %v", info, err)
	}

	// Policy comes to deny an activated tool: dropped.
	writeFile(t, policyFile, "default: allow\nrules:\n  - {tool: \"catalog:details\", effect: deny, reason: details are private}\n")
	var dropped []string
	testenv.Eventually(t, "the denied tool to be dropped", func() bool {
		l := list(messages.ListToolsRequest{})
		dropped = append(dropped, l.Dropped...)
		return !slices.Contains(namesOf(l), "catalog-details")
	})
	if !slices.Equal(dropped, []string{"catalog-details"}) {
		t.Errorf("dropped when denied: %v", dropped)
	}
	// The rules come to exclude the other: dropped.
	writeFile(t, agentFile, `
id: support
tool:
  items:
    - name: "catalog:*"
      exclude: ["catalog:lookupAll", "catalog:details"]
`)
	dropped = nil
	testenv.Eventually(t, "the excluded tool to be dropped", func() bool {
		l := list(messages.ListToolsRequest{})
		dropped = append(dropped, l.Dropped...)
		return !slices.Contains(namesOf(l), "catalog-lookupAll")
	})
	if !slices.Equal(dropped, []string{"catalog-lookupAll"}) {
		t.Errorf("dropped when excluded: %v", dropped)
	}
	if info, err := c.Turn(ctx, turn); err != nil || len(info.State.Activated) != 0 {
		t.Errorf("the turn's activations after the drops: %+v %v", info.State, err)
	}

	// A tool that the saved intake names, and the rules come to exclude:
	// dropped from the saved intake once.
	if got := namesOf(list(messages.ListToolsRequest{Intake: &messages.IntakeSelection{Tools: []string{"catalog-help"}}})); !slices.Equal(got, []string{"catalog-help"}) {
		t.Fatalf("an intake naming an admitted tool: %v", got)
	}
	writeFile(t, agentFile, `
id: support
tool:
  items:
    - name: "catalog:*"
      exclude: ["catalog:lookupAll", "catalog:details", "catalog:help"]
`)
	dropped = nil
	testenv.Eventually(t, "the excluded intake tool to be dropped", func() bool {
		l := list(messages.ListToolsRequest{})
		dropped = append(dropped, l.Dropped...)
		return !slices.Contains(namesOf(l), "catalog-help")
	})
	if l := list(messages.ListToolsRequest{}); !slices.Equal(dropped, []string{"catalog-help"}) || len(l.Dropped) != 0 {
		t.Errorf("dropped from the saved intake: %v, then %v", dropped, l.Dropped)
	}
	if info, err := c.Turn(ctx, turn); err != nil || info.State.Intake == nil || len(info.State.Intake.Tools) != 0 {
		t.Errorf("the saved intake after the drop: %+v %v", info.State, err)
	}
}

// TestWholeCatalogAndTheDiscoveryToolsMistakes: tools.list without any
// option of a model iteration lists the whole catalog, disabled and
// unavailable tools included and marked; a model view leaves them out.
// A mistake in the discovery tool's arguments that its schema allows is
// the tool's own error, which the model reads; one its schema refuses is
// refused as any call's arguments are.
func TestWholeCatalogAndTheDiscoveryToolsMistakes(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	ctx := testenv.Context(t)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "idle", Tools: catalogTools()}).Stop(ctx)
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	testenv.Eventually(t, "the catalog to be listed", func() bool {
		l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-whole", Namespace: "catalog"})
		return err == nil && len(l.Tools) == 4
	})
	if err := c.Operator().SetToolEnabled(ctx, "catalog-help", false, "being rewritten"); err != nil {
		t.Fatal(err)
	}
	// The client of an agent names it in every list: the whole catalog is
	// asked without one.
	whole, err := testenv.Client(t, srv.URL(), client.Options{}).ListTools(ctx, messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]messages.ToolEntry{}
	for _, e := range whole.Tools {
		byName[e.Name] = e
	}
	if e := byName["catalog-help"]; !e.Disabled || e.Reason != "being rewritten" || !e.Available {
		t.Errorf("a disabled tool in the whole catalog: %+v", e)
	}
	if e, ok := byName["idle-details"]; !ok || e.Available || !strings.Contains(e.Unavailable, "no live worker serves namespace idle") {
		t.Errorf("a tool without a live worker in the whole catalog: %+v", e)
	}
	if e := byName["catalog-details"]; !e.Available || e.Disabled || e.Exposure != nil {
		t.Errorf("a tool of the whole catalog: %+v", e)
	}
	view, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-whole"})
	if err != nil {
		t.Fatal(err)
	}
	if got := namesOf(view); slices.Contains(got, "catalog-help") || slices.Contains(got, "idle-details") || !slices.Contains(got, "catalog-details") {
		t.Errorf("a model view: %v", got)
	}

	res, err := c.Call(ctx, "llm_tools-list", map[string]any{"query": "details", "namespaces": []string{"no.such"}}, client.WithTurn("t-whole"))
	if err != nil || !res.IsError || res.Error == nil || res.Error.Code != messages.ResultToolError || !strings.Contains(res.Error.Message, "namespace") {
		t.Errorf("the discovery tool with an invalid namespace: %+v %v", res, err)
	}
	_, err = c.Call(ctx, "llm_tools-list", map[string]any{"query": "details", "page_size": 51}, client.WithTurn("t-whole"))
	if messages.CodeOf(err) != messages.CodeInvalidArguments {
		t.Errorf("the discovery tool with page_size 51: %v; want invalid_arguments", err)
	}
}

// TestTiersDecideWhatIsShownNotWhatIsAllowed: README's claims on exposure.
// Without a workspace each namespace is a bundle of its own, which an
// intake selects; with one, a tool of the onDemand tier that is not shown,
// and a tool that no rule names, are still called, and only an excluded
// one is refused (not_admitted).
func TestTiersDecideWhatIsShownNotWhatIsAllowed(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	start := func(mutate ...func(*coordinator.Config)) *client.Client {
		srv := testenv.Server(t)
		testenv.Coordinator(t, srv.URL(), mutate...)
		testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()}, worker.Namespace{Name: "mail", Tools: []worker.Tool{
			describedTool("send", "Sends an email message to a recipient."),
		}})
		c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
		testenv.Eventually(t, "both namespaces to be in the catalog", func() bool {
			l, err := c.ListTools(ctx, messages.ListToolsRequest{Chosen: []string{"catalog-details", "mail-send"}})
			return err == nil && slices.Contains(namesOf(l), "catalog-details") && slices.Contains(namesOf(l), "mail-send")
		})
		return c
	}

	// Without a workspace.
	c := start()
	l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-bundles", Intake: &messages.IntakeSelection{Bundles: []string{"mail"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := namesOf(l); !slices.Equal(got, []string{"mail-send"}) || !slices.Equal(l.Tools[0].Exposure.Bundles, []string{"mail"}) {
		t.Errorf("an intake selecting a namespace's bundle: %v", got)
	}
	if l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-bundles", Intake: &messages.IntakeSelection{Bundles: []string{"nosuch"}}}); err != nil || len(l.Tools) != 0 {
		t.Errorf("an intake selecting a bundle that does not exist: %v %v", namesOf(l), err)
	}
	// A clarification ignores the intake sent with it, which is saved for later iterations.
	if l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-clarify", Clarification: true, Intake: &messages.IntakeSelection{Bundles: []string{"mail"}}}); err != nil || len(l.Tools) != 0 {
		t.Errorf("a clarification with an intake: %v %v", namesOf(l), err)
	}
	if l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-clarify"}); err != nil || !slices.Equal(namesOf(l), []string{"mail-send"}) {
		t.Errorf("the iteration after a clarification with an intake: %v %v", namesOf(l), err)
	}

	// With a workspace.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents", "support.yaml"), `
id: support
tool:
  items:
    - name: "catalog:lookup"
      tier: critical
    - name: "catalog:details"
      tier: onDemand
    - name: "catalog:*"
      exclude: ["catalog:help"]
`)
	c = start(func(cfg *coordinator.Config) { cfg.WorkspaceDir = dir })
	l, err = c.ListTools(ctx, messages.ListToolsRequest{Turn: "t-tiers"})
	if err != nil {
		t.Fatal(err)
	}
	if got := namesOf(l); !slices.Equal(got, []string{"catalog-lookup", "catalog-lookupAll"}) {
		t.Fatalf("shown: %v", got)
	}
	for _, tool := range []string{"catalog-details", "mail-send"} {
		if res, err := c.Call(ctx, tool, map[string]any{}, client.WithTurn("t-tiers")); err != nil || res.IsError {
			t.Errorf("calling %s, not shown: %+v %v", tool, res, err)
		}
	}
	if _, err := c.Call(ctx, "catalog-help", map[string]any{}, client.WithTurn("t-tiers")); messages.CodeOf(err) != messages.CodeNotAdmitted {
		t.Errorf("calling an excluded tool: %v; want not_admitted", err)
	}
}

// TestAuditWithoutAPolicy: without a policy, a call that nothing asks
// about is not audited, while an approval the exposure rules ask for is,
// and so is its decision.
func TestAuditWithoutAPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bundles", "catalog.yaml"), `
id: catalog
match:
  - name: "catalog:*"
  - name: "catalog:details"
    approval: {mode: prompt, message: "Details are long"}
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "support"})
	ctx := testenv.Context(t)
	if res, err := c.Call(ctx, "catalog-lookup", map[string]any{}); err != nil || res.IsError {
		t.Fatalf("a call nothing asks about: %+v %v", res, err)
	}
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "catalog-details", Arguments: messages.JSON(`{}`)})
	if err != nil || r.State != messages.StateAwaitingApproval {
		t.Fatalf("a call the exposure rules ask about: %+v %v", r, err)
	}
	if _, err := c.Answer(ctx, messages.DecideRequest{ApprovalID: r.CallID, Decision: messages.DecisionApprove, By: "the user"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, r.CallID); err != nil {
		t.Fatal(err)
	}
	nc := testenv.Connect(t, srv.URL())
	countAudited(t, nc, messages.AuditAsked, 1)
	countAudited(t, nc, messages.AuditApproved, 1)
	if n := streamLastSeq(t, srv.URL(), names.Audit().Stream()); n != 2 {
		t.Errorf("%d audit records; want 2 (asked and approved)", n)
	}
}
