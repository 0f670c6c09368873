package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// auditLogOn returns an audit.list reader of an embedded server's audit
// stream, and the auditor that writes there.
func auditLogOn(t *testing.T, budget int) (*auditLog, *auditor) {
	t.Helper()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	if err := resources.Ensure(context.Background(), js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	return &auditLog{names: names, js: js, budget: budget}, &auditor{names: names, js: js, log: slog.Default()}
}

// recordAudit records n decisions, call i by agent a or b (odd), of tool
// demo-echo or demo-count (every third), allowed or denied (every
// fourth), and waits until they are stored.
func recordAudit(t *testing.T, a *auditor, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		call := &messages.CallRequest{CallID: fmt.Sprintf("call%03d", i), Tool: "demo-echo", Agent: "agent-a"}
		if i%2 == 1 {
			call.Agent = "agent-b"
		}
		if i%3 == 0 {
			call.Tool = "demo-count"
		}
		decision := messages.AuditAllowed
		if i%4 == 0 {
			decision = messages.AuditDenied
		}
		a.record(context.Background(), decision, call, nil, policy.Decision{}, "")
	}
	select {
	case <-a.js.PublishAsyncComplete():
	case <-time.After(patience):
		t.Fatal("the audit records were not stored")
	}
}

// listAll follows the cursors from the first page to the last, and
// returns the call IDs of the records in the order they came.
func listAllAudit(t *testing.T, l *auditLog, r messages.AuditListRequest) (ids []string, pages int) {
	t.Helper()
	for {
		reply, err := l.list(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, rec := range reply.Records {
			ids = append(ids, rec.CallID)
		}
		if reply.NextCursor == "" {
			return ids, pages
		}
		if pages > 1000 {
			t.Fatal("the cursors do not end")
		}
		r.Cursor = reply.NextCursor
	}
}

func wantCalls(match func(i int) bool, n int) []string {
	var out []string
	for i := n - 1; i >= 0; i-- {
		if match(i) {
			out = append(out, fmt.Sprintf("call%03d", i))
		}
	}
	return out
}

func TestAuditListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	l, a := auditLogOn(t, AuditListScanBudget)
	if reply, err := l.list(context.Background(), &messages.AuditListRequest{}); err != nil || len(reply.Records) != 0 || reply.NextCursor != "" {
		t.Fatalf("an empty audit log: %+v %v", reply, err)
	}
	recordAudit(t, a, 0, 30)
	ids, pages := listAllAudit(t, l, messages.AuditListRequest{Limit: 7})
	if want := wantCalls(func(int) bool { return true }, 30); !slices.Equal(ids, want) || pages != 5 {
		t.Fatalf("pages of 7: %v in %d pages, want %v in 5", ids, pages, want)
	}
	ids, _ = listAllAudit(t, l, messages.AuditListRequest{Decision: messages.AuditDenied, Agent: "agent-a", Limit: 2})
	if want := wantCalls(func(i int) bool { return i%4 == 0 && i%2 == 0 }, 30); !slices.Equal(ids, want) {
		t.Errorf("denials of agent-a: %v, want %v", ids, want)
	}
	// Any spelling of the tool's name.
	ids, _ = listAllAudit(t, l, messages.AuditListRequest{Tool: "demo:count"})
	if want := wantCalls(func(i int) bool { return i%3 == 0 }, 30); !slices.Equal(ids, want) {
		t.Errorf("records of demo-count: %v, want %v", ids, want)
	}
	if _, err := l.list(context.Background(), &messages.AuditListRequest{Cursor: "a1.zzzzzz"}); messages.CodeOf(err) != messages.CodeBadRequest {
		t.Errorf("a cursor past the end: err = %v, want bad_request", err)
	}
	if _, err := l.list(context.Background(), &messages.AuditListRequest{Cursor: "v1.12"}); messages.CodeOf(err) != messages.CodeBadRequest {
		t.Errorf("a cursor of calls.list: err = %v, want bad_request", err)
	}
}

// TestAuditListBudget: a request reads at most its budget of records;
// a page the budget cut short carries a cursor that goes on.
func TestAuditListBudget(t *testing.T) {
	t.Parallel()
	l, a := auditLogOn(t, 5)
	recordAudit(t, a, 0, 30)
	reply, err := l.list(context.Background(), &messages.AuditListRequest{Decision: messages.AuditDenied})
	if err != nil || len(reply.Records) > 5 || reply.NextCursor == "" {
		t.Fatalf("first page with a budget of 5: %+v %v, want at most 5 records and a cursor", reply, err)
	}
	ids, pages := listAllAudit(t, l, messages.AuditListRequest{Decision: messages.AuditDenied})
	if want := wantCalls(func(i int) bool { return i%4 == 0 }, 30); !slices.Equal(ids, want) || pages != 6 {
		t.Errorf("denials with a budget of 5: %v in %d pages, want %v in 6", ids, pages, want)
	}
}

// TestAuditListTimeRange: since and until bound when the records were stored.
func TestAuditListTimeRange(t *testing.T) {
	t.Parallel()
	l, a := auditLogOn(t, AuditListScanBudget)
	recordAudit(t, a, 0, 10)
	between := time.Now()
	recordAudit(t, a, 10, 10)
	ids, _ := listAllAudit(t, l, messages.AuditListRequest{Since: between})
	if want := wantCalls(func(i int) bool { return i >= 10 }, 20); !slices.Equal(ids, want) {
		t.Errorf("since: %v, want %v", ids, want)
	}
	ids, _ = listAllAudit(t, l, messages.AuditListRequest{Until: between, Limit: 3})
	if want := wantCalls(func(i int) bool { return i < 10 }, 20); !slices.Equal(ids, want) {
		t.Errorf("until: %v, want %v", ids, want)
	}
	ids, _ = listAllAudit(t, l, messages.AuditListRequest{Since: between.Add(time.Hour)})
	if len(ids) != 0 {
		t.Errorf("since an hour ahead: %v, want none", ids)
	}
}

// TestOperatorReadsAreForOperators: with identities, audit.list,
// workers.list and stats.calls refuse a user that is no operator, and
// audit the refusal, before reading anything.
func TestOperatorReadsAreForOperators(t *testing.T) {
	g, audited := testGuard(t)
	c := &Coordinator{}
	for _, user := range []string{"solo", "fleet-a"} {
		ctx, err := g.admit(context.Background(), messages.EndpointAuditList, requestFrom(user), &messages.AuditListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		before := len(*audited)
		if _, err := c.listAudit(ctx, &messages.AuditListRequest{}); !isForbidden(err) {
			t.Errorf("audit.list as %s: err = %v, want forbidden", user, err)
		}
		if _, err := c.listWorkers(ctx, &messages.WorkersListRequest{}); !isForbidden(err) {
			t.Errorf("workers.list as %s: err = %v, want forbidden", user, err)
		}
		if _, err := c.logReads.callStats(ctx, &messages.CallStatsRequest{}); !isForbidden(err) {
			t.Errorf("stats.calls as %s: err = %v, want forbidden", user, err)
		}
		if len(*audited) != before+3 || (*audited)[before].Decision != auditForbidden || (*audited)[before].By != "AGENTS/"+user {
			t.Errorf("the refusals of %s were not audited: %+v", user, (*audited)[before:])
		}
	}
}

func TestParseTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01":   "",
		"": "",
	} {
		if got := ParseTraceID(in); got != want {
			t.Errorf("ParseTraceID(%q) = %q, want %q", in, got, want)
		}
	}
}
