package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// memStore is a kvStore on a map, with revisions as a bucket keeps them.
type memStore struct {
	mu        sync.Mutex
	values    map[string][]byte
	revisions map[string]uint64
	last      uint64
	// beforeUpdate, if set, runs before each Update, as another writer would.
	beforeUpdate func(key string)
}

func newMemStore() *memStore {
	return &memStore{values: map[string][]byte{}, revisions: map[string]uint64{}}
}

func (m *memStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	if !ok {
		return nil, 0, errNoKey
	}
	return v, m.revisions[key], nil
}

func (m *memStore) Create(_ context.Context, key string, value []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.values[key]; ok {
		return 0, errKeyExists
	}
	return m.write(key, value), nil
}

func (m *memStore) Update(_ context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if m.beforeUpdate != nil {
		m.beforeUpdate(key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revisions[key] != revision {
		return 0, errStale
	}
	return m.write(key, value), nil
}

func (m *memStore) Put(_ context.Context, key string, value []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.write(key, value), nil
}

func (m *memStore) write(key string, value []byte) uint64 {
	m.last++
	m.values[key], m.revisions[key] = value, m.last
	return m.last
}

func (m *memStore) Keys(_ context.Context, filter string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := strings.TrimSuffix(strings.TrimSuffix(filter, ">"), "*")
	var keys []string
	for k := range m.values {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (m *memStore) keys() []string {
	keys, _ := m.Keys(context.Background(), "")
	return keys
}

// memLedger keeps the latest event of each kind of each call.
type memLedger struct {
	mu      sync.Mutex
	snaps   map[string]*ledger.Snapshot
	seq     uint64
	results []*messages.CallResult
}

func newMemLedger() *memLedger { return &memLedger{snaps: map[string]*ledger.Snapshot{}} }

func (l *memLedger) Snapshot(_ context.Context, callID string) (*ledger.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.snaps[callID]; ok {
		copied := *s
		return &copied, nil
	}
	return &ledger.Snapshot{CallID: callID}, nil
}

func (l *memLedger) Append(_ context.Context, _, ns string, ev *messages.CallEvent) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	s := l.snaps[ev.CallID]
	if s == nil {
		s = &ledger.Snapshot{CallID: ev.CallID, Namespace: ns}
		l.snaps[ev.CallID] = s
	}
	e := &ledger.Event{CallEvent: *ev, Seq: l.seq, Namespace: ns}
	switch ev.Kind {
	case messages.EventQueued:
		s.Queued = e
	case messages.EventApproval:
		s.Approval = e
	case messages.EventResult:
		s.Result = e
	}
	s.LastSeq = l.seq
	return l.seq, nil
}

func (l *memLedger) Hold(ctx context.Context, call *messages.CallRequest) (uint64, error) {
	return l.Append(ctx, messages.TurnBucket(call.Turn), call.Namespace, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call})
}

func (l *memLedger) Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, _ string) (bool, error) {
	l.mu.Lock()
	if s := l.snaps[res.CallID]; s != nil && s.Result != nil {
		l.mu.Unlock()
		return false, nil
	}
	l.results = append(l.results, res)
	l.mu.Unlock()
	_, err := l.Append(ctx, bucket, ns, &messages.CallEvent{CallID: res.CallID, Kind: messages.EventResult, Result: res})
	return true, err
}

// testApprovals is an approvals room on a map and an in-memory ledger;
// queued collects the calls it enqueues, audited its audit records.
type testApprovals struct {
	*approvals
	queued []*messages.CallRequest
	// queuedIn is the span context each call was enqueued in.
	queuedIn []trace.SpanContext
	audited  *audits
}

func newTestApprovals(t *testing.T) (*approvals, *memLedger, *memStore) {
	ta, l, s := newTestApprovalsRoom(t)
	return ta.approvals, l, s
}

func newTestApprovalsRoom(t *testing.T) (*testApprovals, *memLedger, *memStore) {
	t.Helper()
	store, l := newMemStore(), newMemLedger()
	ta := &testApprovals{audited: &audits{}}
	ta.approvals = &approvals{
		store:  store,
		ledger: l,
		turns:  &turns{store: newMemStore()},
		policy: mustPolicy(t, ""),
		tool:   func(string) *messages.ToolDefinition { return nil },
		enqueue: func(ctx context.Context, call *messages.CallRequest) error {
			ta.queued = append(ta.queued, call)
			ta.queuedIn = append(ta.queuedIn, trace.SpanContextFromContext(ctx))
			_, err := l.Append(context.Background(), messages.TurnBucket(call.Turn), call.Namespace, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Request: call})
			return err
		},
		audit:    ta.audited.record,
		grantTTL: time.Hour,
		settled:  time.Second,
		tracer:   tracing.Tracer(nil),
		log:      discardLogger(),
	}
	return ta, l, store
}

