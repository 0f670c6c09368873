package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// verdict is what policy and exposure rules say of one call.
type verdict struct {
	// approval is set when the call must wait for a decision.
	approval *messages.Approval
	// audit is the decision to record; empty when there is no policy or rule to account for.
	audit    string
	decision policy.Decision
}

// authorize applies the policy and the agent's approval rules to a call.
// A denial is returned as an error with code denied.
func (c *Coordinator) authorize(ctx context.Context, call *messages.CallRequest, tool *catalog.Tool, admission *exposure.Admission) (verdict, error) {
	p := c.policy.Load()
	var v verdict
	ask := false
	if p != nil {
		v.decision = p.Evaluate(policy.Request{Tool: tool.Definition, Agent: call.Agent, Arguments: call.Arguments})
		switch v.decision.Effect {
		case policy.Deny:
			c.audit(ctx, messages.AuditDenied, call, &tool.Definition, v.decision, "")
			return v, messages.Errorf(messages.CodeDenied, "policy denies %s to agent %q: %s", call.Tool, call.Agent, v.decision.Reason)
		case policy.Ask:
			ask = true
		}
		v.audit = messages.AuditAllowed
	}
	mode := messages.ApprovalQueue
	var rule *exposure.Approval
	if t, ok := admission.Lookup(call.Tool); ok && t.Approval != nil && t.Approval.Mode != exposure.ApprovalNone {
		rule = t.Approval
		mode = string(t.Approval.Mode)
		ask = true
	}
	if !ask {
		return v, nil
	}
	if c.granted(ctx, call, v.decision.Version) {
		v.audit = messages.AuditRemembered
		return v, nil
	}
	now := time.Now().UTC()
	v.audit = messages.AuditAsked
	v.approval = &messages.Approval{
		ApprovalID:      call.CallID,
		CallID:          call.CallID,
		Tool:            call.Tool,
		Agent:           call.Agent,
		Turn:            call.Turn,
		ArgumentsDigest: call.ArgumentsDigest,
		Arguments:       policy.Redact(tool.Definition.InputSchema, call.Arguments),
		PolicyVersion:   v.decision.Version,
		RuleID:          v.decision.RuleID,
		Reason:          v.decision.Reason,
		Mode:            mode,
		State:           messages.ApprovalPending,
		CreatedAt:       now,
		ExpiresAt:       now.Add(c.cfg.ApprovalTTL),
	}
	if rule != nil {
		v.approval.Title, v.approval.Message = rule.Title, rule.Message
		if v.approval.Reason == "" || p == nil || v.decision.Effect != policy.Ask {
			v.approval.Reason = "the exposure rules ask for an approval of " + call.Tool
		}
	}
	return v, nil
}

