package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

type sayArgs struct {
	Label    string `json:"label"`
	APIToken string `json:"api_token,omitempty"`
}

func sayTool() worker.Tool {
	return worker.Func("say", "Says its label.", func(_ context.Context, in sayArgs) (string, error) {
		return in.Label, nil
	})
}

// listAll pages through calls.list with the cursor and returns every
// entry, failing on an entry seen twice.
func listAll(t *testing.T, c *client.Client, req messages.CallsListRequest) []messages.CallLogEntry {
	t.Helper()
	ctx := testenv.Context(t)
	var all []messages.CallLogEntry
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatal("calls.list never ended its pages")
		}
		reply, err := c.ListCalls(ctx, req)
		if err != nil {
			t.Fatalf("calls.list %+v: %v", req, err)
		}
		if req.Limit > 0 && len(reply.Calls) > req.Limit {
			t.Fatalf("a page of %d calls for a limit of %d", len(reply.Calls), req.Limit)
		}
		for _, e := range reply.Calls {
			if seen[e.CallID] {
				t.Fatalf("call %s listed twice", e.CallID)
			}
			seen[e.CallID] = true
			all = append(all, e)
		}
		if reply.NextCursor == "" {
			return all
		}
		req.Cursor = reply.NextCursor
	}
}

func idsOf(entries []messages.CallLogEntry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.CallID
	}
	return ids
}

// reversed returns ids newest first, as calls.list orders them.
func reversed(ids []string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}

