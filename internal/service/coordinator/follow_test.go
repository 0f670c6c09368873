package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

const routeA, routeB = "routeA0000000000000001", "routeB0000000000000001"

func routedGuard(t *testing.T) (*guard, *[]*messages.AuditRecord) {
	t.Helper()
	ids, err := ParseIdentities([]byte(`
users:
  user_a: {agents: [bot-a], routes: [` + routeA + `]}
  user_b: {agents: [bot-b, "triage-*"], routes: [` + routeB + `]}
  ops: {operator: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	var audited []*messages.AuditRecord
	return &guard{ids: ids, audit: func(rec *messages.AuditRecord) { audited = append(audited, rec) }}, &audited
}

// admitted is the context of a request of user that the guard admitted.
func admitted(t *testing.T, g *guard, user string) context.Context {
	t.Helper()
	ctx, err := g.admit(context.Background(), messages.EndpointCallsGet, requestFrom(user), &messages.GetCallRequest{CallID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func TestSubmitsAreBoundToTheirUsersRoutes(t *testing.T) {
	g, audited := routedGuard(t)
	for _, tc := range []struct {
		name string
		user string
		req  messages.SubmitRequest
		want messages.ErrorCode
	}{
		{"own route", "user_a", messages.SubmitRequest{Route: routeA}, ""},
		{"own routed call ID", "user_a", messages.SubmitRequest{Route: routeA, CallID: routeA + "x000000000000000000001"}, ""},
		{"no route", "user_a", messages.SubmitRequest{}, ""},
		{"another user's route", "user_a", messages.SubmitRequest{Route: routeB}, messages.CodeForbidden},
		{"a call ID on another user's route", "user_a", messages.SubmitRequest{CallID: routeB + "x000000000000000000001"}, messages.CodeForbidden},
		{"a route of nobody's", "ops", messages.SubmitRequest{Agent: "bot-a", Route: "routeC0000000000000001"}, messages.CodeForbidden},
		{"notify", "user_a", messages.SubmitRequest{Notify: "_INBOX.x"}, messages.CodeForbidden},
		{"several agents, none named", "user_b", messages.SubmitRequest{}, messages.CodeBadRequest},
		{"an operator names none", "ops", messages.SubmitRequest{}, ""},
	} {
		req := tc.req
		req.Tool = "demo-echo"
		_, err := g.admit(context.Background(), messages.EndpointCallsSubmit, requestFrom(tc.user), &req)
		if tc.want == "" && err != nil || tc.want != "" && !errors.Is(err, &messages.Error{Code: tc.want}) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if len(*audited) != 4 {
		t.Errorf("%d refusals audited, want the 4 forbidden ones", len(*audited))
	}
}

func TestCallsAreReadByTheirAgentsUsersAndOperators(t *testing.T) {
	g, audited := routedGuard(t)
	queued := func(agent string) *ledger.Snapshot {
		return &ledger.Snapshot{CallID: "c1", LastSeq: 1, Queued: &ledger.Event{CallEvent: messages.CallEvent{Kind: messages.EventQueued, Request: &messages.CallRequest{Agent: agent}}}}
	}
	held := &ledger.Snapshot{CallID: "c2", LastSeq: 1, Approval: &ledger.Event{CallEvent: messages.CallEvent{Kind: messages.EventApproval, Approval: &messages.Approval{Agent: "triage-3"}}}}
	a, b, ops := admitted(t, g, "user_a"), admitted(t, g, "user_b"), admitted(t, g, "ops")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		snap *ledger.Snapshot
		ok   bool
	}{
		{"own call", a, queued("bot-a"), true},
		{"another agent's call", a, queued("bot-b"), false},
		{"a call without an agent", a, queued(""), false},
		{"a pattern's call held for approval", b, held, true},
		{"another user's call held for approval", a, held, false},
		{"an operator, any call", ops, queued("bot-b"), true},
		{"an operator, a call without an agent", ops, queued(""), true},
		{"without identities", context.Background(), queued("bot-b"), true},
	} {
		err := mayReadCall(tc.ctx, tc.snap)
		if tc.ok && err != nil || !tc.ok && !isForbidden(err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
	if len(*audited) != 3 {
		t.Errorf("%d refused reads audited, want 3", len(*audited))
	}
}

func TestEachUserHoldsAtMostItsWaits(t *testing.T) {
	g, _ := routedGuard(t)
	limit := newWaitLimit(2)
	a, b := admitted(t, g, "user_a"), admitted(t, g, "user_b")
	first, err := limit.hold(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limit.hold(a); err != nil {
		t.Fatal(err)
	}
	if _, err := limit.hold(a); !errors.Is(err, messages.ErrTooManyRequests) {
		t.Fatalf("a third wait: err = %v, want too_many_requests", err)
	}
	if _, err := limit.hold(b); err != nil {
		t.Errorf("another user at the first's limit: %v", err)
	}
	// Released twice, a place is given back once.
	first()
	first()
	if _, err := limit.hold(a); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if _, err := limit.hold(a); !errors.Is(err, messages.ErrTooManyRequests) {
		t.Errorf("a double release freed two places: err = %v", err)
	}
	for range 10 {
		if _, err := limit.hold(context.Background()); err != nil {
			t.Fatalf("without identities: %v", err)
		}
	}
}

func TestParseIdentitiesRefusesABadRoute(t *testing.T) {
	for _, bad := range []string{
		`users: {a: {agents: [x], routes: [short]}}`,
		`users: {a: {agents: [x], routes: ["routeA000000000000000.*"]}}`,
		`users: {a: {agents: [x], routes: [""]}}`,
	} {
		if _, err := ParseIdentities([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseIdentities([]byte(`users: {a: {agents: [x], routes: [` + routeA + `]}}`)); err != nil {
		t.Errorf("a valid route refused: %v", err)
	}
}
