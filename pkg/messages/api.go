package messages

import "time"

// Endpoints of the coordinator's service, relative to Names.APIGroup.
const (
	EndpointToolsList   = "tools.list"
	EndpointCallsSubmit = "calls.submit"
	EndpointCallsGet    = "calls.get"
	EndpointCallsCancel = "calls.cancel"
	EndpointTurnsGet    = "turns.get"
)

// ServiceName is the name of the coordinator's micro service.
const ServiceName = "toolbus"

// ListToolsRequest asks for the catalog (endpoint tools.list).
type ListToolsRequest struct {
	// Namespace limits the list to one namespace.
	Namespace string `json:"namespace,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Turn      string `json:"turn,omitempty"`
}

// ListToolsReply lists tools sorted by name.
type ListToolsReply struct {
	Tools []ToolEntry `json:"tools"`
}

// GetCallRequest asks for one call (endpoint calls.get).
type GetCallRequest struct {
	CallID string `json:"call_id"`
}

// CallInfo is what is known of a call: its request, state and, when it ended, its result.
type CallInfo struct {
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	Agent     string    `json:"agent,omitempty"`
	Turn      string    `json:"turn,omitempty"`
	State     CallState `json:"state"`
	Arguments JSON      `json:"arguments,omitempty"`
	// Attempt and Worker describe the latest delivery, if any.
	Attempt         int         `json:"attempt,omitempty"`
	Worker          string      `json:"worker,omitempty"`
	CancelRequested bool        `json:"cancel_requested,omitempty"`
	Progress        *Progress   `json:"progress,omitempty"`
	QueuedAt        time.Time   `json:"queued_at,omitempty"`
	StartedAt       time.Time   `json:"started_at,omitempty"`
	Deadline        time.Time   `json:"deadline,omitempty"`
	Result          *CallResult `json:"result,omitempty"`
}

// CancelRequest asks to cancel a call (endpoint calls.cancel).
type CancelRequest struct {
	CallID string `json:"call_id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// Outcomes of a cancel request.
const (
	// CancelDone: the call had not started; it is removed and its result is "cancelled".
	CancelDone = "cancelled"
	// CancelSignalled: the call is running; its worker was asked to stop it
	// and will write the "cancelled" result.
	CancelSignalled = "cancelling"
	// CancelTooLate: the call had already finished and keeps its result.
	CancelTooLate = "already_finished"
)

// CancelReply answers a CancelRequest.
type CancelReply struct {
	CallID  string      `json:"call_id"`
	Outcome string      `json:"outcome"`
	State   CallState   `json:"state"`
	Result  *CallResult `json:"result,omitempty"`
}

// GetTurnRequest asks for an agent turn's calls (endpoint turns.get).
type GetTurnRequest struct {
	Turn string `json:"turn"`
}

// TurnInfo is an agent turn as it stands: its calls, oldest first.
type TurnInfo struct {
	Turn  string     `json:"turn"`
	Calls []CallInfo `json:"calls"`
}

// WorkerHeartbeat is the catalog value under WorkerKey, refreshed while a worker serves a namespace.
type WorkerHeartbeat struct {
	WorkerID  string    `json:"worker_id"`
	Namespace string    `json:"namespace"`
	Slots     int       `json:"slots"`
	Busy      int       `json:"busy"`
	Time      time.Time `json:"time"`
	// IntervalMS is how often the heartbeat is refreshed; a worker is dead
	// after three intervals without one.
	IntervalMS int64  `json:"interval_ms"`
	Version    string `json:"version,omitempty"`
}

// TurnCallRecord is the turns-bucket value under TurnCallKey.
type TurnCallRecord struct {
	CallID   string    `json:"call_id"`
	Tool     string    `json:"tool"`
	QueuedAt time.Time `json:"queued_at"`
}
