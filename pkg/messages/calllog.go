package messages

import "time"

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
	// Since and Until bound the time the calls were queued: Since <=
	// queued_at < Until.
	Since time.Time `json:"since,omitempty,omitzero"`
	Until time.Time `json:"until,omitempty,omitzero"`
	// Limit is the page size: DefaultCallsListLimit when 0, at most
	// MaxCallsListLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor continues from the reply's NextCursor; opaque to callers.
	Cursor string `json:"cursor,omitempty"`
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
// the audit log redacts them.
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
	// start to the result. Each is 0 until both ends are known.
	QueueWaitMS int64 `json:"queue_wait_ms,omitempty"`
	RunMS       int64 `json:"run_ms,omitempty"`
	// Attempts counts the deliveries to workers so far; Worker ran the latest.
	Attempts int    `json:"attempts,omitempty"`
	Worker   string `json:"worker,omitempty"`
	// Error is the final error of a failed, cancelled, denied or timed-out call.
	Error *Error `json:"error,omitempty"`
}
