package integration

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/testenv"
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
	eventually(t, "the catalog's tools to be listed", func() bool {
		r, err := ops.ListTools(ctx, messages.ListToolsRequest{Agent: "analyst"})
		return err == nil && slices.Contains(namesOf(r), "catalog-details")
	})
	if err := ops.SetToolEnabled(ctx, "catalog-lookupAll", false, "broken"); err != nil {
		t.Fatal(err)
	}
	nc := testenv.Connect(t, srv.URL())
	const turn = "t-refused"
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
