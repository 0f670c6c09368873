package coordinator_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// tracedContext carries a sampled span context whose trace ID the client
// sends along with its requests.
func tracedContext(ctx context.Context, t *testing.T) (context.Context, string) {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithSpanContext(ctx, sc), tid.String()
}

// TestOperatorReadsOfADeployment: with the deploy configuration's users
// and identities (operators and agents in an account without JetStream),
// the operator reads the audit log, the live workers' slots and a call's
// trace ID through the coordinator; an agent is refused the first two
// with forbidden, which is audited, and reads its own call's trace ID
// only when it asks.
func TestOperatorReadsOfADeployment(t *testing.T) {
	t.Parallel()
	as := testenv.Deployed(t, "default: allow\nrules:\n  - {tool: \"demo:word_count\", effect: deny, reason: no counting}\n", 3)
	newClient := func(user string, opts client.Options) *client.Client {
		opts.CoordinatorReads = true
		c, err := client.New(as(user), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	operator := newClient("operator", client.Options{Route: "operatorroute000000001"})
	agent := newClient("agent_a", client.Options{Agent: "support-bot", Route: "agentAroute00000000001"})
	ctx := testenv.Context(t)

	traced, traceID := tracedContext(ctx, t)
	res, err := agent.Call(traced, "demo-echo", map[string]string{"text": "hello"})
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("echo: %+v %v", res, err)
	}
	if _, err := agent.Call(ctx, "demo-word_count", map[string]string{"text": "a b"}); messages.CodeOf(err) != messages.CodeDenied {
		t.Fatalf("word_count: err = %v, want denied", err)
	}
	// A denial is stored before it is answered: it is in the audit log at
	// once.
	if denied, err := operator.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditDenied}); err != nil || len(denied.Records) != 1 {
		t.Fatalf("audit.list of denials right after the denial: %+v %v, want its record", denied, err)
	}

	// A call's trace ID: the operator's calls.get has it; an agent's has
	// it for its own call when it asks.
	info, err := operator.Get(ctx, res.CallID)
	if err != nil || info.TraceID != traceID {
		t.Fatalf("the operator's calls.get: trace ID %q, %v; want %s", info.TraceID, err, traceID)
	}
	if info, err := agent.Get(ctx, res.CallID); err != nil || info.TraceID != "" {
		t.Errorf("the agent's calls.get unasked: trace ID %q, %v; want none", info.TraceID, err)
	}
	if info, err := agent.GetTraced(ctx, res.CallID); err != nil || info.TraceID != traceID {
		t.Errorf("the agent's calls.get asking: trace ID %q, %v; want %s", info.TraceID, err, traceID)
	}

	// The live workers with their slots.
	workers, err := operator.Operator().ListWorkers(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(workers.Workers, func(hb messages.WorkerHeartbeat) bool { return hb.Namespace == demo.Name })
	if i < 0 || workers.Workers[i].Slots != 3 || workers.Workers[i].WorkerID == "" || workers.Workers[i].Time.IsZero() {
		t.Fatalf("workers.list: %+v, want the demo worker with 3 slots", workers)
	}
	if other, err := operator.Operator().ListWorkers(ctx, "nothere"); err != nil || len(other.Workers) != 0 {
		t.Errorf("workers.list of a namespace without workers: %+v %v", other, err)
	}

	// The audit log: the decisions about the calls, newest stored first.
	// The allowed call's record is copied from its queued event, within
	// an interval: the order of the two in the log is the order they were
	// stored in.
	var audit *messages.AuditListReply
	testenv.Eventually(t, "the decisions in the audit log", func() bool {
		audit, err = operator.Operator().ListAudit(ctx, messages.AuditListRequest{})
		return err != nil || len(audit.Records) >= 2
	})
	if err != nil {
		t.Fatal(err)
	}
	decisions := []string{}
	for _, rec := range audit.Records {
		decisions = append(decisions, rec.Decision+" "+rec.Tool)
	}
	slices.Sort(decisions)
	if !slices.Equal(decisions, []string{"allowed demo-echo", "denied demo-word_count"}) || audit.NextCursor != "" {
		t.Fatalf("audit.list: %v (next %q), want the denial and the allowed call", decisions, audit.NextCursor)
	}
	allowed := audit.Records[slices.IndexFunc(audit.Records, func(r messages.AuditRecord) bool { return r.Decision == messages.AuditAllowed })]
	if allowed.CallID != res.CallID || allowed.Agent != "support-bot" {
		t.Errorf("the allowed call's record: %+v", allowed)
	}
	denied, err := operator.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditDenied, Tool: "demo:word_count"})
	if err != nil || len(denied.Records) != 1 || denied.Records[0].Reason != "no counting" {
		t.Fatalf("audit.list of denials: %+v %v", denied, err)
	}

	// The statistics of the last hour: the echo call queued, started and
	// completed in the demo namespace, with its queue wait and run time.
	stats, err := operator.Operator().CallStats(ctx, messages.CallStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	counted := map[messages.CallState]int{}
	for _, m := range stats.Minutes {
		for st, n := range m.States {
			counted[st] += n
		}
	}
	if counted[messages.StateQueued] != 1 || counted[messages.StateRunning] != 1 || counted[messages.StateCompleted] != 1 ||
		len(stats.Namespaces) == 0 || stats.Namespaces[0].Namespace != demo.Name || stats.Namespaces[0].RunMS == nil || stats.Namespaces[0].RunMS.Count != 1 {
		t.Errorf("stats.calls: states %v, namespaces %+v; want the echo call queued, running and completed in demo", counted, stats.Namespaces)
	}

	// An agent is refused the three, and each refusal is audited before
	// it is answered.
	for i, read := range []func() error{
		func() error { _, err := agent.Operator().ListAudit(ctx, messages.AuditListRequest{}); return err },
		func() error { _, err := agent.Operator().ListWorkers(ctx, ""); return err },
		func() error { _, err := agent.Operator().CallStats(ctx, messages.CallStatsRequest{}); return err },
	} {
		err := read()
		if messages.CodeOf(err) != messages.CodeForbidden || !strings.Contains(err.Error(), "for operators") {
			t.Errorf("an agent's read: err = %v, want forbidden for operators", err)
		}
		if got, err := operator.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditForbidden}); err != nil || len(got.Records) != i+1 {
			t.Fatalf("audit.list right after refusal %d: %+v %v, want %d records", i+1, got, err, i+1)
		}
	}
	forbidden, err := operator.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditForbidden})
	if err != nil || len(forbidden.Records) != 3 || !strings.HasPrefix(forbidden.Records[0].Reason, messages.EndpointStatsCalls) ||
		!strings.HasPrefix(forbidden.Records[1].Reason, messages.EndpointWorkersList) ||
		!strings.HasPrefix(forbidden.Records[2].Reason, messages.EndpointAuditList) || forbidden.Records[0].By != "AGENTS/agent_a" {
		t.Errorf("the audited refusals: %+v %v", forbidden, err)
	}
}