// grant is a remembered approval.
type grant struct {
	ApprovalID    string    `json:"approval_id"`
	PolicyVersion string    `json:"policy_version"`
	By            string    `json:"by"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// granted reports whether an approval remembered for this agent and tool
// (in this turn, or in every turn) still holds under the current policy.
func (c *Coordinator) granted(ctx context.Context, call *messages.CallRequest, version string) bool {
	turns := []string{""}
	if call.Turn != "" {
		turns = []string{call.Turn, ""}
	}
	for _, turn := range turns {
		key, err := messages.GrantKey(call.Agent, call.Tool, turn)
		if err != nil {
			continue
		}
		e, err := c.approvals.Get(ctx, key)
		if err != nil {
			continue
		}
		var g grant
		if json.Unmarshal(e.Value(), &g) == nil && g.PolicyVersion == version && time.Now().Before(g.ExpiresAt) {
			return true
		}
	}
	return false
}

// holdForApproval records a call that waits for an approval: the call is in
// the ledger and its turn, the approval in the approvals bucket, and nothing
// is queued for a worker until someone approves.
func (c *Coordinator) holdForApproval(ctx context.Context, call *messages.CallRequest, a *messages.Approval) error {
	if _, err := c.ledger.Append(ctx, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call}); err != nil {
		return err
	}
	key, _ := messages.ApprovalKey(call.CallID)
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := c.approvals.Create(ctx, key, data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil // an idempotent retry of the same call
		}
		return fmt.Errorf("record approval of call %s: %w", call.CallID, err)
	}
	if _, err := c.ledger.Append(ctx, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventApproval, Time: a.CreatedAt, Approval: a}); err != nil {
		return err
	}
	return c.fileUnderTurn(ctx, call)
}

// audit records a decision in the audit stream without waiting for it.
func (c *Coordinator) audit(ctx context.Context, decision string, call *messages.CallRequest, def *messages.ToolDefinition, d policy.Decision, by string) {
	rec := &messages.AuditRecord{
		Time:          time.Now().UTC(),
		Decision:      decision,
		CallID:        call.CallID,
		Tool:          call.Tool,
		Agent:         call.Agent,
		Turn:          call.Turn,
		PolicyVersion: d.Version,
		RuleID:        d.RuleID,
		Reason:        d.Reason,
		By:            by,
	}
	if def != nil {
		rec.Arguments = policy.Redact(def.InputSchema, call.Arguments)
	}
	subject, err := c.names.AuditSubject(decision)
	if err != nil {
		return
	}
	msg, err := newMsg(subject, rec)
	if err != nil {
		return
	}
	if _, err := c.js.PublishMsgAsync(msg); err != nil {
		c.log.Warn("audit record not stored", "decision", decision, "call", call.CallID, "error", err)
	}
}

func (c *Coordinator) listApprovals(ctx context.Context, req *request) (any, error) {
	var lr messages.ListApprovalsRequest
	if err := req.decode(&lr); err != nil {
		return nil, err
	}
	if lr.State == "" {
		lr.State = messages.ApprovalPending
	}
	all, err := c.allApprovals(ctx)
	if err != nil {
		return nil, err
	}
	reply := &messages.ListApprovalsReply{Approvals: []messages.Approval{}}
	for _, a := range all {
		if (lr.State == "all" || a.rec.State == lr.State) && (lr.Agent == "" || a.rec.Agent == lr.Agent) && (lr.Turn == "" || a.rec.Turn == lr.Turn) {
			reply.Approvals = append(reply.Approvals, a.rec)
		}
	}
	return reply, nil
}

type storedApproval struct {
	rec      messages.Approval
	revision uint64
}

func (c *Coordinator) allApprovals(ctx context.Context) ([]storedApproval, error) {
	lister, err := c.approvals.ListKeysFiltered(ctx, "approvals.*")
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]storedApproval, 0, len(keys))
	for _, k := range keys {
		a, err := c.loadApproval(ctx, strings.TrimPrefix(k, "approvals."))
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

func (c *Coordinator) loadApproval(ctx context.Context, id string) (*storedApproval, error) {
	key, err := messages.ApprovalKey(id)
	if err != nil {
		return nil, err
	}
	e, err := c.approvals.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, messages.Errorf(messages.CodeApprovalNotFound, "no approval %s", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read approval %s: %w", id, err)
	}
	a := &storedApproval{revision: e.Revision()}
	if err := json.Unmarshal(e.Value(), &a.rec); err != nil {
		return nil, fmt.Errorf("approval %s is unreadable: %w", id, err)
	}
	return a, nil
}

func (c *Coordinator) decideApproval(ctx context.Context, req *request) (any, error) {
	var dr messages.DecideRequest
	if err := req.decode(&dr); err != nil {
		return nil, err
	}
	return c.Decide(ctx, &dr)
}

func (c *Coordinator) answerApproval(ctx context.Context, req *request) (any, error) {
	var dr messages.DecideRequest
	if err := req.decode(&dr); err != nil {
		return nil, err
	}
	a, err := c.loadApproval(ctx, dr.ApprovalID)
	if err != nil {
		return nil, err
	}
	if a.rec.Mode != messages.ApprovalPrompt {
		return nil, messages.Errorf(messages.CodeDenied, "approval %s waits for an operator (mode %s); an agent can answer only approvals in prompt mode", dr.ApprovalID, a.rec.Mode)
	}
	return c.Decide(ctx, &dr)
}

// Decide approves or denies a pending approval (approvals.decide). An
// approved call is queued and runs once; a denied or expired one ends with
// a denied result.
func (c *Coordinator) Decide(ctx context.Context, dr *messages.DecideRequest) (*messages.DecideReply, error) {
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
	a, err := c.loadApproval(ctx, dr.ApprovalID)
	if err != nil {
		return nil, err
	}
	if a.rec.State != messages.ApprovalPending {
		return nil, messages.Errorf(messages.CodeConflict, "approval %s was already %s by %s", a.rec.ApprovalID, a.rec.State, a.rec.DecidedBy)
	}
	now := time.Now().UTC()
	if now.After(a.rec.ExpiresAt) {
		if err := c.expireApproval(ctx, a); err != nil {
			return nil, err
		}
		return nil, messages.Errorf(messages.CodeConflict, "approval %s expired at %s", a.rec.ApprovalID, a.rec.ExpiresAt.Format(time.RFC3339))
	}
	if dr.Decision == messages.DecisionApprove && a.rec.PolicyVersion != "" {
		if p := c.policy.Load(); p != nil && p.Version() != a.rec.PolicyVersion {
			return nil, messages.Errorf(messages.CodeConflict, "the policy changed since approval %s was asked; submit the call again", a.rec.ApprovalID)
		}
	}
	a.rec.DecidedBy, a.rec.DecidedAt, a.rec.DecisionReason, a.rec.Remember = dr.By, now, dr.Reason, dr.Remember
	a.rec.State = messages.ApprovalApproved
	if dr.Decision == messages.DecisionDeny {
		a.rec.State = messages.ApprovalDenied
	}
	if err := c.storeApproval(ctx, a); err != nil {
		return nil, err
	}
	if err := c.carryOut(ctx, &a.rec); err != nil {
		return nil, err
	}
	reply := &messages.DecideReply{Approval: a.rec, State: messages.StateQueued}
	if a.rec.State != messages.ApprovalApproved {
		reply.State = messages.StateDenied
	}
	return reply, nil
}

// storeApproval writes a decided approval if nobody decided it meanwhile.
func (c *Coordinator) storeApproval(ctx context.Context, a *storedApproval) error {
	key, _ := messages.ApprovalKey(a.rec.ApprovalID)
	data, err := json.Marshal(&a.rec)
	if err != nil {
		return err
	}
	if _, err := c.approvals.Update(ctx, key, data, a.revision); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return messages.Errorf(messages.CodeConflict, "approval %s was decided by someone else at the same time", a.rec.ApprovalID)
		}
		return fmt.Errorf("store approval %s: %w", a.rec.ApprovalID, err)
	}
	return nil
}

// carryOut makes a decided approval take effect: the decision is recorded
// with the call, then an approved call is queued and a refused one ends.
// Every step is idempotent, so the sweeper can finish what a coordinator
// that stopped half-way began.
func (c *Coordinator) carryOut(ctx context.Context, a *messages.Approval) error {
	snap, err := c.ledger.Snapshot(ctx, a.CallID)
	if err != nil {
		return err
	}
	if snap.Result != nil {
		return nil
	}
	if snap.Approval == nil || snap.Approval.Approval == nil || snap.Approval.Approval.State != a.State {
		if _, err := c.ledger.Append(ctx, &messages.CallEvent{CallID: a.CallID, Kind: messages.EventApproval, Time: time.Now().UTC(), Approval: a}); err != nil {
			return err
		}
		if snap, err = c.ledger.Snapshot(ctx, a.CallID); err != nil {
			return err
		}
	}
	if snap.Queued == nil || snap.Queued.Request == nil {
		return fmt.Errorf("call %s has no request in the ledger", a.CallID)
	}
	call := *snap.Queued.Request
	audited := &messages.CallRequest{CallID: call.CallID, Tool: call.Tool, Agent: call.Agent, Turn: call.Turn, Arguments: call.Arguments}
	var def *messages.ToolDefinition
	if t, ok := c.catalog.Lookup(call.Tool); ok {
		def = &t.Definition
	}
	d := policy.Decision{Version: a.PolicyVersion, RuleID: a.RuleID, Reason: a.DecisionReason}
	if a.State != messages.ApprovalApproved {
		decision, why := messages.AuditRejected, "the approval was denied by "+a.DecidedBy
		if a.State == messages.ApprovalExpired {
			decision, why = messages.AuditExpired, "the approval expired at "+a.ExpiresAt.Format(time.RFC3339)
		}
		if a.DecisionReason != "" {
			why += ": " + a.DecisionReason
		}
		res := endResult(&call, messages.StateDenied, messages.ResultDenied, why)
		if _, err := c.ledger.Commit(ctx, &res, call.Notify); err != nil {
			return err
		}
		c.audit(ctx, decision, audited, def, d, a.DecidedBy)
		return nil
	}
	// Queued once: a queued event after the approval means it was done.
	if snap.Queued.Seq > snap.Approval.Seq {
		return nil
	}
	if a.Remember != messages.RememberCall && a.Remember != "" {
		turn := ""
		if a.Remember == messages.RememberTurn {
			turn = a.Turn
		}
		if key, err := messages.GrantKey(a.Agent, a.Tool, turn); err == nil {
			g, _ := json.Marshal(grant{ApprovalID: a.ApprovalID, PolicyVersion: a.PolicyVersion, By: a.DecidedBy, ExpiresAt: time.Now().Add(c.cfg.GrantTTL)})
			if _, err := c.approvals.Put(ctx, key, g); err != nil {
				return fmt.Errorf("remember approval %s: %w", a.ApprovalID, err)
			}
		}
	}
	// The deadline counts from now: the wait for a person is not the tool's time.
	timeout := call.Deadline.Sub(call.QueuedAt)
	call.QueuedAt = time.Now().UTC()
	call.Deadline = call.QueuedAt.Add(timeout)
	if _, err := c.publishCall(ctx, &call); err != nil {
		return err
	}
	c.audit(ctx, messages.AuditApproved, audited, def, d, a.DecidedBy)
	return nil
}

func (c *Coordinator) expireApproval(ctx context.Context, a *storedApproval) error {
	a.rec.State = messages.ApprovalExpired
	a.rec.DecidedAt = time.Now().UTC()
	a.rec.DecidedBy = "toolbus"
	if err := c.storeApproval(ctx, a); err != nil {
		return err
	}
	return c.carryOut(ctx, &a.rec)
}

// recoveryWindow is how long after a decision the sweeper checks that it took effect.
const recoveryWindow = 10 * time.Minute

// sweepApprovals expires approvals whose time ran out and finishes
// decisions that a stopped coordinator left half done.
func (c *Coordinator) sweepApprovals(ctx context.Context) error {
	all, err := c.allApprovals(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range all {
		a := &all[i]
		switch {
		case a.rec.State == messages.ApprovalPending && now.After(a.rec.ExpiresAt):
			if err := c.expireApproval(ctx, a); err != nil && !errors.Is(err, &messages.Error{Code: messages.CodeConflict}) {
				c.log.Warn("could not expire approval", "approval", a.rec.ApprovalID, "error", err)
			}
		case a.rec.State != messages.ApprovalPending && now.Sub(a.rec.DecidedAt) > c.cfg.SweepInterval && now.Sub(a.rec.DecidedAt) < recoveryWindow:
			// Decided a while ago: make sure it took effect.
			if err := c.carryOut(ctx, &a.rec); err != nil {
				c.log.Warn("could not carry out approval", "approval", a.rec.ApprovalID, "error", err)
			}
		}
	}
	return nil
}
