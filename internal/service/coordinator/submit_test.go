package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

const (
	route      = "AAAAAAAAAAAAAAAAAAAAAA"
	routedCall = route + "BBBBBBBBBBBBBBBBBBBBBB"
)

func nested(depth int, inner string) messages.JSON {
	return messages.JSON(strings.Repeat("[", depth) + inner + strings.Repeat("]", depth))
}

func TestValidateSubmit(t *testing.T) {
	tests := []struct {
		name string
		req  messages.SubmitRequest
		want messages.ErrorCode // empty: valid
	}{
		{"plain", messages.SubmitRequest{Tool: "t-echo"}, ""},
		{"no tool", messages.SubmitRequest{}, messages.CodeBadRequest},
		{"bad tool name", messages.SubmitRequest{Tool: "no method"}, messages.CodeInvalidName},
		{"bad agent", messages.SubmitRequest{Tool: "t-echo", Agent: "a b"}, messages.CodeInvalidName},
		{"bad turn", messages.SubmitRequest{Tool: "t-echo", Turn: "a.b"}, messages.CodeInvalidName},
		{"bad notify", messages.SubmitRequest{Tool: "t-echo", Notify: "a b"}, messages.CodeInvalidName},
		{"bad route", messages.SubmitRequest{Tool: "t-echo", Route: "short"}, messages.CodeInvalidName},
		{"route and key", messages.SubmitRequest{Tool: "t-echo", Route: route, IdempotencyKey: "k"}, messages.CodeBadRequest},
		{"call ID without route", messages.SubmitRequest{Tool: "t-echo", CallID: routedCall}, messages.CodeBadRequest},
		{"call ID off its route", messages.SubmitRequest{Tool: "t-echo", Route: route, CallID: "CCCCCCCCCCCCCCCCCCCCCC" + route}, messages.CodeInvalidName},
		{"routed call ID", messages.SubmitRequest{Tool: "t-echo", Route: route, CallID: routedCall}, ""},
		{"quiet without call ID", messages.SubmitRequest{Tool: "t-echo", Quiet: true}, messages.CodeBadRequest},
		{"quiet and wait", messages.SubmitRequest{Tool: "t-echo", Route: route, CallID: routedCall, Quiet: true, Wait: true}, messages.CodeBadRequest},
		{"quiet", messages.SubmitRequest{Tool: "t-echo", Route: route, CallID: routedCall, Quiet: true}, ""},
		{"negative timeout", messages.SubmitRequest{Tool: "t-echo", TimeoutMS: -1}, messages.CodeBadRequest},
		{"negative wait", messages.SubmitRequest{Tool: "t-echo", WaitMS: -1}, messages.CodeBadRequest},
		{"arguments too large", messages.SubmitRequest{Tool: "t-echo", Arguments: messages.JSON(`{"text":"` + strings.Repeat("x", 64) + `"}`)}, messages.CodePayloadTooLarge},
		{"arguments at the depth limit", messages.SubmitRequest{Tool: "t-echo", Arguments: nested(messages.MaxJSONDepth, "1")}, ""},
		{"arguments nested too deep", messages.SubmitRequest{Tool: "t-echo", Arguments: nested(messages.MaxJSONDepth+1, "1")}, messages.CodeBadRequest},
		{"arguments nested far too deep", messages.SubmitRequest{Tool: "t-echo", Arguments: nested(20_000, "")}, messages.CodeBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := 4 * messages.MaxJSONDepth
			if tc.name == "arguments too large" {
				limit = 32
			}
			if tc.name == "arguments nested far too deep" {
				limit = 1 << 20
			}
			name, _, err := validateSubmit(&tc.req, limit)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validateSubmit: %v", err)
				}
				if name.String() != tc.req.Tool {
					t.Errorf("name = %s, want %s", name, tc.req.Tool)
				}
				return
			}
			if got := messages.CodeOf(err); got != tc.want {
				t.Errorf("code = %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}

// fakeCatalog is a catalog of plain values.
type fakeCatalog struct {
	tools     map[string]*catalog.Tool
	disabled  map[string]string
	available map[string]bool
	err       error
}

func (f *fakeCatalog) Get(_ context.Context, name messages.ToolName) (*catalog.Tool, bool, error) {
	if f.err != nil {
		return nil, false, f.err
	}
	t, ok := f.tools[name.String()]
	return t, ok, nil
}

// Lookup finds what Get would find without reading: nothing while reads fail.
func (f *fakeCatalog) Lookup(name string) (*catalog.Tool, bool) {
	if f.err != nil {
		return nil, false
	}
	t, ok := f.tools[name]
	return t, ok
}

func (f *fakeCatalog) Disabled(name messages.ToolName) (bool, string) {
	reason, off := f.disabled[name.String()]
	return off, reason
}

func (f *fakeCatalog) Available(ns string) bool { return f.available[ns] }

func (f *fakeCatalog) ServingState(def *messages.ToolDefinition) (serving, live bool, reason string) {
	if f.available[def.Namespace] {
		return true, true, ""
	}
	return false, false, "no live worker serves namespace " + def.Namespace
}

func tool(name, schema string) *catalog.Tool {
	n, err := messages.ParseToolName(name)
	if err != nil {
		panic(err)
	}
	return &catalog.Tool{Revision: 1, Definition: messages.ToolDefinition{Name: n.String(), Namespace: n.Namespace, Method: n.Method, InputSchema: messages.JSON(schema)}}
}

// resolverOf resolves exposure with a workspace whose agent "analyst"
// sees bundle "t": t:echo without approval, t:ask with one, t:secret excluded.
func resolverOf(t *testing.T, tools ...*catalog.Tool) func(agent string) *exposure.Admission {
	t.Helper()
	ws, err := exposure.LoadWorkspace(fstest.MapFS{
		"bundles/t.yaml": {Data: []byte(`id: t
match:
  - name: "t:*"
    exclude: ["t:secret"]
  - name: "t:ask"
    approval:
      mode: prompt
      title: Ask?
      message: The agent wants to ask.
`)},
		"agents/analyst.yaml": {Data: []byte("id: analyst\ntool:\n  bundles: [t]\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defs := make([]messages.ToolDefinition, 0, len(tools))
	for _, tl := range tools {
		defs = append(defs, tl.Definition)
	}
	r, cat := exposure.NewResolver(ws), exposure.NewCatalog(1, defs)
	return func(agent string) *exposure.Admission { return r.Admission(agent, cat) }
}

func TestAdmit(t *testing.T) {
	echo, secret, gone := tool("t-echo", ""), tool("t-secret", ""), tool("u-gone", "")
	cat := &fakeCatalog{
		tools:     map[string]*catalog.Tool{"t-echo": echo, "t-secret": secret, "u-gone": gone, "t-off": tool("t-off", "")},
		disabled:  map[string]string{"t-off": "broken"},
		available: map[string]bool{"t": true},
	}
	tests := []struct {
		name, agent, tool string
		failUnavailable   bool
		catalogErr        error
		want              messages.ErrorCode
	}{
		{"admitted", "analyst", "t-echo", false, nil, ""},
		{"no agent", "", "t-secret", false, nil, ""},
		{"unknown tool", "analyst", "t-nope", false, nil, messages.CodeToolNotFound},
		{"disabled", "analyst", "t-off", false, nil, messages.CodeToolDisabled},
		{"excluded for the agent", "analyst", "t-secret", false, nil, messages.CodeNotAdmitted},
		{"unserved namespace queued", "", "u-gone", false, nil, ""},
		{"unserved namespace refused", "", "u-gone", true, nil, messages.CodeToolUnavailable},
		{"catalog unreadable", "", "t-echo", false, errors.New("no responders"), messages.CodeUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := *cat
			c.err = tc.catalogErr
			p := &submitPipeline{tools: &c, admission: resolverOf(t, echo, secret, gone), limits: submitLimits{failWhenUnavailable: tc.failUnavailable}}
			name, _ := messages.ParseToolName(tc.tool)
			got, admission, err := p.admit(context.Background(), tc.agent, name)
			if tc.want != "" {
				if code := messages.CodeOf(err); code != tc.want {
					t.Fatalf("code = %s (%v), want %s", code, err, tc.want)
				}
				// An excluded tool comes with its refusal, for the record
				// of it (runClaimed audits it).
				if excluded := tc.want == messages.CodeNotAdmitted; excluded != (got != nil) {
					t.Fatalf("refused with %v, tool %v", err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			if got.Definition.Name != tc.tool || admission == nil {
				t.Errorf("admitted %v with admission %v", got, admission)
			}
		})
	}
}

// checkRaw reads arguments and checks them as a submit does
// (validateSubmit, then checkArguments).
func checkRaw(schemas *schemaCache, tl *catalog.Tool, raw messages.JSON) (messages.JSON, string, error) {
	_, read, err := validateSubmit(&messages.SubmitRequest{Tool: tl.Definition.Name, Arguments: raw}, 1<<30)
	if err != nil {
		return nil, "", err
	}
	args, err := checkArguments(schemas, tl, read)
	return args.compact, args.digest, err
}

func TestCheckArguments(t *testing.T) {
	schema := `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`
	tests := []struct {
		name, args, wantArgs string
		want                 messages.ErrorCode
	}{
		{"compacted", `{ "n" : 1 }`, `{"n":1}`, ""},
		{"schema violation", `{"n":"one"}`, "", messages.CodeInvalidArguments},
		{"missing property", `{}`, "", messages.CodeInvalidArguments},
		{"not JSON", `{"n":`, "", messages.CodeInvalidArguments},
		{"null is checked as sent", `null`, "", messages.CodeInvalidArguments},
	}
	schemas := newSchemaCache()
	tl := tool("t-count", schema)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, digest, err := checkRaw(schemas, tl, messages.JSON(tc.args))
			if tc.want != "" {
				if code := messages.CodeOf(err); code != tc.want {
					t.Fatalf("code = %s (%v), want %s", code, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(args) != tc.wantArgs || digest == "" {
				t.Errorf("args %s digest %q, want %s and a digest", args, digest, tc.wantArgs)
			}
		})
	}
	t.Run("absent arguments are the empty object", func(t *testing.T) {
		args, digest, err := checkRaw(schemas, tool("t-any", ""), nil)
		_, emptyDigest, _ := checkRaw(schemas, tool("t-any", ""), messages.JSON(`{}`))
		if err != nil || string(args) != `{}` || digest != emptyDigest {
			t.Errorf("args %s digest %q err %v; want {} with the digest of {}", args, digest, err)
		}
	})
}

func TestNewCall(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	name, _ := messages.ParseToolName("t-echo")
	slow, quick := tool("t-echo", ""), tool("t-echo", "")
	quick.Definition.Metadata.TimeoutMS = 2000
	tests := []struct {
		name        string
		req         messages.SubmitRequest
		tool        *catalog.Tool
		wantTimeout time.Duration
		wantID      func(string) bool
	}{
		{"default timeout, new ID", messages.SubmitRequest{}, slow, time.Minute, func(id string) bool { return len(id) == messages.RouteLength }},
		{"caller's timeout", messages.SubmitRequest{TimeoutMS: 5000}, slow, 5 * time.Second, nil},
		{"tool's shorter timeout", messages.SubmitRequest{TimeoutMS: 5000}, quick, 2 * time.Second, nil},
		{"tool's timeout below the default", messages.SubmitRequest{}, quick, 2 * time.Second, nil},
		{"idempotency key", messages.SubmitRequest{Agent: "a", IdempotencyKey: "k"}, slow, time.Minute, func(id string) bool { return id == messages.IdempotentCallID("a", "k") }},
		{"caller's ID", messages.SubmitRequest{Route: route, CallID: routedCall}, slow, time.Minute, func(id string) bool { return id == routedCall }},
		{"routed ID", messages.SubmitRequest{Route: route}, slow, time.Minute, func(id string) bool {
			return strings.HasPrefix(id, route) && messages.ValidateRoutedCallID(route, id) == nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Tool, tc.req.Turn, tc.req.Notify = "t-echo", "turn-1", "inbox.me"
			call := newCall(&tc.req, name, tc.tool, messages.JSON(`{}`), "digest", now, time.Minute)
			if got := call.Deadline.Sub(call.QueuedAt); got != tc.wantTimeout || !call.QueuedAt.Equal(now) {
				t.Errorf("queued %v, timeout %v; want %v, %v", call.QueuedAt, got, now, tc.wantTimeout)
			}
			if call.Tool != "t-echo" || call.Namespace != "t" || call.Method != "echo" || call.Turn != "turn-1" || call.Notify != "inbox.me" || call.ArgumentsDigest != "digest" {
				t.Errorf("call = %+v", call)
			}
			if tc.wantID != nil && !tc.wantID(call.CallID) {
				t.Errorf("call ID %q", call.CallID)
			}
		})
	}
}

// audits records the decisions audited.
type audits struct {
	mu        sync.Mutex
	decisions []string
	reasons   []string
}

func (a *audits) record(_ context.Context, decision string, _ *messages.CallRequest, _ *messages.ToolDefinition, d policy.Decision, by string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.decisions = append(a.decisions, decision+by)
	a.reasons = append(a.reasons, d.Reason)
}

func (a *audits) list() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.decisions, ",")
}

type grantsFunc func(version string) bool

func (g grantsFunc) granted(_ context.Context, _ *messages.CallRequest, version string) bool {
	return g(version)
}

func mustPolicy(t *testing.T, yaml string) *atomic.Pointer[policy.Policy] {
	t.Helper()
	var holder atomic.Pointer[policy.Policy]
	if yaml == "" {
		return &holder
	}
	p, err := policy.Parse([]byte(yaml), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	holder.Store(p)
	return &holder
}

func TestAuthorize(t *testing.T) {
	const askPolicy = `
default: allow
rules:
  - {id: deny-wipe, tool: "t:wipe", effect: deny, reason: "nothing is wiped"}
  - {id: ask-echo, tool: "t:echo", agent: "careful", effect: ask, reason: "echo needs a look"}
`
	echo, wipe, ask := tool("t-echo", ""), tool("t-wipe", ""), tool("t-ask", "")
	admission := resolverOf(t, echo, wipe, ask)
	tests := []struct {
		name, policy, agent string
		tool                *catalog.Tool
		granted             bool
		want                messages.ErrorCode
		wantAudit           string // the verdict's decision to record
		wantApproval        string // the approval's mode; empty for none
		wantAudited         string // audited by authorize itself
	}{
		{"no policy, no rule", "", "", echo, false, "", "", "", ""},
		{"allowed", askPolicy, "", echo, false, "", messages.AuditAllowed, "", ""},
		{"denied", askPolicy, "", wipe, false, messages.CodeDenied, "", "", messages.AuditDenied},
		{"policy asks", askPolicy, "careful", echo, false, "", messages.AuditAsked, messages.ApprovalQueue, ""},
		{"policy asks, remembered", askPolicy, "careful", echo, true, "", messages.AuditRemembered, "", ""},
		{"exposure rule asks", "", "analyst", ask, false, "", messages.AuditAsked, messages.ApprovalPrompt, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			audited := &audits{}
			p := &submitPipeline{
				policy: mustPolicy(t, tc.policy),
				grants: grantsFunc(func(string) bool { return tc.granted }),
				audit:  audited.record,
				limits: submitLimits{approvalTTL: time.Hour},
			}
			call := &messages.CallRequest{CallID: "c1", Tool: tc.tool.Definition.Name, Agent: tc.agent, Arguments: messages.JSON(`{}`)}
			args, _ := policy.ParseArguments(call.Arguments)
			v, err := decideAndAuthorize(p, context.Background(), call, tc.tool, admission(tc.agent), &args)
			if code := messages.CodeOf(err); err != nil && code != tc.want || err == nil && tc.want != "" {
				t.Fatalf("err = %v, want code %q", err, tc.want)
			}
			if got := audited.list(); got != tc.wantAudited {
				t.Errorf("audited %q, want %q", got, tc.wantAudited)
			}
			if err != nil {
				return
			}
			if v.audit != tc.wantAudit {
				t.Errorf("verdict audit %q, want %q", v.audit, tc.wantAudit)
			}
			switch {
			case tc.wantApproval == "" && v.approval != nil:
				t.Errorf("approval %+v, want none", v.approval)
			case tc.wantApproval != "" && (v.approval == nil || v.approval.Mode != tc.wantApproval || v.approval.CallID != "c1" || v.approval.State != messages.ApprovalPending || v.approval.ExpiresAt.Sub(v.approval.CreatedAt) != time.Hour):
				t.Errorf("approval %+v, want a pending one in mode %s for an hour", v.approval, tc.wantApproval)
			}
		})
	}
}

func TestRecord(t *testing.T) {
	echo := tool("t-echo", "")
	call := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Arguments: messages.JSON(`{"n":1}`), QueuedAt: time.Now()}
	args, err := policy.ParseArguments(call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("allowed: the queued event carries the decision, nothing held", func(t *testing.T) {
		audited := &audits{}
		p := &submitPipeline{audit: audited.record}
		reply, qa, err := p.record(context.Background(), call, echo, &args, verdict{audit: messages.AuditAllowed, decision: policy.Decision{Version: "v7", RuleID: "r2"}})
		if reply != nil || err != nil || audited.list() != "" {
			t.Errorf("reply %v, err %v, audited at once %q; want nothing written", reply, err, audited.list())
		}
		if qa == nil || qa.Decision != messages.AuditAllowed || qa.PolicyVersion != "v7" || qa.RuleID != "r2" {
			t.Errorf("decision for the queued event %+v", qa)
		}
	})
	t.Run("nothing to account for", func(t *testing.T) {
		audited := &audits{}
		p := &submitPipeline{audit: audited.record}
		if reply, qa, err := p.record(context.Background(), call, echo, &args, verdict{}); reply != nil || qa != nil || err != nil || audited.list() != "" {
			t.Errorf("reply %v, decision %v, err %v, audited %q", reply, qa, err, audited.list())
		}
	})
	t.Run("asked: held for approval", func(t *testing.T) {
		audited := &audits{}
		ap, ledger, store := newTestApprovals(t)
		p := &submitPipeline{audit: audited.record, approvals: ap}
		// Asked for by the exposure rules of a call the policy allowed: the
		// audit record gives the approval's reason, not the policy's.
		const why = "the exposure rules ask for an approval of t-echo"
		approval := &messages.Approval{ApprovalID: "c1", CallID: "c1", State: messages.ApprovalPending, Reason: why}
		reply, _, err := p.record(context.Background(), call, echo, &args, verdict{audit: messages.AuditAsked, approval: approval, policed: true, decision: policy.Decision{Effect: policy.Allow, Reason: "no rule matched; the default is allow"}})
		if err != nil {
			t.Fatal(err)
		}
		if reply.State != messages.StateAwaitingApproval || reply.Approval != approval || audited.list() != messages.AuditAsked {
			t.Errorf("reply %+v, audited %q", reply, audited.list())
		}
		if len(audited.reasons) != 1 || audited.reasons[0] != why {
			t.Errorf("audited with the reasons %q, want %q", audited.reasons, why)
		}
		if snap := ledger.snaps["c1"]; snap == nil || snap.Queued == nil || snap.Approval == nil {
			t.Errorf("ledger holds %+v; want the queued call and its approval", snap)
		}
		if _, ok := store.values["approvals.c1"]; !ok {
			t.Error("the approval is not stored")
		}
	})
}

// fakeWriter acknowledges each publish with the outcome set for its
// subject: the next of its failures, then its lasting one, or duplicate.
type fakeWriter struct {
	mu        sync.Mutex
	published []string
	fail      map[string]error   // by subject prefix, every attempt
	failFirst map[string][]error // by subject prefix, one attempt each
	duplicate map[string]bool    // by subject prefix
	committed []*messages.CallResult
	// unacknowledged are the messages sent without an acknowledgement.
	unacknowledged []*nats.Msg
}

// EventMsg stores a queued event under its subject, any other under "events.<call ID>".
func (f *fakeWriter) EventMsg(_, ns string, ev *messages.CallEvent) (*nats.Msg, error) {
	if ev.Kind == messages.EventQueued {
		subject, err := messages.MustNames("").Events().Queued(ev.CallID, ev.Request.Turn, ns)
		return &nats.Msg{Subject: subject, Header: nats.Header{}}, err
	}
	return &nats.Msg{Subject: "events." + ev.CallID, Header: nats.Header{}}, nil
}

func (f *fakeWriter) PublishThen(msg *nats.Msg, _ time.Duration, then func(uint64, bool, error)) error {
	f.mu.Lock()
	f.published = append(f.published, msg.Subject)
	var err error
	dup := false
	for prefix, e := range f.fail {
		if strings.HasPrefix(msg.Subject, prefix) {
			err = e
		}
	}
	for prefix, errs := range f.failFirst {
		if strings.HasPrefix(msg.Subject, prefix) && len(errs) > 0 {
			err, f.failFirst[prefix] = errs[0], errs[1:]
		}
	}
	for prefix, d := range f.duplicate {
		if strings.HasPrefix(msg.Subject, prefix) {
			dup = d
		}
	}
	f.mu.Unlock()
	go then(1, dup, err) // acknowledgements arrive on another goroutine
	return nil
}

// PublishUnacknowledged records the write as sent; a fake stream says nothing of it.
func (f *fakeWriter) PublishUnacknowledged(msg *nats.Msg) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, msg.Subject)
	f.unacknowledged = append(f.unacknowledged, msg)
	return nil
}

func (f *fakeWriter) Commit(ctx context.Context, _, _ string, res *messages.CallResult, _ string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.committed = append(f.committed, res)
	return true, nil
}

// fakeReader is a ledger holding at most one queued request per call,
// which appears after a number of reads, as one being stored does.
type fakeReader struct {
	mu     sync.Mutex
	queued map[string]*messages.CallRequest
	// hiddenReads is how many reads do not see the queued request yet.
	hiddenReads int
	reads       int
}

func (f *fakeReader) Last(_ context.Context, _, _, callID string, kind messages.EventKind) (*ledger.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	req := f.queued[callID]
	if kind != messages.EventQueued || req == nil || f.reads <= f.hiddenReads {
		return nil, nil
	}
	return &ledger.Event{CallEvent: messages.CallEvent{CallID: callID, Kind: kind, Request: req}, Seq: 1}, nil
}

func (f *fakeReader) SnapshotIn(ctx context.Context, ns, callID string) (*ledger.Snapshot, error) {
	ev, err := f.Last(ctx, "", ns, callID, messages.EventQueued)
	if err != nil {
		return nil, err
	}
	snap := &ledger.Snapshot{CallID: callID, Queued: ev}
	if ev != nil {
		snap.LastSeq = ev.Seq
	}
	return snap, nil
}

// SubjectAt finds no message: the duplicates of these tests are this
// call's queued events.
func (f *fakeReader) SubjectAt(context.Context, uint64) (string, error) {
	return "", transport.ErrNotFound
}

func (f *fakeReader) WaitForWrite(ctx context.Context, _, _, _ string, _ <-chan *nats.Msg) (*messages.CallResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestEnqueue: a call is queued by one write, its queued event (the
// namespace's work item), retried while the stream has no leader, and a
// duplicate of it is told apart from another submit's call.
func TestEnqueue(t *testing.T) {
	names, _ := messages.NewNames("toolbus")
	noLeader := fmt.Errorf("publish: %w", transport.ErrNoResponders)
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
	refused := &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}
	wrongLast := fmt.Errorf("publish: %w", transport.ErrWrongLastSequence)
	queuedAt := time.Now().UTC()
	call := func(turn string) *messages.CallRequest {
		return &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Turn: turn, ArgumentsDigest: "d1", QueuedAt: queuedAt}
	}
	// another is the same call submitted by another submit a moment earlier.
	another := call("")
	another.QueuedAt = queuedAt.Add(-time.Millisecond)
	otherArgs := call("")
	otherArgs.ArgumentsDigest, otherArgs.QueuedAt = "d2", another.QueuedAt
	tests := []struct {
		name      string
		turn      string
		fail      map[string]error
		failFirst map[string][]error
		duplicate map[string]bool
		// inLedger is the call's queued request the ledger holds, if any
		// other than this submit's.
		inLedger      *messages.CallRequest
		hiddenReads   int
		want          messages.ErrorCode
		wantDuplicate bool
		wantWrites    int // publishes of the queued event
	}{
		{name: "queued", wantWrites: 1},
		{name: "queued in its turn: the queued event is the turn's index", turn: "turn-1", wantWrites: 1},
		{name: "queued before by another submit", duplicate: map[string]bool{"toolbus.events.": true}, inLedger: another, wantDuplicate: true, wantWrites: 1},
		{name: "queued before with other arguments", duplicate: map[string]bool{"toolbus.events.": true}, inLedger: otherArgs, want: messages.CodeIdempotencyConflict, wantWrites: 1},
		{name: "queued before, its message ID forgotten: the conditional write is refused", fail: map[string]error{"toolbus.events.": wrongLast}, inLedger: another, wantDuplicate: true, wantWrites: 1},
		{name: "another submit's call in process", fail: map[string]error{"toolbus.events.": inProcess}, inLedger: another, hiddenReads: 3, wantDuplicate: true, wantWrites: 1},
		{name: "queued after the stream had no leader", failFirst: map[string][]error{"toolbus.events.": {noLeader, noLeader, noLeader}}, wantWrites: 4},
		{name: "retried write stored twice", failFirst: map[string][]error{"toolbus.events.": {noLeader}}, duplicate: map[string]bool{"toolbus.events.": true}, wantWrites: 2},
		{name: "never queued", fail: map[string]error{"toolbus.events.": noLeader}, want: messages.CodeUnavailable},
		{name: "refused for its size", fail: map[string]error{"toolbus.events.": refused}, want: messages.CodePayloadTooLarge, wantWrites: 1},
		{name: "refused", fail: map[string]error{"toolbus.events.": &jetstream.APIError{Code: 400, ErrorCode: 10077, Description: "maximum messages exceeded"}}, want: messages.CodeUnavailable, wantWrites: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			writer := &fakeWriter{fail: tc.fail, failFirst: tc.failFirst, duplicate: tc.duplicate}
			c := call(tc.turn)
			reader := &fakeReader{queued: map[string]*messages.CallRequest{"c1": c}, hiddenReads: tc.hiddenReads}
			if tc.inLedger != nil {
				reader.queued["c1"] = tc.inLedger
			}
			turnStore := newMemStore()
			q := &callQueue{names: names, writes: writer, reads: reader, turns: &turns{store: turnStore}, unavailableWait: 500 * time.Millisecond, log: discardLogger()}
			p := &submitPipeline{queue: q}
			outcome := make(chan error, 1)
			var got *messages.SubmitReply
			reply, pending, err := p.enqueue(context.Background(), c, &messages.SubmitRequest{}, func(r *messages.SubmitReply, err error) {
				got = r
				outcome <- err
			})
			if reply != nil || !pending || err != nil {
				t.Fatalf("enqueue = %v, %v, %v; want pending", reply, pending, err)
			}
			err = <-outcome
			if code := messages.CodeOf(err); err != nil && code != tc.want || err == nil && tc.want != "" {
				t.Fatalf("outcome %v, want code %q", err, tc.want)
			}
			if err == nil && (got.CallID != "c1" || got.State != messages.StateQueued || got.Duplicate != tc.wantDuplicate) {
				t.Errorf("reply %+v, want queued, duplicate %v", got, tc.wantDuplicate)
			}
			writer.mu.Lock()
			defer writer.mu.Unlock()
			queued, _ := names.Events().Queued("c1", tc.turn, "t")
			for _, s := range writer.published {
				if s != queued {
					t.Errorf("published %v, want the queued event only", writer.published)
					break
				}
			}
			if tc.wantWrites > 0 && len(writer.published) != tc.wantWrites || tc.wantWrites == 0 && len(writer.published) < 2 {
				t.Errorf("the queued event was published %d times, want %d (0: retried)", len(writer.published), tc.wantWrites)
			}
			if len(writer.committed) > 0 {
				t.Errorf("committed %+v", writer.committed[0])
			}
			if keys := turnStore.keys(); len(keys) != 0 {
				t.Errorf("wrote the turns bucket: %v", keys)
			}
		})
	}
}

func TestRunStopsAtTheFirstFailingStage(t *testing.T) {
	echo := tool("t-echo", `{"type":"object","properties":{"n":{"type":"integer"}}}`)
	cat := &fakeCatalog{tools: map[string]*catalog.Tool{"t-echo": echo}, available: map[string]bool{"t": true}}
	writer := &fakeWriter{}
	names, _ := messages.NewNames("toolbus")
	p := &submitPipeline{
		limits:    submitLimits{maxArgumentsBytes: 1 << 10, defaultTimeout: time.Minute},
		tools:     cat,
		admission: resolverOf(t, echo),
		schemas:   newSchemaCache(),
		policy:    mustPolicy(t, ""),
		grants:    grantsFunc(func(string) bool { return false }),
		audit:     (&audits{}).record,
		queue:     &callQueue{names: names, writes: writer, turns: &turns{store: newMemStore()}, log: discardLogger()},
		tracer:    noop.NewTracerProvider().Tracer(""),
	}
	for _, tc := range []struct {
		args string
		want messages.ErrorCode
	}{
		{`{"n":"x"}`, messages.CodeInvalidArguments},
		{string(nested(messages.MaxJSONDepth+1, "1")), messages.CodeBadRequest},
	} {
		if _, _, err := p.run(context.Background(), &messages.SubmitRequest{Tool: "t-echo", Arguments: messages.JSON(tc.args)}, nil, nil); messages.CodeOf(err) != tc.want {
			t.Errorf("%.20s: err %v, want %s", tc.args, err, tc.want)
		}
	}
	if len(writer.published) != 0 {
		t.Errorf("refused calls were published: %v", writer.published)
	}
	reply, pending, err := p.run(context.Background(), &messages.SubmitRequest{Tool: "t-echo", Arguments: messages.JSON(`{"n":1}`)}, nil, nil)
	if err != nil || pending || reply.State != messages.StateQueued || len(writer.published) != 1 {
		t.Errorf("run = %+v, %v, %v; published %v", reply, pending, err, writer.published)
	}
}

// TestAQuietSubmitWithoutAReceiptIsWrittenUnacknowledged: the first
// quiet submit of a call, which asks for no receipt, writes its queued
// event without asking for an acknowledgement, on the condition that the
// call has none yet and without a message ID; its copies, which ask for
// receipts, and every other submit wait for the stream's acknowledgement.
func TestAQuietSubmitWithoutAReceiptIsWrittenUnacknowledged(t *testing.T) {
	echo := tool("t-echo", `{"type":"object"}`)
	names, _ := messages.NewNames("toolbus")
	route := messages.RandomToken()
	routed := func() string { return messages.RoutedCallID(route, messages.RandomToken()) }
	for _, tc := range []struct {
		name       string
		sr         messages.SubmitRequest
		headers    map[string][]string
		unacked    bool
		wantReply  bool
		wantThenOK bool
	}{
		{name: "quiet, no receipt", sr: messages.SubmitRequest{Quiet: true, Route: route, CallID: routed()}, unacked: true, wantReply: true},
		{name: "quiet copy asking for a receipt", sr: messages.SubmitRequest{Quiet: true, Route: route, CallID: routed()}, headers: map[string][]string{messages.HeaderReceipt: {"toolbus.results." + route + ".x"}}},
		{name: "not quiet", sr: messages.SubmitRequest{Route: route, CallID: routed()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writer := &fakeWriter{}
			p := &submitPipeline{
				limits:    submitLimits{maxArgumentsBytes: 1 << 10, defaultTimeout: time.Minute},
				tools:     &fakeCatalog{tools: map[string]*catalog.Tool{"t-echo": echo}, available: map[string]bool{"t": true}},
				admission: resolverOf(t, echo),
				schemas:   newSchemaCache(),
				policy:    mustPolicy(t, ""),
				grants:    grantsFunc(func(string) bool { return false }),
				audit:     (&audits{}).record,
				queue:     &callQueue{names: names, writes: writer, publish: writer.PublishUnacknowledged, turns: &turns{store: newMemStore()}, unavailableWait: 500 * time.Millisecond, log: discardLogger()},
				tracer:    noop.NewTracerProvider().Tracer(""),
			}
			sr := tc.sr
			sr.Tool, sr.Arguments = "t-echo", messages.JSON(`{}`)
			outcome := make(chan error, 1)
			reply, pending, err := p.run(context.Background(), &sr, tc.headers, func(_ *messages.SubmitReply, err error) { outcome <- err })
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantReply {
				if pending || reply == nil || reply.State != messages.StateQueued || reply.CallID != sr.CallID {
					t.Fatalf("run = %+v, pending %v; want the call queued at once", reply, pending)
				}
			} else if !pending {
				t.Fatalf("run = %+v; want the outcome after the acknowledgement", reply)
			} else if err := <-outcome; err != nil {
				t.Fatal(err)
			}
			writer.mu.Lock()
			defer writer.mu.Unlock()
			if len(writer.published) != 1 {
				t.Fatalf("published %v, want the queued event once", writer.published)
			}
			if !tc.unacked {
				if len(writer.unacknowledged) != 0 {
					t.Fatalf("written without an acknowledgement: %v", writer.published)
				}
				return
			}
			if len(writer.unacknowledged) != 1 {
				t.Fatalf("the queued event was written with an acknowledgement")
			}
			h := writer.unacknowledged[0].Header
			filter := names.QueuedEventFilter(writer.unacknowledged[0].Subject)
			if h.Get(jetstream.ExpectedLastSubjSeqHeader) != "0" || filter == "" || h.Get(jetstream.ExpectedLastSubjSeqSubjHeader) != filter {
				t.Errorf("headers %v: want the write conditional on no queued event matching %q", h, filter)
			}
			if id := h.Get(messages.HeaderMsgID); id != "" {
				t.Errorf("message ID %q: no one would hear the stream tell of a duplicate", id)
			}
		})
	}
}

// TestFirstSubmitsOfANamespaceCheckItsConsumerOnce: the first submits of
// a namespace, come together, ask for its consumer once and wait for that
// check, rather than each asking JetStream (a busy server then times out
// the queued requests, and has them all asked again).
func TestFirstSubmitsOfANamespaceCheckItsConsumerOnce(t *testing.T) {
	var asked atomic.Int32
	release := make(chan struct{})
	q := &callQueue{ensureConsumer: func(ctx context.Context, ns string) error {
		asked.Add(1)
		<-release
		return nil
	}, log: discardLogger()}
	const submits = 50
	var entered atomic.Int32
	errs := make(chan error, submits)
	for range submits {
		go func() {
			entered.Add(1)
			errs <- q.haveConsumer(context.Background(), "t")
		}()
	}
	// The check is held until every submit has come, and one has asked.
	for deadline := time.Now().Add(patience); entered.Load() < submits || asked.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d submits came, %d asked for the consumer", entered.Load(), asked.Load())
		}
	}
	close(release)
	for range submits {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the consumer was asked for %d times by %d submits together, want once", n, submits)
	}
	if err := q.haveConsumer(context.Background(), "t"); err != nil || asked.Load() != 1 {
		t.Fatalf("a later submit: %v, asked %d times", err, asked.Load())
	}
}

// heldWriter is a fakeWriter whose acknowledgements wait for release.
type heldWriter struct {
	fakeWriter
	release chan struct{}
	ackErr  error
}

func (h *heldWriter) PublishThen(msg *nats.Msg, _ time.Duration, then func(uint64, bool, error)) error {
	h.mu.Lock()
	h.published = append(h.published, msg.Subject)
	h.mu.Unlock()
	go func() {
		<-h.release
		then(1, false, h.ackErr)
	}()
	return nil
}

func (h *heldWriter) writes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.published)
}