// TestCallsList: the execution log lists calls newest first, filtered by
// agent, turn, tool, namespace, state and queued time, paged with a cursor
// that sees every call once; each entry has its timing, attempts, worker
// and outcome, and arguments redacted as the audit log redacts them.
func TestCallsList(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	testenv.Worker(t, srv.URL(), worker.Config{ID: "log-worker"},
		worker.Namespace{Name: "logalpha", Tools: []worker.Tool{sayTool(), g.tool()}},
		worker.Namespace{Name: "logbeta", Tools: []worker.Tool{sayTool()}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the tools to be listed", func() bool {
		reply, err := c.ListTools(ctx, messages.ListToolsRequest{})
		return err == nil && len(reply.Tools) >= 3
	})

	// Twelve calls, one at a time so that their order is known.
	type made struct{ id, agent, turn, tool string }
	var calls []made
	for i := range 12 {
		// A turn belongs to one agent.
		m := made{agent: []string{"bot-one", "bot-two"}[i%2], tool: []string{"logalpha-say", "logbeta-say"}[i%4/3]}
		m.turn = fmt.Sprintf("turn-%s-%d", m.agent, i/2%2)
		res, err := c.Call(ctx, m.tool, sayArgs{Label: fmt.Sprint(i), APIToken: "s3cret"}, client.WithTurn(m.turn), func(r *messages.SubmitRequest) { r.Agent = m.agent })
		if err != nil || res.Status != messages.StateCompleted {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
		m.id = res.CallID
		calls = append(calls, m)
	}
	// One call held running, one cancelled before its end.
	running, err := c.Submit(ctx, messages.SubmitRequest{Tool: "logalpha-gate", Agent: "bot-one"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	// The worker records the start as the tool begins.
	testenv.Eventually(t, "the gate call's start to be stored", func() bool {
		info, err := c.Get(ctx, running.CallID)
		return err == nil && info.State == messages.StateRunning
	})
	cancelled, err := c.Submit(ctx, messages.SubmitRequest{Tool: "logalpha-gate", Agent: "bot-two"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	if _, err := c.Cancel(ctx, cancelled.CallID, "enough"); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, cancelled.CallID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("cancelled call: %+v %v", res, err)
	}
	t.Cleanup(func() { close(g.release) })

	var allIDs []string
	for _, m := range calls {
		allIDs = append(allIDs, m.id)
	}
	allIDs = append(allIDs, running.CallID, cancelled.CallID)

	// Paging by three sees every call once, newest first.
	all := listAll(t, c, messages.CallsListRequest{Limit: 3})
	if got, want := idsOf(all), reversed(allIDs); !slices.Equal(got, want) {
		t.Fatalf("paged log:\n got %v\nwant %v", got, want)
	}
	// One page holds them all, without a cursor.
	page, err := c.ListCalls(ctx, messages.CallsListRequest{})
	if err != nil || page.NextCursor != "" || len(page.Calls) != len(allIDs) {
		t.Fatalf("default page: %d calls, cursor %q, %v", len(page.Calls), page.NextCursor, err)
	}

	byID := map[string]messages.CallLogEntry{}
	for _, e := range all {
		byID[e.CallID] = e
	}
	done := byID[calls[0].id]
	if done.State != messages.StateCompleted || done.Tool != "logalpha-say" || done.Namespace != "logalpha" ||
		done.Agent != "bot-one" || done.Turn != "turn-bot-one-0" || done.Attempts != 1 || done.Worker != "log-worker" ||
		done.QueuedAt.IsZero() || done.StartedAt.Before(done.QueuedAt) || done.FinishedAt.Before(done.StartedAt) ||
		done.QueueWaitMS == nil || *done.QueueWaitMS != done.StartedAt.Sub(done.QueuedAt).Milliseconds() ||
		done.RunMS == nil || *done.RunMS != done.FinishedAt.Sub(done.StartedAt).Milliseconds() || done.Error != nil {
		t.Errorf("finished call's entry: %+v", done)
	}
	if args := string(done.Arguments); !strings.Contains(args, `"[redacted]"`) || strings.Contains(args, "s3cret") || !strings.Contains(args, `"label":"0"`) {
		t.Errorf("arguments are not redacted as the audit log redacts them: %s", args)
	}
	if e := byID[running.CallID]; e.State != messages.StateRunning || e.StartedAt.IsZero() || !e.FinishedAt.IsZero() || e.RunMS != nil || e.QueueWaitMS == nil {
		t.Errorf("running call's entry: %+v", e)
	}
	if e := byID[cancelled.CallID]; e.State != messages.StateCancelled || e.Error == nil || e.Error.Code != messages.ResultCancelled || !e.IsError || e.FinishedAt.IsZero() {
		t.Errorf("cancelled call's entry: %+v", e)
	}

	// Each filter keeps what it names, newest first.
	pick := func(keep func(m made) bool) []string {
		var ids []string
		for _, m := range calls {
			if keep(m) {
				ids = append(ids, m.id)
			}
		}
		return ids
	}
	for _, tc := range []struct {
		name string
		req  messages.CallsListRequest
		want []string
	}{
		{"agent", messages.CallsListRequest{Agent: "bot-two"}, append(pick(func(m made) bool { return m.agent == "bot-two" }), cancelled.CallID)},
		{"turn", messages.CallsListRequest{Turn: "turn-bot-two-1"}, pick(func(m made) bool { return m.turn == "turn-bot-two-1" })},
		{"tool", messages.CallsListRequest{Tool: "logbeta:say"}, pick(func(m made) bool { return m.tool == "logbeta-say" })},
		{"namespace", messages.CallsListRequest{Namespace: "logbeta"}, pick(func(m made) bool { return m.tool == "logbeta-say" })},
		{"running", messages.CallsListRequest{States: []messages.CallState{messages.StateRunning}}, []string{running.CallID}},
		{"ended", messages.CallsListRequest{States: []messages.CallState{messages.StateCancelled, messages.StateRunning}}, []string{running.CallID, cancelled.CallID}},
		{"agent and state", messages.CallsListRequest{Agent: "bot-one", States: []messages.CallState{messages.StateCompleted}}, pick(func(m made) bool { return m.agent == "bot-one" })},
		{"queued time", messages.CallsListRequest{Since: byID[calls[3].id].QueuedAt, Until: byID[calls[7].id].QueuedAt}, allIDs[3:7]},
		{"since", messages.CallsListRequest{Since: byID[running.CallID].QueuedAt}, []string{running.CallID, cancelled.CallID}},
		{"nothing", messages.CallsListRequest{Agent: "bot-three"}, nil},
	} {
		got := idsOf(listAll(t, c, withLimit(tc.req, 2)))
		if want := reversed(tc.want); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, want)
		}
	}

	// Bad requests name their field.
	for field, req := range map[string]messages.CallsListRequest{
		"limit":  {Limit: messages.MaxCallsListLimit + 1},
		"cursor": {Cursor: "not-a-cursor"},
		"states": {States: []messages.CallState{"sleeping"}},
		"since":  {Since: byID[calls[7].id].QueuedAt, Until: byID[calls[3].id].QueuedAt},
		"tool":   {Tool: "no separator"},
	} {
		_, err := c.ListCalls(ctx, req)
		var e *messages.Error
		if !errors.As(err, &e) || e.Code != messages.CodeBadRequest || !strings.Contains(e.Message, field) {
			t.Errorf("%s: err = %v, want bad_request naming %s", field, err, field)
		}
	}
}

func withLimit(r messages.CallsListRequest, limit int) messages.CallsListRequest {
	r.Limit = limit
	return r
}

// TestCallsListIdentity: with identities, an agent's user lists its own
// agents' calls only, is refused another agent's with forbidden, and an
// operator lists every call.
func TestCallsListIdentity(t *testing.T) {
	t.Parallel()
	_, as := identityDeploy(t)
	ctx := testenv.Context(t)
	a := agentClient(t, as("agent_a"), "support-bot")
	b := agentClient(t, as("agent_b"), "billing-bot")
	operator := agentClient(t, as("operator"), "")

	var aCalls, bCalls []string
	for i := range 3 {
		for _, who := range []struct {
			c   *client.Client
			ids *[]string
		}{{a, &aCalls}, {b, &bCalls}} {
			res, err := who.c.Call(ctx, "demo-word_count", map[string]string{"text": fmt.Sprint("call ", i)})
			if err != nil || res.Status != messages.StateCompleted {
				t.Fatalf("call: %+v %v", res, err)
			}
			*who.ids = append(*who.ids, res.CallID)
		}
	}

	// A call held for its user's answer is listed as awaiting approval.
	pending, err := b.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.01}`), Turn: "turn-log-b"})
	if err != nil || pending.State != messages.StateAwaitingApproval {
		t.Fatalf("B's prompt approval: %+v %v", pending, err)
	}
	held := listAll(t, b, messages.CallsListRequest{States: []messages.CallState{messages.StateAwaitingApproval}})
	if len(held) != 1 || held[0].CallID != pending.CallID || held[0].State != messages.StateAwaitingApproval {
		t.Errorf("B's calls awaiting approval: %+v, want %s", held, pending.CallID)
	}
	bCalls = append(bCalls, pending.CallID)

	if got := idsOf(listAll(t, a, messages.CallsListRequest{Limit: 2})); !slices.Equal(got, reversed(aCalls)) {
		t.Errorf("agent A's log: got %v, want only its own %v", got, reversed(aCalls))
	}
	if got := idsOf(listAll(t, b, messages.CallsListRequest{Agent: "billing-bot"})); !slices.Equal(got, reversed(bCalls)) {
		t.Errorf("agent B's log of billing-bot: got %v, want %v", got, reversed(bCalls))
	}
	_, err = a.ListCalls(ctx, messages.CallsListRequest{Agent: "billing-bot"})
	if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
		t.Errorf("A listing B's calls: err = %v, want forbidden", err)
	}
	var both []string
	for i := range aCalls {
		both = append(both, aCalls[i], bCalls[i])
	}
	both = append(both, pending.CallID)
	got := idsOf(listAll(t, operator, messages.CallsListRequest{Limit: 4}))
	if !slices.Equal(got, reversed(both)) {
		t.Errorf("the operator's log: got %v, want %v", got, reversed(both))
	}
}
