package client_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestOperatorReads: in one account (no identities, as toolbus dev), the
// client lists the audit log page by page, the live workers with their
// slots, and reads a call's trace ID when it asks for it.
func TestOperatorReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("default: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, b.srv.URL(), func(c *coordinator.Config) { c.PolicyFile = policy })
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})

	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	traced := trace.ContextWithSpanContext(b.ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	var calls []string
	for _, label := range []string{"one", "two", "three"} {
		res, err := c.Call(traced, "t-count", labelArgs{Label: label})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, res.CallID)
	}

	info, err := c.GetTraced(b.ctx, calls[0])
	if err != nil || info.TraceID != tid.String() {
		t.Fatalf("GetTraced: trace ID %q, %v; want %s", info.TraceID, err, tid)
	}
	if info, err := c.Get(b.ctx, calls[0]); err != nil || info.TraceID != "" {
		t.Errorf("Get: trace ID %q, %v; want none unasked", info.TraceID, err)
	}

	// Each allowed call's record, newest first, one a page; the records
	// are stored without the submit waiting for them.
	var got []string
	for deadline := time.Now().Add(testenv.Patience); len(slices.Compact(slices.Clone(got))) < len(calls) && time.Now().Before(deadline); {
		if got != nil {
			time.Sleep(20 * time.Millisecond) // the records give no signal
		}
		got = []string{}
		req := messages.AuditListRequest{Decision: messages.AuditAllowed, Limit: 1}
		for {
			page, err := c.Operator().ListAudit(b.ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range page.Records {
				got = append(got, rec.CallID)
			}
			if page.NextCursor == "" {
				break
			}
			req.Cursor = page.NextCursor
		}
	}
	// A submit the client sent again, as it may on a loaded machine, is
	// audited again: a call's records come one after the other.
	got = slices.Compact(got)
	if want := []string{calls[2], calls[1], calls[0]}; !slices.Equal(got, want) {
		t.Fatalf("the audit log page by page: %v, want %v", got, want)
	}

	workers, err := c.Operator().ListWorkers(b.ctx, "t")
	if err != nil || len(workers.Workers) != 1 || workers.Workers[0].Namespace != "t" || workers.Workers[0].Slots != 16 {
		t.Fatalf("ListWorkers(t): %+v %v, want the worker of t with 16 slots", workers, err)
	}
}
