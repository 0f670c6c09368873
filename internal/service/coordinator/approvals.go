package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// approvals keeps the approvals that calls wait for, and the approvals
// remembered for an agent and tool (grants), in the approvals bucket; it
// carries out the decisions made on them.
type approvals struct {
	store  kvStore
	ledger callLedger
	turns  *turns
	policy *atomic.Pointer[policy.Policy]
	// tool returns the definition of a tool in the catalog, or nil.
	tool func(name string) *messages.ToolDefinition
	// enqueue queues an approved call and waits until it is queued.
	enqueue func(ctx context.Context, call *messages.CallRequest) error
	audit   auditFunc
	// grantTTL is how long a remembered approval lasts.
	grantTTL time.Duration
	// settled is how long after a decision the sweeper starts checking
	// that it took effect.
	settled time.Duration
	// tracer opens the decision's and the release's spans.
	tracer trace.Tracer
	log    *slog.Logger
}

// callLedger is what the approvals room reads and writes of the ledger.
type callLedger interface {
	Snapshot(ctx context.Context, callID string) (*ledger.Snapshot, error)
	Append(ctx context.Context, bucket, ns string, ev *messages.CallEvent) (uint64, error)
	Hold(ctx context.Context, call *messages.CallRequest) (uint64, error)
	Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, notify string) (bool, error)
}

// retryingLedger is a callLedger whose reads and writes are retried while
// the events stream does not answer, at most wait each (see
// retryTransient). An event stored twice by a retry is the same event
// twice; a retried commit whose first attempt was stored reports that
// another result won, and the call has its result either way.
type retryingLedger struct {
	callLedger
	wait time.Duration
}

func (l retryingLedger) Snapshot(ctx context.Context, callID string) (snap *ledger.Snapshot, err error) {
	err = retryTransient(ctx, l.wait, func(ctx context.Context) (err error) {
		snap, err = l.callLedger.Snapshot(ctx, callID)
		return err
	})
	return snap, err
}

func (l retryingLedger) Append(ctx context.Context, bucket, ns string, ev *messages.CallEvent) (seq uint64, err error) {
	err = retryTransient(ctx, l.wait, func(ctx context.Context) (err error) {
		seq, err = l.callLedger.Append(ctx, bucket, ns, ev)
		return err
	})
	return seq, err
}

func (l retryingLedger) Hold(ctx context.Context, call *messages.CallRequest) (seq uint64, err error) {
	err = retryTransient(ctx, l.wait, func(ctx context.Context) (err error) {
		seq, err = l.callLedger.Hold(ctx, call)
		return err
	})
	return seq, err
}

func (l retryingLedger) Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, notify string) (won bool, err error) {
	err = retryTransient(ctx, l.wait, func(ctx context.Context) (err error) {
		won, err = l.callLedger.Commit(ctx, bucket, ns, res, notify)
		return err
	})
	return won, err
}

// auditFunc records a decision about a call in the audit stream.
type auditFunc func(ctx context.Context, decision string, call *messages.CallRequest, def *messages.ToolDefinition, d policy.Decision, by string)