// ask holds a call for an approval, as a submit does.
func (ta *testApprovals) ask(t *testing.T, callID, agent, turn string, expires time.Duration) {
	t.Helper()
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: callID, Tool: "t-echo", Namespace: "t", Method: "echo", Agent: agent, Turn: turn, QueuedAt: now, Deadline: now.Add(time.Minute)}
	a := &messages.Approval{ApprovalID: callID, CallID: callID, Tool: "t-echo", Agent: agent, Turn: turn, Mode: messages.ApprovalQueue,
		State: messages.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(expires)}
	if err := ta.hold(context.Background(), call, a); err != nil {
		t.Fatal(err)
	}
}

func TestDecide(t *testing.T) {
	approve := func(id string) *messages.DecideRequest {
		return &messages.DecideRequest{ApprovalID: id, Decision: messages.DecisionApprove, By: "ops"}
	}
	tests := []struct {
		name    string
		expires time.Duration
		req     *messages.DecideRequest
		before  func(ta *testApprovals, store *memStore)
		want    messages.ErrorCode
		// wantState is the call's state after the decision.
		wantState messages.CallState
		wantAudit string
	}{
		{name: "approved", expires: time.Hour, req: approve("c1"), wantState: messages.StateQueued, wantAudit: messages.AuditApproved + "ops"},
		{name: "denied", expires: time.Hour, req: &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionDeny, By: "ops", Reason: "no"},
			wantState: messages.StateDenied, wantAudit: messages.AuditRejected + "ops"},
		{name: "no such decision", expires: time.Hour, req: &messages.DecideRequest{ApprovalID: "c1", Decision: "maybe", By: "ops"}, want: messages.CodeBadRequest},
		{name: "nobody decides", expires: time.Hour, req: &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove}, want: messages.CodeBadRequest},
		{name: "remember what", expires: time.Hour, req: &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops", Remember: "forever"}, want: messages.CodeBadRequest},
		{name: "unknown approval", expires: time.Hour, req: approve("c2"), want: messages.CodeApprovalNotFound},
		{name: "expired", expires: -time.Second, req: approve("c1"), want: messages.CodeApprovalNotPending, wantState: messages.StateDenied,
			wantAudit: messages.AuditExpired + "toolbus," + messages.AuditRefused + "ops"},
		{name: "decided twice", expires: time.Hour, req: approve("c1"), want: messages.CodeApprovalNotPending, wantState: messages.StateQueued,
			wantAudit: messages.AuditApproved + "ops," + messages.AuditRefused + "ops",
			before: func(ta *testApprovals, _ *memStore) {
				if _, err := ta.decide(context.Background(), approve("c1")); err != nil {
					panic(err)
				}
			}},
		{name: "changed by another at the same time", expires: time.Hour, req: approve("c1"), want: messages.CodeConflict, wantState: messages.StateAwaitingApproval,
			wantAudit: messages.AuditRefused + "ops",
			before: func(_ *testApprovals, store *memStore) {
				store.beforeUpdate = func(key string) {
					store.beforeUpdate = nil
					v, _, _ := store.Get(context.Background(), key)
					_, _ = store.Put(context.Background(), key, v)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ta, l, store := newTestApprovalsRoom(t)
			ta.ask(t, "c1", "a", "", tc.expires)
			if tc.before != nil {
				tc.before(ta, store)
			}
			reply, err := ta.decide(context.Background(), tc.req)
			if code := messages.CodeOf(err); err != nil && code != tc.want || err == nil && tc.want != "" {
				t.Fatalf("err = %v, want code %q", err, tc.want)
			}
			if err == nil && reply.State != tc.wantState {
				t.Errorf("reply state %s, want %s", reply.State, tc.wantState)
			}
			if tc.wantState != "" {
				snap, _ := l.Snapshot(context.Background(), "c1")
				if got := snap.State(); got != tc.wantState {
					t.Errorf("call is %s, want %s", got, tc.wantState)
				}
			}
			if got := ta.audited.list(); got != tc.wantAudit {
				t.Errorf("audited %q, want %q", got, tc.wantAudit)
			}
			if wantQueued := tc.wantState == messages.StateQueued; (len(ta.queued) == 1) != wantQueued || len(ta.queued) > 1 {
				t.Errorf("queued %d calls, want queued: %v", len(ta.queued), wantQueued)
			}
		})
	}
}