// TestCopiesOfASubmitJoinItsWrite: the copies of a submit that come while
// its queued event's write is under way (a client copies a request that
// goes unanswered) are not written again: they are answered as
// duplicates once the write has stored the event, or with its failure,
// and a copy that comes after the write writes again (JetStream's message
// ID keeps the call once).
func TestCopiesOfASubmitJoinItsWrite(t *testing.T) {
	names, _ := messages.NewNames("toolbus")
	queuedAt := time.Now().UTC()
	c := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", ArgumentsDigest: "d1", QueuedAt: queuedAt}
	for _, tc := range []struct {
		name   string
		ackErr error
		want   messages.ErrorCode
	}{
		{name: "stored"},
		{name: "refused", ackErr: &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, want: messages.CodePayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writer := &heldWriter{release: make(chan struct{}), ackErr: tc.ackErr}
			reader := &fakeReader{queued: map[string]*messages.CallRequest{"c1": c}}
			q := &callQueue{names: names, writes: writer, reads: reader, turns: &turns{store: newMemStore()}, unavailableWait: patience, log: discardLogger()}
			p := &submitPipeline{queue: q}
			type outcome struct {
				reply *messages.SubmitReply
				err   error
			}
			const copies = 20
			outcomes := make(chan outcome, copies)
			for i := range copies {
				req := *c
				if i > 0 {
					req.QueuedAt = queuedAt.Add(time.Duration(i) * time.Millisecond) // each copy is taken a moment later
				}
				_, pending, err := p.enqueue(context.Background(), &req, &messages.SubmitRequest{}, func(r *messages.SubmitReply, err error) { outcomes <- outcome{r, err} })
				if !pending || err != nil {
					t.Fatalf("copy %d: pending %v, %v", i, pending, err)
				}
			}
			if n := writer.writes(); n != 1 {
				t.Fatalf("%d copies of a submit wrote its queued event %d times while the first write was under way, want once", copies, n)
			}
			close(writer.release)
			queued, duplicates := 0, 0
			for range copies {
				o := <-outcomes
				switch {
				case tc.want != "":
					if messages.CodeOf(o.err) != tc.want {
						t.Errorf("outcome %+v, %v; want code %s", o.reply, o.err, tc.want)
					}
				case o.err != nil:
					t.Errorf("outcome %v", o.err)
				case o.reply.CallID != "c1" || o.reply.State != messages.StateQueued:
					t.Errorf("reply %+v, want call c1 queued", o.reply)
				case o.reply.Duplicate:
					duplicates++
				default:
					queued++
				}
			}
			if tc.want == "" && (queued != 1 || duplicates != copies-1) {
				t.Errorf("%d replies queued and %d duplicates, want 1 and %d", queued, duplicates, copies-1)
			}
			// The write has ended: a copy now writes again.
			later := make(chan outcome, 1)
			if _, _, err := p.enqueue(context.Background(), c, &messages.SubmitRequest{}, func(r *messages.SubmitReply, err error) { later <- outcome{r, err} }); err != nil {
				t.Fatal(err)
			}
			<-later
			if n := writer.writes(); n != 2 {
				t.Errorf("a copy after the write ended wrote %d times in all, want 2", n)
			}
		})
	}
}

