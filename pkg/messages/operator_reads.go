package messages

import (
	"slices"
	"time"
)

// Reads for operators: what the admin console shows beside the calls,
// served by the coordinator so that an operator's user needs no
// JetStream of its own. With identities only operators may make them;
// anyone else is refused with forbidden.
const (
	// EndpointAuditList lists the audit stream's records, newest first
	// (audit.list).
	EndpointAuditList = "audit.list"
	// EndpointWorkersList lists the live workers with their slots
	// (workers.list).
	EndpointWorkersList = "workers.list"
)

// AuditForbidden is the decision of an audit record that tells of a
// request refused because its caller may not act as the agent it named,
// or is not an operator.
const AuditForbidden = "forbidden"

// AuditDecisions are the decisions an audit record may hold, which
// audit.list may filter on.
var AuditDecisions = []string{
	AuditAllowed, AuditDenied, AuditAsked, AuditApproved, AuditRejected, AuditExpired, AuditRemembered, AuditForbidden,
	AuditWithdrawn, AuditRefused, AuditNotAdmitted,
}

// Bounds of an audit.list page.
const (
	// DefaultAuditListLimit is the page size when the request names none.
	DefaultAuditListLimit = 100
	// MaxAuditListLimit is the largest page a request may ask for.
	MaxAuditListLimit = 500
	// MaxAuditListCursorLength bounds AuditListRequest.Cursor.
	MaxAuditListCursorLength = 64
)

// AuditListRequest asks for a page of the audit log (endpoint
// audit.list). Every filter that is set must match; an empty request
// lists every record.
type AuditListRequest struct {
	// Decision keeps the records of one decision (AuditDecisions).
	Decision string `json:"decision,omitempty"`
	Agent    string `json:"agent,omitempty"`
	// Tool keeps the records of one tool, in any spelling of its name.
	Tool string `json:"tool,omitempty"`
	// Since and Until bound when the records were stored in the audit
	// stream: since ≤ stored < until.
	Since time.Time `json:"since,omitempty,omitzero"`
	Until time.Time `json:"until,omitempty,omitzero"`
	// Limit is the page size: DefaultAuditListLimit when 0, at most
	// MaxAuditListLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor continues from the reply's NextCursor, with the same filters.
	Cursor string `json:"cursor,omitempty"`
}

// Validate checks the request on its own: a known decision, the agent's
// and tool's names, since not after until, the limit's range and the
// cursor's length. Each refusal is bad_request and names the field.
func (r *AuditListRequest) Validate() error {
	if r.Decision != "" && !slices.Contains(AuditDecisions, r.Decision) {
		return Errorf(CodeBadRequest, "decision: %q is not an audit decision (one of %v)", r.Decision, AuditDecisions)
	}
	if r.Agent != "" {
		if err := ValidateID("agent", r.Agent); err != nil {
			return Errorf(CodeBadRequest, "agent: %v", err)
		}
	}
	if r.Tool != "" {
		if _, err := ParseToolName(r.Tool); err != nil {
			return Errorf(CodeBadRequest, "tool: %v", err)
		}
	}
	if !r.Since.IsZero() && !r.Until.IsZero() && r.Since.After(r.Until) {
		return Errorf(CodeBadRequest, "since (%s) is after until (%s)", r.Since.Format(time.RFC3339Nano), r.Until.Format(time.RFC3339Nano))
	}
	if err := validateRange("limit", int64(r.Limit), 0, MaxAuditListLimit); err != nil {
		return err
	}
	if len(r.Cursor) > MaxAuditListCursorLength {
		return Errorf(CodeBadRequest, "cursor is %d bytes; at most %d: pass the next_cursor of a reply unchanged", len(r.Cursor), MaxAuditListCursorLength)
	}
	return nil
}

// AuditListReply is one page of the audit log, newest record first.
type AuditListReply struct {
	Records []AuditRecord `json:"records"`
	// NextCursor asks for the following (older) page; empty when the
	// audit stream holds no older record that matches.
	NextCursor string `json:"next_cursor,omitempty"`
}

// MaxWorkersListed bounds the workers one workers.list reply holds.
const MaxWorkersListed = 1000

// WorkersListRequest asks for the live workers (endpoint workers.list),
// of one namespace or of all.
type WorkersListRequest struct {
	Namespace string `json:"namespace,omitempty"`
}

// Validate checks the namespace's name.
func (r *WorkersListRequest) Validate() error {
	if r.Namespace != "" {
		if err := ValidateNamespace(r.Namespace); err != nil {
			return Errorf(CodeBadRequest, "namespace: %v", err)
		}
	}
	return nil
}

// WorkersListReply lists the live workers, by namespace and then worker
// ID: each one's latest heartbeat, with its busy and total slots and the
// time it was sent.
type WorkersListReply struct {
	Workers []WorkerHeartbeat `json:"workers"`
	// Truncated is set when more than MaxWorkersListed workers are alive:
	// the list holds the first MaxWorkersListed of them.
	Truncated bool `json:"truncated,omitempty"`
}