func TestDecideUnderAnotherPolicy(t *testing.T) {
	ta, _, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "", time.Hour)
	stored, err := ta.load(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	stored.rec.PolicyVersion = "old"
	data, _ := json.Marshal(&stored.rec)
	if _, err := ta.store.Put(context.Background(), "approvals.c1", data); err != nil {
		t.Fatal(err)
	}
	ta.policy = mustPolicy(t, "default: allow\n")
	_, err = ta.decide(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops"})
	if !errors.Is(err, messages.ErrConflict) {
		t.Fatalf("err = %v, want a conflict", err)
	}
	// A denial needs no policy to hold.
	if _, err := ta.decide(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionDeny, By: "ops"}); err != nil {
		t.Fatal(err)
	}
}

func TestAnswerOnlyInPromptMode(t *testing.T) {
	ta, _, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "", time.Hour)
	_, err := ta.answer(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "a"})
	if !errors.Is(err, messages.ErrDenied) {
		t.Fatalf("an agent answered an approval in queue mode: %v", err)
	}
}

func TestRememberedApprovals(t *testing.T) {
	tests := []struct {
		remember string
		// granted for: the same agent and tool in the same turn, in another turn
		wantSameTurn, wantOtherTurn bool
	}{
		{messages.RememberCall, false, false},
		{messages.RememberTurn, true, false},
		{messages.RememberAgentTool, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.remember, func(t *testing.T) {
			ta, _, _ := newTestApprovalsRoom(t)
			ta.ask(t, "c1", "a", "turn-1", time.Hour)
			if _, err := ta.decide(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops", Remember: tc.remember}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			sameTurn := &messages.CallRequest{Tool: "t-echo", Agent: "a", Turn: "turn-1"}
			otherTurn := &messages.CallRequest{Tool: "t-echo", Agent: "a", Turn: "turn-2"}
			otherAgent := &messages.CallRequest{Tool: "t-echo", Agent: "b", Turn: "turn-1"}
			if got := ta.granted(ctx, sameTurn, ""); got != tc.wantSameTurn {
				t.Errorf("same turn granted %v, want %v", got, tc.wantSameTurn)
			}
			if got := ta.granted(ctx, otherTurn, ""); got != tc.wantOtherTurn {
				t.Errorf("other turn granted %v, want %v", got, tc.wantOtherTurn)
			}
			if ta.granted(ctx, otherAgent, "") {
				t.Error("granted to another agent")
			}
			if tc.wantSameTurn && ta.granted(ctx, sameTurn, "another policy") {
				t.Error("granted under another policy version")
			}
		})
	}
}

func TestListApprovals(t *testing.T) {
	ta, _, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "turn-1", time.Hour)
	ta.ask(t, "c2", "b", "turn-2", time.Hour)
	ta.ask(t, "c3", "a", "turn-3", time.Hour)
	if _, err := ta.decide(context.Background(), &messages.DecideRequest{ApprovalID: "c3", Decision: messages.DecisionDeny, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req  messages.ListApprovalsRequest
		want string
	}{
		{messages.ListApprovalsRequest{}, "c1 c2"},
		{messages.ListApprovalsRequest{State: "all"}, "c1 c2 c3"},
		{messages.ListApprovalsRequest{State: messages.ApprovalDenied}, "c3"},
		{messages.ListApprovalsRequest{State: "all", Agent: "a"}, "c1 c3"},
		{messages.ListApprovalsRequest{Turn: "turn-2"}, "c2"},
	}
	for _, tc := range tests {
		reply, err := ta.list(context.Background(), &tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, a := range reply.Approvals {
			ids = append(ids, a.ApprovalID)
		}
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("%+v: listed %q, want %q (oldest first)", tc.req, got, tc.want)
		}
	}
}

func TestSweepApprovals(t *testing.T) {
	ta, l, store := newTestApprovalsRoom(t)
	ta.ask(t, "expired", "a", "", -time.Second)
	ta.ask(t, "pending", "a", "", time.Hour)
	ta.ask(t, "half-done", "a", "", time.Hour)
	// A coordinator stopped after storing the decision, before carrying it out.
	stored, _ := ta.load(context.Background(), "half-done")
	stored.rec.State, stored.rec.DecidedBy, stored.rec.DecidedAt = messages.ApprovalApproved, "ops", time.Now().Add(-time.Minute)
	if err := ta.save(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	if err := ta.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]messages.CallState{"expired": messages.StateDenied, "pending": messages.StateAwaitingApproval, "half-done": messages.StateQueued} {
		snap, _ := l.Snapshot(context.Background(), id)
		if got := snap.State(); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	// Carried out once: a second sweep queues nothing more.
	if err := ta.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ta.queued) != 1 {
		t.Errorf("queued %d calls, want 1", len(ta.queued))
	}
	a, _ := ta.load(context.Background(), "expired")
	if a.rec.State != messages.ApprovalExpired {
		t.Errorf("expired approval is %s", a.rec.State)
	}
	_ = store
}

func TestHoldIsIdempotent(t *testing.T) {
	ta, l, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "turn-1", time.Hour)
	ta.ask(t, "c1", "a", "turn-1", time.Hour)
	all, err := ta.all(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("approvals %v, %v; want one", all, err)
	}
	if snap, _ := l.Snapshot(context.Background(), "c1"); snap.State() != messages.StateAwaitingApproval {
		t.Errorf("call is %s", snap.State())
	}
}

