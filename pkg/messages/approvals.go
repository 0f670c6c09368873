package messages

import "time"

// Endpoints for approvals.
const (
	EndpointApprovalsList   = "approvals.list"
	EndpointApprovalsDecide = "approvals.decide"
	// EndpointApprovalsAnswer is approvals.decide for agents: it takes only
	// approvals in prompt mode, which the agent's user answers. NATS users
	// of agents are given this endpoint, operators approvals.decide.
	EndpointApprovalsAnswer = "approvals.answer"
	EndpointToolsEnable     = "tools.enable"
	EndpointToolsDisable    = "tools.disable"
)

// Approval modes: who answers an approval.
const (
	// ApprovalQueue: an operator decides, through the API or the command line.
	ApprovalQueue = "queue"
	// ApprovalPrompt: the agent asks its user in the conversation and sends the answer.
	ApprovalPrompt = "prompt"
)

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
	// ApprovalWithdrawn: the call was cancelled before anyone decided;
	// DecidedBy is who cancelled it, DecisionReason the cancel's reason.
	ApprovalWithdrawn = "withdrawn"
)

// How long an approval's answer counts.
const (
	// RememberCall: this call only.
	RememberCall = "call"
	// RememberTurn: later calls of the same tool by the same agent in the same turn.
	RememberTurn = "turn"
	// RememberAgentTool: later calls of the same tool by the same agent, in any turn.
	RememberAgentTool = "agent_tool"
)

// Approval is a request for a human's decision, bound to one exact call:
// its agent, tool, turn, the digest of its arguments and the policy version
// that asked. Its ID is the call ID. It is kept in the approvals bucket
// under "approvals.<call_id>" and survives restarts.
type Approval struct {
	ApprovalID      string `json:"approval_id"`
	CallID          string `json:"call_id"`
	Tool            string `json:"tool"`
	Agent           string `json:"agent,omitempty"`
	Turn            string `json:"turn,omitempty"`
	ArgumentsDigest string `json:"arguments_digest"`
	// Arguments are the call's arguments with sensitive values redacted.
	Arguments     JSON   `json:"arguments,omitempty"`
	PolicyVersion string `json:"policy_version"`
	// RuleID names the policy rule that asked, when a policy rule did.
	RuleID string `json:"rule_id,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Mode is queue or prompt.
	Mode string `json:"mode"`
	// Title and Message are what the exposure rule asks to show the person deciding.
	Title     string    `json:"title,omitempty"`
	Message   string    `json:"message,omitempty"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Set once decided.
	DecidedBy      string    `json:"decided_by,omitempty"`
	DecidedAt      time.Time `json:"decided_at,omitempty,omitzero"`
	DecisionReason string    `json:"decision_reason,omitempty"`
	Remember       string    `json:"remember,omitempty"`
	// Voided is set, in approvals.list only, on a pending approval that a
	// change of policy voided: asked under another policy version than
	// the one in force, it can no longer be approved. Deny it to end its
	// call now.
	Voided bool `json:"voided,omitempty"`
}

// ListApprovalsRequest lists approvals (endpoint approvals.list); empty
// filters match everything. State defaults to pending.
type ListApprovalsRequest struct {
	State string `json:"state,omitempty"`
	Agent string `json:"agent,omitempty"`
	Turn  string `json:"turn,omitempty"`
}

// ListApprovalsReply lists approvals, oldest first.
type ListApprovalsReply struct {
	Approvals []Approval `json:"approvals"`
}

// Decisions on an approval.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// DecideRequest answers an approval (endpoint approvals.decide).
type DecideRequest struct {
	ApprovalID string `json:"approval_id"`
	// Decision is approve or deny.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// By names who decided.
	By string `json:"by"`
	// Remember is call (the default), turn or agent_tool.
	Remember string `json:"remember,omitempty"`
}

// DecideReply is the approval as decided and the call's state after it.
type DecideReply struct {
	Approval Approval  `json:"approval"`
	State    CallState `json:"state"`
}

// ToolSwitchRequest disables or enables a tool or a whole namespace
// (endpoints tools.disable and tools.enable).
type ToolSwitchRequest struct {
	// Tool names one tool; Namespace a whole namespace. Exactly one is set.
	Tool      string `json:"tool,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Reason    string `json:"reason,omitempty"`
	By        string `json:"by,omitempty"`
}

// Audit decisions.
const (
	AuditAllowed  = "allowed"
	AuditDenied   = "denied"
	AuditAsked    = "asked"
	AuditApproved = "approved"
	AuditRejected = "rejected"
	AuditExpired  = "expired"
	// AuditRemembered: an earlier approval that was to be remembered let the call through.
	AuditRemembered = "remembered"
	// AuditWithdrawn: the call's cancel settled its pending approval.
	AuditWithdrawn = "withdrawn"
	// AuditRefused: a decision on an approval was refused (it was no
	// longer pending, say); the record's reason is the refusal's message.
	AuditRefused = "refused"
	// AuditNotAdmitted: the agent's exposure rules exclude the tool it
	// called; the call was refused with not_admitted and never queued.
	AuditNotAdmitted = "not_admitted"
)

// AuditCalls is the subject token ("<prefix>.audit.calls") of the audit
// stream's AuditBatch messages: the decisions that let calls be queued,
// copied from their queued events.
const AuditCalls = "calls"

// QueuedAudit is what a queued event carries of the decision that let its
// call be queued (allowed or remembered): its audit record, derived from
// the event into the audit stream (an AuditBatch) by a coordinator.
//
//msgpack:generate
type QueuedAudit struct {
	Decision      string `json:"decision"`
	PolicyVersion string `json:"policy_version,omitempty"`
	RuleID        string `json:"rule_id,omitempty"`
	Reason        string `json:"reason,omitempty"`
	// Arguments are the arguments as the audit record keeps them, when
	// redaction changed them; absent, the request's arguments are kept.
	Arguments JSON `json:"arguments,omitempty"`
}

// AuditBatch is a message of the audit stream on "<prefix>.audit.calls":
// the audit records of the calls whose queued events, up to the events
// stream's sequence Through, carry their decision (QueuedAudit), oldest
// first. Each batch continues from the one before it (its write is
// conditional on the subject's last sequence), so a call's record is in
// exactly one batch.
//
//msgpack:generate
type AuditBatch struct {
	Through uint64        `json:"through"`
	Records []AuditRecord `json:"records"`
}

// AuditRecord is one decision about a call, on "<prefix>.audit.<decision>"
// in the audit stream. Sensitive argument values are redacted.
//
//msgpack:generate
type AuditRecord struct {
	Time          time.Time `json:"time"`
	Decision      string    `json:"decision"`
	CallID        string    `json:"call_id,omitempty"`
	Tool          string    `json:"tool"`
	Agent         string    `json:"agent,omitempty"`
	Turn          string    `json:"turn,omitempty"`
	Arguments     JSON      `json:"arguments,omitempty"`
	PolicyVersion string    `json:"policy_version,omitempty"`
	RuleID        string    `json:"rule_id,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	By            string    `json:"by,omitempty"`
}
