package messages

import (
	"slices"
	"time"
)

// EndpointCallsList lists recent calls, newest first (calls.list): the
// execution log. Agents see the calls of the agents they may act as;
// operators see every call.
const EndpointCallsList = "calls.list"

// Bounds of a calls.list page.
const (
	// DefaultCallsListLimit is the page size when the request names none.
	DefaultCallsListLimit = 50
	// MaxCallsListLimit is the largest page a request may ask for.
	MaxCallsListLimit = 200
)

// CallsListRequest asks for a page of the execution log (endpoint
// calls.list). Every filter that is set must match; an empty request lists
// every call the caller may see.
type CallsListRequest struct {
	Agent     string `json:"agent,omitempty"`
	Turn      string `json:"turn,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// States keeps the calls in any of these states.
	States []CallState `json:"states,omitempty"`
	// Since and Until bound the time the calls were queued, as the events
	// stream recorded it: a call is listed when its queued record was
	// stored at or after Since and before Until. (queued_at is the
	// coordinator's clock as it queued the call, a moment earlier.)
	Since time.Time `json:"since,omitempty,omitzero"`
	Until time.Time `json:"until,omitempty,omitzero"`
	// Limit is the page size: DefaultCallsListLimit when 0, at most
	// MaxCallsListLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor continues from the reply's NextCursor; opaque to callers.
	// It marks where the previous page's scan stopped, so the filters of
	// the request that continues should be those of the one that got it.
	Cursor string `json:"cursor,omitempty"`
}

// MaxCallsListCursorLength bounds CallsListRequest.Cursor.
const MaxCallsListCursorLength = 64

// listedStates are the states a calls.list request may filter on.
var listedStates = []CallState{StateQueued, StateAwaitingApproval, StateRunning, StateCompleted, StateFailed, StateCancelled, StateTimedOut, StateDenied}

// Validate checks the request on its own: the filters' names, the known
// states, since not after until, and the ranges of limit (0 to
// MaxCallsListLimit) and of the cursor's length. Each refusal is
// bad_request and names the field. The coordinator checks the cursor's
// content.
func (r *CallsListRequest) Validate() error {
	for _, f := range [...]struct{ field, value string }{{"agent", r.Agent}, {"turn", r.Turn}} {
		if f.value != "" {
			if err := ValidateID(f.field, f.value); err != nil {
				return Errorf(CodeBadRequest, "%s: %v", f.field, err)
			}
		}
	}
	if r.Tool != "" {
		if _, err := ParseToolName(r.Tool); err != nil {
			return Errorf(CodeBadRequest, "tool: %v", err)
		}
	}
	if r.Namespace != "" {
		if err := ValidateNamespace(r.Namespace); err != nil {
			return Errorf(CodeBadRequest, "namespace: %v", err)
		}
	}
	for _, s := range r.States {
		if !slices.Contains(listedStates, s) {
			return Errorf(CodeBadRequest, "states: %q is not a call state (one of %v)", s, listedStates)
		}
	}
	if !r.Since.IsZero() && !r.Until.IsZero() && r.Since.After(r.Until) {
		return Errorf(CodeBadRequest, "since (%s) is after until (%s)", r.Since.Format(time.RFC3339Nano), r.Until.Format(time.RFC3339Nano))
	}
	if err := validateRange("limit", int64(r.Limit), 0, MaxCallsListLimit); err != nil {
		return err
	}
	if len(r.Cursor) > MaxCallsListCursorLength {
		return Errorf(CodeBadRequest, "cursor is %d bytes; at most %d: pass the next_cursor of a reply unchanged", len(r.Cursor), MaxCallsListCursorLength)
	}
	return nil
}

// Matches reports whether the request's state filter keeps a call in
// state s: any state when the filter is empty.
func (r *CallsListRequest) Matches(s CallState) bool {
	return len(r.States) == 0 || slices.Contains(r.States, s)
}

// CallsListReply is one page of the execution log, newest call first.
type CallsListReply struct {
	Calls []CallLogEntry `json:"calls"`
	// NextCursor asks for the following (older) page; empty when the log
	// has no older call that matches.
	NextCursor string `json:"next_cursor,omitempty"`
}

// CallLogEntry is one call of the execution log: who called what, when,
// how long it waited and ran, and how it ended. Arguments are redacted as
// the audit log redacts them, with the schema of the tool as the catalog
// has it now; they are left out when the catalog no longer has the tool.
type CallLogEntry struct {
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	Namespace string    `json:"namespace"`
	Agent     string    `json:"agent,omitempty"`
	Turn      string    `json:"turn,omitempty"`
	State     CallState `json:"state"`
	Arguments JSON      `json:"arguments,omitempty"`
	QueuedAt  time.Time `json:"queued_at"`
	// StartedAt is when the latest attempt began; FinishedAt when the
	// result was written. Each is absent until it happened.
	StartedAt  time.Time `json:"started_at,omitempty,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitempty,omitzero"`
	// QueueWaitMS is from queued to the latest start; RunMS from that
	// start to the result. Each is nil, and absent from the message, until
	// both its ends are known; once known it is there, 0 included.
	QueueWaitMS *int64 `json:"queue_wait_ms,omitempty"`
	RunMS       *int64 `json:"run_ms,omitempty"`
	// Attempts counts the deliveries to workers so far; Worker ran the latest.
	Attempts int    `json:"attempts,omitempty"`
	Worker   string `json:"worker,omitempty"`
	// IsError is the result's: the call did not end with a successful
	// answer (a tool error included).
	IsError bool `json:"is_error,omitempty"`
	// Error is the error of the call's result when it has one (a failed,
	// cancelled, denied or timed-out call, or a tool error): its code is
	// the result's error code (ResultToolError, ResultTimedOut, …), not
	// an API error code.
	Error *Error `json:"error,omitempty"`
}