// TestApprovedCallKeepsTheSubmittersTrace: the approval's record keeps
// the submit's trace context; the decision is a span of the decider's
// trace linked to it, and the approved call is queued under a span of the
// submit's trace, linked to the decision.
func TestApprovedCallKeepsTheSubmittersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ta, _, store := newTestApprovalsRoom(t)
	ta.tracer = tp.Tracer("toolbus")
	submitCtx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Agent: "a", QueuedAt: now, Deadline: now.Add(time.Minute)}
	if err := ta.hold(submitCtx, call, &messages.Approval{ApprovalID: "c1", CallID: "c1", Tool: "t-echo", Agent: "a", Mode: messages.ApprovalQueue,
		State: messages.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	submit.End()
	stored, _, err := store.Get(context.Background(), "approvals.c1")
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(stored, &fields); err != nil {
		t.Fatal(err)
	}
	submitID := submit.SpanContext()
	if want := "00-" + submitID.TraceID().String() + "-" + submitID.SpanID().String() + "-01"; fields["traceparent"] != want {
		t.Fatalf("stored traceparent %v, want %s", fields["traceparent"], want)
	}

	deciderCtx, decider := tp.Tracer("test").Start(context.Background(), "operator")
	if _, err := ta.decide(deciderCtx, &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	decider.End()
	if len(ta.queuedIn) != 1 || ta.queuedIn[0].TraceID() != submitID.TraceID() {
		t.Fatalf("queued in %v, want the submit's trace %s", ta.queuedIn, submitID.TraceID())
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	decision, release := spans["toolbus.approval.decide"], spans["toolbus.approval.release"]
	if decision == nil || release == nil {
		t.Fatalf("spans %v: want a decision and a release", spans)
	}
	if decision.Parent().SpanID() != decider.SpanContext().SpanID() || len(decision.Links()) != 1 || decision.Links()[0].SpanContext.SpanID() != submitID.SpanID() {
		t.Errorf("decision span: parent %v, links %v; want the decider's child linked to the submit", decision.Parent(), decision.Links())
	}
	if release.Parent().SpanID() != submitID.SpanID() || release.SpanContext().TraceID() != submitID.TraceID() ||
		len(release.Links()) != 1 || release.Links()[0].SpanContext.SpanID() != decision.SpanContext().SpanID() {
		t.Errorf("release span: parent %v, links %v; want the submit's child linked to the decision", release.Parent(), release.Links())
	}
	if ta.queuedIn[0].SpanID() != release.SpanContext().SpanID() {
		t.Errorf("the call was queued in span %s, not the release's", ta.queuedIn[0].SpanID())
	}
	// The decision kept the trace context in the record.
	if stored, _, _ = store.Get(context.Background(), "approvals.c1"); !strings.Contains(string(stored), submitID.TraceID().String()) {
		t.Errorf("decided record lost the trace context: %s", stored)
	}
}

// TestApprovalRecordWithoutTrace: a record stored before approvals kept
// a trace context (the bare Approval) decides as before, its call queued
// in the decider's trace.
func TestApprovalRecordWithoutTrace(t *testing.T) {
	ta, l, store := newTestApprovalsRoom(t)
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Agent: "a", QueuedAt: now, Deadline: now.Add(time.Minute)}
	if _, err := l.Hold(context.Background(), call); err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(&messages.Approval{ApprovalID: "c1", CallID: "c1", Tool: "t-echo", Agent: "a", Mode: messages.ApprovalQueue,
		State: messages.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	if _, err := store.Create(context.Background(), "approvals.c1", old); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	deciderCtx, decider := tp.Tracer("test").Start(context.Background(), "operator")
	defer decider.End()
	reply, err := ta.decide(deciderCtx, &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops"})
	if err != nil || reply.State != messages.StateQueued {
		t.Fatalf("decide: %+v %v", reply, err)
	}
	if len(ta.queuedIn) != 1 || ta.queuedIn[0].TraceID() != decider.SpanContext().TraceID() {
		t.Fatalf("queued in %v, want the decider's trace", ta.queuedIn)
	}
}

// TestApprovedCallKeepsTheCallersTraceWithoutATracer: with no tracer
// installed no span is opened, and the approved call is queued with the
// trace context the submit came with, as it came.
func TestApprovedCallKeepsTheCallersTraceWithoutATracer(t *testing.T) {
	ta, _, _ := newTestApprovalsRoom(t)
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Agent: "a", QueuedAt: now, Deadline: now.Add(time.Minute)}
	if err := ta.hold(trace.ContextWithRemoteSpanContext(context.Background(), caller), call, &messages.Approval{ApprovalID: "c1", CallID: "c1", Tool: "t-echo",
		Agent: "a", Mode: messages.ApprovalQueue, State: messages.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.decide(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if len(ta.queuedIn) != 1 || ta.queuedIn[0].TraceID() != caller.TraceID() || ta.queuedIn[0].SpanID() != caller.SpanID() {
		t.Fatalf("queued in %v, want the caller's span context %v", ta.queuedIn, caller)
	}
}

// TestSweepQueuesInTheSubmittersTrace: a decision that a stopped
// coordinator stored but did not carry out is carried out by the sweep,
// in the submit's trace, which the stored decision kept.
func TestSweepQueuesInTheSubmittersTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ta, _, _ := newTestApprovalsRoom(t)
	ta.tracer = tp.Tracer("toolbus")
	submitCtx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	defer submit.End()
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: "c1", Tool: "t-echo", Namespace: "t", Method: "echo", Agent: "a", QueuedAt: now, Deadline: now.Add(time.Minute)}
	if err := ta.hold(submitCtx, call, &messages.Approval{ApprovalID: "c1", CallID: "c1", Tool: "t-echo", Agent: "a", Mode: messages.ApprovalQueue,
		State: messages.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stored, err := ta.load(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	stored.rec.State, stored.rec.DecidedBy, stored.rec.DecidedAt = messages.ApprovalApproved, "ops", time.Now().Add(-time.Minute)
	if err := ta.save(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	if err := ta.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ta.queuedIn) != 1 || ta.queuedIn[0].TraceID() != submit.SpanContext().TraceID() {
		t.Fatalf("queued in %v, want the submit's trace %s", ta.queuedIn, submit.SpanContext().TraceID())
	}
}

// TestWithdraw: a cancel of a call awaiting its approval withdraws the
// approval, by whoever cancelled and why, and ends the call cancelled; a
// decision on it then is refused with approval_not_pending, naming what
// became of it, and both are audited. So is a decision on a pending
// approval whose call ended without settling it.
func TestWithdraw(t *testing.T) {
	ctx := context.Background()
	ta, l, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "", time.Hour)
	res, err := ta.withdraw(ctx, "c1", &messages.CancelInfo{Reason: "user pressed stop", By: "a"})
	if err != nil || res.Status != messages.StateCancelled || res.Error == nil || res.Error.Code != messages.ResultCancelled {
		t.Fatalf("withdraw: %+v %v", res, err)
	}
	stored, err := ta.load(ctx, "c1")
	if err != nil || stored.rec.State != messages.ApprovalWithdrawn || stored.rec.DecidedBy != "a" || stored.rec.DecisionReason != "user pressed stop" {
		t.Fatalf("the withdrawn approval: %+v %v", stored, err)
	}
	if snap, _ := l.Snapshot(ctx, "c1"); snap.State() != messages.StateCancelled || snap.Approval.Approval.State != messages.ApprovalWithdrawn {
		t.Fatalf("the call: %s, its approval event %+v", snap.State(), snap.Approval.Approval)
	}
	if reply, err := ta.list(ctx, &messages.ListApprovalsRequest{}); err != nil || len(reply.Approvals) != 0 {
		t.Fatalf("pending approvals after the withdrawal: %+v %v", reply, err)
	}
	_, err = ta.decide(ctx, &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "ops"})
	if !errors.Is(err, messages.ErrApprovalNotPending) || !strings.Contains(err.Error(), "withdrawn: call c1 was cancelled by a (user pressed stop)") {
		t.Fatalf("approving a withdrawn approval: %v", err)
	}
	if _, err := ta.withdraw(ctx, "c1", &messages.CancelInfo{Reason: "again"}); err != nil {
		t.Fatalf("withdrawing twice: %v", err)
	}
	if got, want := ta.audited.list(), messages.AuditWithdrawn+"a,"+messages.AuditRefused+"ops"; got != want {
		t.Errorf("audited %q, want %q", got, want)
	}
	if len(ta.queued) != 0 {
		t.Errorf("queued %d calls", len(ta.queued))
	}

	// An approval decided first is not withdrawn.
	ta.ask(t, "c2", "a", "", time.Hour)
	if _, err := ta.decide(ctx, &messages.DecideRequest{ApprovalID: "c2", Decision: messages.DecisionDeny, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.withdraw(ctx, "c2", &messages.CancelInfo{Reason: "late"}); !errors.Is(err, errNotWithdrawn) {
		t.Fatalf("withdrawing a denied approval: %v", err)
	}

	// A call that ended with its approval pending (a cancel that left it).
	ta.ask(t, "c3", "a", "", time.Hour)
	cancelled := messages.CallResult{CallID: "c3", Status: messages.StateCancelled, IsError: true, Error: &messages.ResultError{Code: messages.ResultCancelled, Message: "gone"}}
	if _, err := l.Commit(ctx, "", "t", &cancelled, ""); err != nil {
		t.Fatal(err)
	}
	_, err = ta.decide(ctx, &messages.DecideRequest{ApprovalID: "c3", Decision: messages.DecisionApprove, By: "ops"})
	if !errors.Is(err, messages.ErrApprovalNotPending) || !strings.Contains(err.Error(), "the call ended cancelled before a decision: gone") {
		t.Fatalf("approving the approval of an ended call: %v", err)
	}
	if stored, err := ta.load(ctx, "c3"); err != nil || stored.rec.State != messages.ApprovalWithdrawn {
		t.Fatalf("the approval of the ended call: %+v %v", stored, err)
	}
	if len(ta.queued) != 0 {
		t.Errorf("queued %d calls", len(ta.queued))
	}
}

// TestRefusedAnswerIsAudited: an agent's answer to an approval that waits
// for an operator is refused and audited.
func TestRefusedAnswerIsAudited(t *testing.T) {
	ta, _, _ := newTestApprovalsRoom(t)
	ta.ask(t, "c1", "a", "", time.Hour)
	if _, err := ta.answer(context.Background(), &messages.DecideRequest{ApprovalID: "c1", Decision: messages.DecisionApprove, By: "u"}); !errors.Is(err, messages.ErrDenied) {
		t.Fatal(err)
	}
	if got, want := ta.audited.list(), messages.AuditRefused+"u"; got != want {
		t.Errorf("audited %q, want %q", got, want)
	}
}