// decideAndAuthorize is what a submit asks of the policy and the approval
// rules about a call whose arguments are read: decide, then authorize.
func decideAndAuthorize(p *submitPipeline, ctx context.Context, call *messages.CallRequest, tool *catalog.Tool, admission *exposure.Admission, args *policy.Arguments) (verdict, error) {
	sr := &messages.SubmitRequest{Tool: call.Tool, Agent: call.Agent, Arguments: call.Arguments}
	name, err := sr.ValidateTool()
	if err != nil {
		return verdict{}, err
	}
	v, err := p.decide(ctx, sr, name, tool, readArguments{raw: call.Arguments, parsed: *args})
	if err != nil {
		return v, err
	}
	return p.authorize(ctx, call, tool, admission, args, v)
}

// TestArgumentsThatAreNotJSONMeetThePolicyFirst: arguments that are not
// JSON reach the policy before they are refused: a rule that denies the
// tool whatever its arguments denies the call (and audits it), the first
// rule that would test them denies it, and a call the policy lets through
// is refused as invalid_arguments, unaudited.
func TestArgumentsThatAreNotJSONMeetThePolicyFirst(t *testing.T) {
	const rules = `
default: allow
rules:
  - {id: deny-wipe, tool: "t:wipe", effect: deny, reason: "nothing is wiped"}
  - id: echo-small
    tool: "t:echo"
    arguments: [{pointer: /n, one_of: [1, 2, 3]}]
    effect: allow
`
	echo, wipe, open := tool("t-echo", `{"type":"object"}`), tool("t-wipe", `{"type":"object"}`), tool("t-open", `{"type":"object"}`)
	for _, tc := range []struct {
		tool    *catalog.Tool
		want    messages.ErrorCode
		says    string
		audited string
	}{
		{wipe, messages.CodeDenied, "nothing is wiped", messages.AuditDenied},
		{echo, messages.CodeDenied, "not valid JSON", messages.AuditDenied},
		{open, messages.CodeInvalidArguments, "not JSON", ""},
	} {
		audited := &audits{}
		p := &submitPipeline{schemas: newSchemaCache(), policy: mustPolicy(t, rules), audit: audited.record}
		sr := &messages.SubmitRequest{Tool: tc.tool.Definition.Name, Agent: "a", Arguments: messages.JSON(`{"n": 1`)}
		name, read, err := validateSubmit(sr, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		read = toolArguments(p.schemas, tc.tool, read)
		_, err = p.decide(context.Background(), sr, name, tc.tool, read)
		if err == nil {
			_, err = checkToolArguments(p.schemas, tc.tool, read)
		}
		if messages.CodeOf(err) != tc.want || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %s saying %q", sr.Tool, err, tc.want, tc.says)
		}
		if got := audited.list(); got != tc.audited {
			t.Errorf("%s: audited %q, want %q", sr.Tool, got, tc.audited)
		}
	}
}