// grant is a remembered approval.
type grant struct {
	ApprovalID    string    `json:"approval_id"`
	PolicyVersion string    `json:"policy_version"`
	By            string    `json:"by"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// granted reports whether an approval remembered for this agent and tool
// (in this turn, or in every turn) still holds under the policy version.
func (ap *approvals) granted(ctx context.Context, call *messages.CallRequest, version string) bool {
	turns := []string{""}
	if call.Turn != "" {
		turns = []string{call.Turn, ""}
	}
	for _, turn := range turns {
		key, err := messages.GrantKey(call.Agent, call.Tool, turn)
		if err != nil {
			continue
		}
		value, _, err := ap.store.Get(ctx, key)
		if err != nil {
			continue
		}
		var g grant
		if json.Unmarshal(value, &g) == nil && g.PolicyVersion == version && time.Now().Before(g.ExpiresAt) {
			return true
		}
	}
	return false
}

// hold records a call that waits for an approval: the call is in the
// ledger, and so in its turn (its queued event names it), the approval in the approvals bucket, and nothing
// is queued for a worker until someone approves. The approval's record
// keeps the submit's trace context, for the call to be queued in its
// trace whichever coordinator carries out the decision.
func (ap *approvals) hold(ctx context.Context, call *messages.CallRequest, a *messages.Approval) error {
	if _, err := ap.ledger.Hold(ctx, call); err != nil {
		return unavailable(err, "record call %s", call.CallID)
	}
	key, err := messages.ApprovalKey(call.CallID)
	if err != nil {
		return err
	}
	trace.SpanFromContext(ctx).SetAttributes(callIDAttributes(call.CallID)...)
	data, err := json.Marshal(approvalRecord{Approval: *a, submitterTrace: traceOf(ctx)})
	if err != nil {
		return err
	}
	if _, err := ap.store.Create(ctx, key, data); err != nil {
		if errors.Is(err, errKeyExists) {
			return nil // an idempotent retry of the same call
		}
		return unavailable(err, "record approval of call %s", call.CallID)
	}
	if _, err := ap.ledger.Append(ctx, messages.TurnBucket(call.Turn), call.Namespace, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventApproval, Time: a.CreatedAt, Approval: a}); err != nil {
		return unavailable(err, "record approval of call %s", call.CallID)
	}
	return nil
}

// list answers approvals.list: the approvals in a state (pending unless
// asked otherwise, or "all"), of an agent or turn, oldest first.
func (ap *approvals) list(ctx context.Context, lr *messages.ListApprovalsRequest) (*messages.ListApprovalsReply, error) {
	state := lr.State
	if state == "" {
		state = messages.ApprovalPending
	}
	all, err := ap.all(ctx)
	if err != nil {
		return nil, err
	}
	reply := &messages.ListApprovalsReply{Approvals: []messages.Approval{}}
	pol := ap.policy.Load()
	for _, a := range all {
		if (state == "all" || a.rec.State == state) && (lr.Agent == "" || a.rec.Agent == lr.Agent) && (lr.Turn == "" || a.rec.Turn == lr.Turn) && mayReadQuietly(ctx, a.rec.Agent) {
			// As decide refuses to approve it.
			a.rec.Voided = a.rec.State == messages.ApprovalPending && a.rec.PolicyVersion != "" && pol != nil && pol.Version() != a.rec.PolicyVersion
			reply.Approvals = append(reply.Approvals, a.rec)
		}
	}
	return reply, nil
}

// storedApproval is an approval with the submitter's trace context and
// the revision it was read at.
type storedApproval struct {
	rec      messages.Approval
	trace    submitterTrace
	revision uint64
}

const approvalsPrefix = "approvals."

func (ap *approvals) all(ctx context.Context) ([]storedApproval, error) {
	keys, err := ap.store.Keys(ctx, approvalsPrefix+"*")
	if err != nil {
		return nil, unavailable(err, "list approvals")
	}
	out := make([]storedApproval, 0, len(keys))
	for _, k := range keys {
		a, err := ap.load(ctx, strings.TrimPrefix(k, approvalsPrefix))
		if err != nil {
			if errors.Is(err, messages.ErrApprovalNotFound) {
				continue
			}
			return nil, err
		}
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b storedApproval) int { return a.rec.CreatedAt.Compare(b.rec.CreatedAt) })
	return out, nil
}

func (ap *approvals) load(ctx context.Context, id string) (*storedApproval, error) {
	key, err := messages.ApprovalKey(id)
	if err != nil {
		return nil, err
	}
	value, revision, err := ap.store.Get(ctx, key)
	if errors.Is(err, errNoKey) {
		return nil, messages.Errorf(messages.CodeApprovalNotFound, "no approval %s", id)
	}
	if err != nil {
		return nil, unavailable(err, "read approval %s", id)
	}
	var rec approvalRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, messages.Errorf(messages.CodeInternal, "approval %s is unreadable: %v", id, err)
	}
	return &storedApproval{rec: rec.Approval, trace: rec.submitterTrace, revision: revision}, nil
}

// answer is approvals.answer: an agent decides an approval in prompt mode.
func (ap *approvals) answer(ctx context.Context, dr *messages.DecideRequest) (*messages.DecideReply, error) {
	a, err := ap.load(ctx, dr.ApprovalID)
	if err != nil {
		return nil, err
	}
	if err := mayActFor(ctx, a.rec.Agent); err != nil {
		return nil, err
	}
	if a.rec.Mode != messages.ApprovalPrompt {
		err := messages.Errorf(messages.CodeDenied, "approval %s waits for an operator (mode %s); an agent can answer only approvals in prompt mode", dr.ApprovalID, a.rec.Mode)
		ap.refused(ctx, &a.rec, dr, err)
		return nil, err
	}
	return ap.decide(ctx, dr)
}

// decide approves or denies a pending approval (approvals.decide). An
// approved call is queued and runs once; a denied or expired one ends with
// a denied result. A decision on an approval that is no longer pending is
// refused with approval_not_pending; every refusal of a decision on an
// approval that exists is audited (refused).
//
// The decision is a span in the decider's trace (the request's trace
// context), linked to the submit's; the approved call is queued in the
// submit's trace, so the worker's run of it joins the trace the agent's
// call began (see release).
func (ap *approvals) decide(ctx context.Context, dr *messages.DecideRequest) (_ *messages.DecideReply, err error) {
	ctx, span := ap.tracer.Start(ctx, "toolbus.approval.decide", trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.approval_id", dr.ApprovalID), attribute.String("toolbus.approval.decision", dr.Decision))
	}
	var a *storedApproval
	defer func() {
		if err != nil {
			tracing.Failed(span, string(messages.CodeOf(err)), err.Error())
			if a != nil && isRefusal(err) {
				ap.refused(ctx, &a.rec, dr, err)
			}
		}
		span.End()
	}()
	if dr.Decision != messages.DecisionApprove && dr.Decision != messages.DecisionDeny {
		return nil, messages.Errorf(messages.CodeBadRequest, "decision must be %q or %q", messages.DecisionApprove, messages.DecisionDeny)
	}
	if dr.By == "" {
		return nil, messages.Errorf(messages.CodeBadRequest, "by is required: say who decides")
	}
	switch dr.Remember {
	case "":
		dr.Remember = messages.RememberCall
	case messages.RememberCall, messages.RememberTurn, messages.RememberAgentTool:
	default:
		return nil, messages.Errorf(messages.CodeBadRequest, "remember must be %q, %q or %q", messages.RememberCall, messages.RememberTurn, messages.RememberAgentTool)
	}
	loaded, err := ap.load(ctx, dr.ApprovalID)
	if err != nil {
		return nil, err
	}
	a = loaded
	if span.IsRecording() {
		span.SetAttributes(append(callIDAttributes(a.rec.CallID), attribute.String("gen_ai.tool.name", a.rec.Tool))...)
		if sc := a.trace.spanContext(); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	if a.rec.State != messages.ApprovalPending {
		return nil, notPending(&a.rec)
	}
	now := time.Now().UTC()
	if now.After(a.rec.ExpiresAt) {
		expired := *a
		if err := ap.expire(ctx, &expired); err != nil {
			return nil, err
		}
		a = &expired
		return nil, notPending(&a.rec)
	}
	// A call that ended while its approval waited (cancelled by a
	// coordinator that left the approval pending) settles it now.
	snap, err := ap.ledger.Snapshot(ctx, a.rec.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", a.rec.CallID)
	}
	if snap.Result != nil && snap.Result.Result != nil {
		if err := ap.settleEnded(ctx, a, snap.Result.Result); err != nil {
			return nil, err
		}
		return nil, notPending(&a.rec)
	}
	// A grant for no turn is the grant for every turn (agent_tool), so
	// "this turn" of a call made outside any turn cannot be remembered.
	if dr.Decision == messages.DecisionApprove && dr.Remember == messages.RememberTurn && a.rec.Turn == "" {
		return nil, messages.Errorf(messages.CodeBadRequest, "remember %q needs a turn, and call %s was made outside any turn; remember %q or %q instead", messages.RememberTurn, a.rec.CallID, messages.RememberCall, messages.RememberAgentTool)
	}
	if dr.Decision == messages.DecisionApprove && a.rec.PolicyVersion != "" {
		if p := ap.policy.Load(); p != nil && p.Version() != a.rec.PolicyVersion {
			return nil, messages.Errorf(messages.CodeConflict, "the policy changed since approval %s was asked; submit the call again", a.rec.ApprovalID)
		}
	}
	decided := *a
	decided.rec.DecidedBy, decided.rec.DecidedAt, decided.rec.DecisionReason, decided.rec.Remember = dr.By, now, dr.Reason, dr.Remember
	decided.rec.State = messages.ApprovalApproved
	if dr.Decision == messages.DecisionDeny {
		decided.rec.State = messages.ApprovalDenied
	}
	if err := ap.save(ctx, &decided); err != nil {
		if errors.Is(err, messages.ErrConflict) {
			// Settled by someone else at the same time, most likely.
			if current, lerr := ap.load(ctx, dr.ApprovalID); lerr == nil && current.rec.State != messages.ApprovalPending {
				a = current
				return nil, notPending(&a.rec)
			}
		}
		return nil, err
	}
	a = &decided
	res, err := ap.carryOut(ctx, &a.rec, a.trace)
	if err != nil {
		return nil, err
	}
	reply := &messages.DecideReply{Approval: a.rec, State: messages.StateQueued}
	if res != nil {
		// Denied; or it ended meanwhile (a cancel that came first).
		reply.State = res.Status
	}
	return reply, nil
}

// notPending is the refusal of a decision on an approval that is no
// longer pending, saying what became of it.
func notPending(a *messages.Approval) error {
	var what string
	switch a.State {
	case messages.ApprovalExpired:
		what = "it expired at " + a.ExpiresAt.Format(time.RFC3339)
	case messages.ApprovalWithdrawn:
		if a.DecidedBy == withdrawnByToolbus {
			what = "it was withdrawn: " + a.DecisionReason
			break
		}
		what = "it was withdrawn: call " + a.CallID + " was cancelled"
		if a.DecidedBy != "" {
			what += " by " + a.DecidedBy
		}
		if a.DecisionReason != "" {
			what += " (" + a.DecisionReason + ")"
		}
	default:
		what = "it was already " + a.State + " by " + a.DecidedBy
	}
	return messages.Errorf(messages.CodeApprovalNotPending, "approval %s is no longer pending: %s", a.ApprovalID, what)
}

// isRefusal tells a refusal of a decision from a failure to carry it out
// (JetStream did not answer), which is not audited.
func isRefusal(err error) bool {
	switch messages.CodeOf(err) {
	case messages.CodeUnavailable, messages.CodeTimeout, messages.CodeInternal:
		return false
	}
	return true
}

// refused audits a refused decision on an approval: who asked, and why it
// was refused.
func (ap *approvals) refused(ctx context.Context, a *messages.Approval, dr *messages.DecideRequest, err error) {
	call := &messages.CallRequest{CallID: a.CallID, Tool: a.Tool, Agent: a.Agent, Turn: a.Turn, Arguments: a.Arguments}
	d := policy.Decision{Version: a.PolicyVersion, RuleID: a.RuleID, Reason: dr.Decision + " refused: " + err.Error()}
	ap.audit(ctx, messages.AuditRefused, call, ap.tool(a.Tool), d, dr.By)
}

// withdraw settles the pending approval of a call cancelled before anyone
// decided (calls.cancel): the approval becomes withdrawn, by whoever
// cancelled and with the cancel's reason, the call ends cancelled, and
// the withdrawal is audited. It returns errNotWithdrawn when there is no
// approval to withdraw: none is stored, or someone decided it first.
func (ap *approvals) withdraw(ctx context.Context, callID string, info *messages.CancelInfo) (*messages.CallResult, error) {
	a, err := ap.load(ctx, callID)
	if errors.Is(err, messages.ErrApprovalNotFound) {
		return nil, errNotWithdrawn
	}
	if err != nil {
		return nil, err
	}
	switch a.rec.State {
	case messages.ApprovalWithdrawn:
		// Withdrawn by a cancel that stopped half-way: finish it.
	case messages.ApprovalPending:
		a.rec.State, a.rec.DecidedBy, a.rec.DecidedAt, a.rec.DecisionReason = messages.ApprovalWithdrawn, info.By, time.Now().UTC(), info.Reason
		if err := ap.save(ctx, a); err != nil {
			if errors.Is(err, messages.ErrConflict) {
				return nil, errNotWithdrawn // decided at the same time
			}
			return nil, err
		}
	default:
		return nil, errNotWithdrawn
	}
	res, err := ap.carryOut(ctx, &a.rec, a.trace)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, messages.Errorf(messages.CodeInternal, "call %s has no result after its approval was withdrawn", callID)
	}
	return res, nil
}

// errNotWithdrawn: the call has no pending approval to withdraw.
var errNotWithdrawn = errors.New("no pending approval to withdraw")

// withdrawnByToolbus is who withdrew the approval of a call that ended
// without a cancel settling it.
const withdrawnByToolbus = "toolbus"

// settleEnded withdraws the pending approval of a call that ended
// without a decision (a cancel of a coordinator that left its approval
// pending), and audits it.
func (ap *approvals) settleEnded(ctx context.Context, a *storedApproval, res *messages.CallResult) error {
	a.rec.State, a.rec.DecidedBy, a.rec.DecidedAt = messages.ApprovalWithdrawn, withdrawnByToolbus, time.Now().UTC()
	a.rec.DecisionReason = "the call ended " + string(res.Status) + " before a decision"
	if res.Error != nil && res.Error.Message != "" {
		a.rec.DecisionReason += ": " + res.Error.Message
	}
	if err := ap.save(ctx, a); err != nil {
		return err
	}
	call := &messages.CallRequest{CallID: a.rec.CallID, Tool: a.rec.Tool, Agent: a.rec.Agent, Turn: a.rec.Turn, Arguments: a.rec.Arguments}
	ap.audit(ctx, messages.AuditWithdrawn, call, ap.tool(a.rec.Tool), policy.Decision{Version: a.rec.PolicyVersion, RuleID: a.rec.RuleID, Reason: a.rec.DecisionReason}, a.rec.DecidedBy)
	return nil
}

// save writes a decided approval if nobody decided it meanwhile.
func (ap *approvals) save(ctx context.Context, a *storedApproval) error {
	key, err := messages.ApprovalKey(a.rec.ApprovalID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(approvalRecord{Approval: a.rec, submitterTrace: a.trace})
	if err != nil {
		return err
	}
	if _, err := ap.store.Update(ctx, key, data, a.revision); err != nil {
		if errors.Is(err, errStale) {
			return messages.Errorf(messages.CodeConflict, "approval %s was changed by someone else at the same time", a.rec.ApprovalID)
		}
		return unavailable(err, "store approval %s", a.rec.ApprovalID)
	}
	return nil
}

// carryOut makes a decided approval take effect: the decision is recorded
// with the call, then an approved call is queued and a refused or
// withdrawn one ends. Every step is idempotent, so the sweeper can finish
// what a coordinator that stopped half-way began. submitter is the trace
// context of the submit that asked for the approval, which an approved
// call is queued in. It returns the call's result: the one it stored, or
// the one the call had already (ended some other way first); nil for an
// approved call it queued, or had queued.
func (ap *approvals) carryOut(ctx context.Context, a *messages.Approval, submitter submitterTrace) (*messages.CallResult, error) {
	snap, err := ap.ledger.Snapshot(ctx, a.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", a.CallID)
	}
	if snap.Result != nil {
		return snap.Result.Result, nil
	}
	if snap.Namespace == "" {
		return nil, messages.Errorf(messages.CodeCallNotFound, "call %s has no request in the ledger", a.CallID)
	}
	if snap.Approval == nil || snap.Approval.Approval == nil || snap.Approval.Approval.State != a.State {
		if _, err := ap.ledger.Append(ctx, snap.Bucket, snap.Namespace, &messages.CallEvent{CallID: a.CallID, Kind: messages.EventApproval, Time: time.Now().UTC(), Approval: a}); err != nil {
			return nil, unavailable(err, "record decision on call %s", a.CallID)
		}
		if snap, err = ap.ledger.Snapshot(ctx, a.CallID); err != nil {
			return nil, unavailable(err, "read call %s", a.CallID)
		}
	}
	if snap.Queued == nil || snap.Queued.Request == nil {
		return nil, messages.Errorf(messages.CodeCallNotFound, "call %s has no request in the ledger", a.CallID)
	}
	call := *snap.Queued.Request
	audited := &messages.CallRequest{CallID: call.CallID, Tool: call.Tool, Agent: call.Agent, Turn: call.Turn, Arguments: call.Arguments}
	def := ap.tool(call.Tool)
	d := policy.Decision{Version: a.PolicyVersion, RuleID: a.RuleID, Reason: a.DecisionReason}
	if a.State != messages.ApprovalApproved {
		var res messages.CallResult
		decision := messages.AuditRejected
		switch a.State {
		case messages.ApprovalWithdrawn:
			decision = messages.AuditWithdrawn
			res = cancelledResult(snap, &messages.CancelInfo{Reason: a.DecisionReason, By: a.DecidedBy})
		default:
			why := "the approval was denied by " + a.DecidedBy
			if a.State == messages.ApprovalExpired {
				decision, why = messages.AuditExpired, "the approval expired at "+a.ExpiresAt.Format(time.RFC3339)
			}
			if a.DecisionReason != "" {
				why += ": " + a.DecisionReason
			}
			res = endResult(&call, messages.StateDenied, messages.ResultDenied, why)
		}
		won, err := ap.ledger.Commit(ctx, snap.Bucket, snap.Namespace, &res, call.Notify)
		if err != nil {
			return nil, unavailable(err, "end call %s", call.CallID)
		}
		if !won {
			// Another result came first: that one is the call's.
			if snap, err = ap.ledger.Snapshot(ctx, a.CallID); err != nil {
				return nil, unavailable(err, "read call %s", a.CallID)
			}
			if snap.Result != nil && snap.Result.Result != nil {
				return snap.Result.Result, nil
			}
		}
		ap.audit(ctx, decision, audited, def, d, a.DecidedBy)
		return &res, nil
	}
	// Queued once: a queued event after the approval means it was done.
	if snap.Queued.Seq > snap.Approval.Seq {
		return nil, nil
	}
	if a.Remember != messages.RememberCall && a.Remember != "" {
		turn := ""
		if a.Remember == messages.RememberTurn {
			turn = a.Turn
		}
		if key, err := messages.GrantKey(a.Agent, a.Tool, turn); err == nil {
			g, _ := json.Marshal(grant{ApprovalID: a.ApprovalID, PolicyVersion: a.PolicyVersion, By: a.DecidedBy, ExpiresAt: time.Now().Add(ap.grantTTL)})
			if _, err := ap.store.Put(ctx, key, g); err != nil {
				return nil, unavailable(err, "remember approval %s", a.ApprovalID)
			}
		}
	}
	// The deadline counts from now: the wait for a person is not the tool's time.
	timeout := call.Deadline.Sub(call.QueuedAt)
	call.QueuedAt = time.Now().UTC()
	call.Deadline = call.QueuedAt.Add(timeout)
	if err := ap.release(ctx, &call, submitter); err != nil {
		return nil, err
	}
	ap.audit(ctx, messages.AuditApproved, audited, def, d, a.DecidedBy)
	return nil, nil
}

// release queues an approved call in the trace of the submit that asked
// for the approval: under a span that is the submit's child (or, with no
// tracer installed, the submit's trace context itself), linked to the
// decision's span in ctx. An approval stored without a trace context (by
// an older coordinator, or of a submit that had none) queues its call in
// ctx's trace, the decision's.
func (ap *approvals) release(ctx context.Context, call *messages.CallRequest, submitter submitterTrace) error {
	parent := ctx
	var opts []trace.SpanStartOption
	if sc := submitter.spanContext(); sc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		if decision := trace.SpanContextFromContext(ctx); decision.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: decision}))
		}
	}
	opts = append(opts, trace.WithAttributes(append(callIDAttributes(call.CallID), attribute.String("gen_ai.tool.name", call.Tool))...))
	ctx, span := ap.tracer.Start(parent, "toolbus.approval.release", opts...)
	defer span.End()
	if err := ap.enqueue(ctx, call); err != nil {
		tracing.Failed(span, string(messages.CodeOf(err)), err.Error())
		return err
	}
	return nil
}

// traced is h with the request's trace context (its traceparent and
// tracestate headers) in its context: a decision is a span of the
// decider's trace.
func traced(h handlerFunc) handlerFunc {
	return func(ctx context.Context, req *request) (any, error) {
		return h(tracing.Extract(ctx, req.Headers()), req)
	}
}

// approvalRecord is an approval as the approvals bucket keeps it: the
// Approval and the trace context of the submit that asked for it.
type approvalRecord struct {
	messages.Approval
	submitterTrace
}

// submitterTrace is the W3C trace context of the submit of a held call,
// its traceparent and tracestate as they were propagated onwards (so
// checked and bounded by the propagator); empty when the submit had none.
type submitterTrace struct {
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// traceOf is the trace context of ctx's span.
func traceOf(ctx context.Context) submitterTrace {
	h := map[string][]string{}
	tracing.Inject(ctx, h)
	var t submitterTrace
	if v := h[messages.HeaderTraceParent]; len(v) > 0 {
		t.TraceParent = v[0]
	}
	if v := h[messages.HeaderTraceState]; len(v) > 0 {
		t.TraceState = v[0]
	}
	return t
}

// spanContext is the submit's span context, remote; invalid when there is none.
func (t submitterTrace) spanContext() trace.SpanContext {
	if t.TraceParent == "" {
		return trace.SpanContext{}
	}
	h := map[string][]string{messages.HeaderTraceParent: {t.TraceParent}}
	if t.TraceState != "" {
		h[messages.HeaderTraceState] = []string{t.TraceState}
	}
	return trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
}

func callIDAttributes(callID string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("toolbus.call_id", callID), attribute.String("gen_ai.tool.call.id", callID)}
}

func (ap *approvals) expire(ctx context.Context, a *storedApproval) error {
	a.rec.State = messages.ApprovalExpired
	a.rec.DecidedAt = time.Now().UTC()
	a.rec.DecidedBy = "toolbus"
	if err := ap.save(ctx, a); err != nil {
		return err
	}
	_, err := ap.carryOut(ctx, &a.rec, a.trace)
	return err
}

// recoveryWindow is how long after a decision the sweeper checks that it took effect.
const recoveryWindow = 10 * time.Minute

// sweep expires approvals whose time ran out and finishes decisions that
// a stopped coordinator left half done.
func (ap *approvals) sweep(ctx context.Context) error {
	all, err := ap.all(ctx)
	if err != nil {
		return err
	}
	countPending(all)
	now := time.Now()
	for i := range all {
		a := &all[i]
		switch {
		case a.rec.State == messages.ApprovalPending && now.After(a.rec.ExpiresAt):
			if err := ap.expire(ctx, a); err != nil && !errors.Is(err, messages.ErrConflict) {
				ap.log.Warn("could not expire approval", "approval", a.rec.ApprovalID, "error", err)
			}
		case a.rec.State != messages.ApprovalPending && now.Sub(a.rec.DecidedAt) > ap.settled && now.Sub(a.rec.DecidedAt) < recoveryWindow:
			// Decided a while ago: make sure it took effect.
			if _, err := ap.carryOut(ctx, &a.rec, a.trace); err != nil {
				ap.log.Warn("could not carry out approval", "approval", a.rec.ApprovalID, "error", err)
			}
		}
	}
	return nil
}
