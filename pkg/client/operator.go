package client

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Operator is the client's operator API: deciding approvals, switching
// tools and discovery's learning on and off, removing stale tools, and the
// operators' reads (the audit log, the live workers, the statistics of the
// last hour, how the policy decides a call, what discovery learned). Get it
// with Client.Operator. Its requests go through the client's connection
// like an agent's, with the same attempts and retries; with identities the
// coordinator refuses each of them with forbidden unless the client's user
// is an operator (docs/security.md). A decision or a switch is recorded as
// made by the client's Options.Agent (a DecideRequest may name another in
// By).
type Operator struct {
	api *coordinatorAPI
}

// Operator returns the client's operator API.
func (c *Client) Operator() *Operator { return c.operator }

// Decide approves or denies an approval.
func (o *Operator) Decide(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = o.api.opts.Agent
	}
	var out messages.DecideReply
	return &out, o.api.request(ctx, messages.EndpointApprovalsDecide, &req, &out, once, 0)
}

// SetToolEnabled disables (with a reason) or enables a tool ("ns-method")
// or, when tool names no method, a namespace.
func (o *Operator) SetToolEnabled(ctx context.Context, toolOrNamespace string, enabled bool, reason string) error {
	req := messages.ToolSwitchRequest{Reason: reason, By: o.api.opts.Agent}
	if messages.ValidateNamespace(toolOrNamespace) == nil {
		req.Namespace = toolOrNamespace
	} else {
		req.Tool = toolOrNamespace
	}
	endpoint := messages.EndpointToolsDisable
	if enabled {
		endpoint = messages.EndpointToolsEnable
	}
	return o.api.request(ctx, endpoint, &req, nil, repeatable, 0)
}

// LearningStatus says whether discovery learns from use and how much
// evidence there is, and with a tool, what was learned of it. For
// operators.
func (o *Operator) LearningStatus(ctx context.Context, tool string) (*messages.LearningStatus, error) {
	var out messages.LearningStatus
	return &out, o.api.request(ctx, messages.EndpointLearningStatus, &messages.LearningStatusRequest{Tool: tool}, &out, read, 0)
}

// SetLearning switches learning from use on or off for the whole
// installation; switching it off needs a reason. For operators.
func (o *Operator) SetLearning(ctx context.Context, enabled bool, reason string) (*messages.LearningStatus, error) {
	endpoint := messages.EndpointLearningDisable
	if enabled {
		endpoint = messages.EndpointLearningEnable
	}
	var out messages.LearningStatus
	return &out, o.api.request(ctx, endpoint, &messages.LearningSwitchRequest{Reason: reason, By: o.api.opts.Agent}, &out, repeatable, 0)
}

// ResetLearning deletes the usage evidence for a tool, or with an empty
// tool all of it. For operators.
func (o *Operator) ResetLearning(ctx context.Context, tool string) (*messages.LearningResetReply, error) {
	var out messages.LearningResetReply
	return &out, o.api.request(ctx, messages.EndpointLearningReset, &messages.LearningResetRequest{Tool: tool, All: tool == "", By: o.api.opts.Agent}, &out, repeatable, 0)
}

// Reads for operators, answered by the coordinator: a client whose user
// has no JetStream (an operator of an installation with identities) reads
// the audit log, the live workers and the statistics of the last hour this
// way.

// ListAudit returns a page of the audit log, newest record first
// (audit.list); pass the reply's NextCursor as the next request's Cursor
// for the following page.
func (o *Operator) ListAudit(ctx context.Context, req messages.AuditListRequest) (*messages.AuditListReply, error) {
	var out messages.AuditListReply
	return &out, o.api.request(ctx, messages.EndpointAuditList, &req, &out, scan, 0)
}

// ListWorkers returns the live workers with their busy and total slots
// (workers.list), of one namespace or, with "", of all.
func (o *Operator) ListWorkers(ctx context.Context, namespace string) (*messages.WorkersListReply, error) {
	var out messages.WorkersListReply
	return &out, o.api.request(ctx, messages.EndpointWorkersList, &messages.WorkersListRequest{Namespace: namespace}, &out, read, 0)
}

// CallStats returns the statistics of the calls of the last minutes
// (stats.calls): how many entered each state, minute by minute, and by
// namespace their queue waits, run times and queue depths. It costs the
// coordinator a scan of up to seconds: it is sent without the copies
// other reads are hedged with, and each attempt waits Options.RequestTimeout
// and 25 s more for the answer. A coordinator older than stats.calls does
// not answer it: the error is messages.ErrNoResponders.
func (o *Operator) CallStats(ctx context.Context, req messages.CallStatsRequest) (*messages.CallStatsReply, error) {
	var out messages.CallStatsReply
	return &out, o.api.request(ctx, messages.EndpointStatsCalls, &req, &out, scan, 0)
}

// ExplainPolicy asks which rule of the policy in force decides a call of
// the tool with the arguments by the agent, and why (policy.explain).
// Nothing is called. With identities the coordinator refuses it with
// forbidden unless the client's user is an operator.
func (o *Operator) ExplainPolicy(ctx context.Context, req messages.PolicyExplainRequest) (*messages.PolicyExplainReply, error) {
	var out messages.PolicyExplainReply
	return &out, o.api.request(ctx, messages.EndpointPolicyExplain, &req, &out, read, 0)
}

// RemoveTools removes a tool ("ns-method") or, when the name is a
// namespace, every tool of the namespace from the catalog (tools.remove,
// for operators). It is meant for stale tools that no worker serves.
func (o *Operator) RemoveTools(ctx context.Context, toolOrNamespace, reason string) (*messages.RemoveToolsReply, error) {
	req := messages.ToolSwitchRequest{Reason: reason, By: o.api.opts.Agent}
	if messages.ValidateNamespace(toolOrNamespace) == nil {
		req.Namespace = toolOrNamespace
	} else {
		req.Tool = toolOrNamespace
	}
	var out messages.RemoveToolsReply
	return &out, o.api.request(ctx, messages.EndpointToolsRemove, &req, &out, repeatable, 0)
}
