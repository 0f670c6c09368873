package messages

import "time"

// Endpoints of the coordinator's service, relative to Names.APIGroup.
const (
	EndpointToolsList     = "tools.list"
	EndpointCallsSubmit   = "calls.submit"
	EndpointCallsGet      = "calls.get"
	EndpointCallsCancel   = "calls.cancel"
	EndpointTurnsGet      = "turns.get"
	EndpointToolsActivate = "tools.activate"
)

// ServiceName is the name of the coordinator's micro service.
const ServiceName = "toolbus"

// ListToolsRequest asks for tools (endpoint tools.list). Without any of
// agent, turn, format, intake, clarification or chosen it lists the whole
// catalog, unavailable and disabled tools included. With any of them it
// answers for one model iteration: the tools whose schemas the model sees,
// by the agent's exposure rules, the turn's saved selections and this
// iteration's inputs.
type ListToolsRequest struct {
	// Namespace limits the list to one namespace.
	Namespace string `json:"namespace,omitempty"`
	Agent     string `json:"agent,omitempty"`
	// Turn names the agent turn whose discovery pages and activations count;
	// an intake given here is saved with the turn.
	Turn string `json:"turn,omitempty"`
	// Intake is this iteration's intake selection; absent when no intake ran.
	Intake *IntakeSelection `json:"intake,omitempty"`
	// Clarification marks an iteration in which the model asks the user a question.
	Clarification bool `json:"clarification,omitempty"`
	// Chosen names tools the caller or its profile asks for exactly.
	Chosen []string `json:"chosen,omitempty"`
	// Format asks for provider schemas: openai-chat, openai-responses,
	// anthropic, gemini or mcp.
	Format string `json:"format,omitempty"`
	// Think adds a "thought" parameter to each schema; Toolbus removes it
	// from the arguments before the call runs.
	Think bool `json:"think,omitempty"`
	// Strict asks OpenAI formats for strict schemas where that keeps their meaning.
	Strict bool `json:"strict,omitempty"`
}

// IntakeSelection is what an intake step selected: exact tools and/or bundles.
type IntakeSelection struct {
	Tools   []string `json:"tools,omitempty"`
	Bundles []string `json:"bundles,omitempty"`
}

// ListToolsReply lists tools sorted by name.
type ListToolsReply struct {
	Tools []ToolEntry `json:"tools"`
	// Schemas holds each tool's schema in the requested format, in the order of Tools.
	Schemas []JSON `json:"schemas,omitempty"`
	// Dropped names saved selections of the turn that no longer name a
	// visible tool (removed from the catalog, excluded, denied); they are
	// removed from the turn.
	Dropped []string `json:"dropped,omitempty"`
}

// ActivateRequest makes tools visible for the rest of a turn (endpoint tools.activate).
type ActivateRequest struct {
	Agent string   `json:"agent,omitempty"`
	Turn  string   `json:"turn"`
	Tools []string `json:"tools"`
}

// ActivateReply lists every tool activated in the turn so far.
type ActivateReply struct {
	Turn      string   `json:"turn"`
	Activated []string `json:"activated"`
}

// TurnState is what a turn remembers between model iterations, in the
// turns bucket under TurnStateKey.
type TurnState struct {
	Turn  string `json:"turn"`
	Agent string `json:"agent,omitempty"`
	// Intake is the latest intake selection of the turn.
	Intake *IntakeSelection `json:"intake,omitempty"`
	// Discovered holds every tool of the discovery pages returned in the turn.
	Discovered []string `json:"discovered,omitempty"`
	// Activated holds the tools activated explicitly.
	Activated []string  `json:"activated,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// EventsSeq is the first sequence of the events stream that the
	// turn's calls' queued events may have: the stream's last sequence,
	// plus one, when the turn was first saved. turns.get reads them from
	// there (see FilterNames.TurnQueue). 0 in a turn saved before protocol
	// version 3, whose calls were filed in the turns bucket.
	EventsSeq uint64 `json:"events_seq,omitempty"`
}

// GetCallRequest asks for one call (endpoint calls.get).
type GetCallRequest struct {
	CallID string `json:"call_id"`
	// WaitMS, when set, holds the reply until the call has its result or
	// WaitMS passes (at most the coordinator's maximum wait); the reply
	// is the call as it stands then. 0 answers at once.
	WaitMS int64 `json:"wait_ms,omitempty"`
	// Trace asks for the call's TraceID (operators get it unasked).
	Trace bool `json:"trace,omitempty"`
	// Confirm asks, when the call has no result as the replica that
	// answers the coordinator's read has it, to read its result and its
	// cancellation from the events stream's leader as well: a replica may
	// lag behind the leader (a node catching up after a restart), and a
	// caller that looks for a result it may have missed (its copy lost in
	// a reconnect) sets it now and then.
	Confirm bool `json:"confirm,omitempty"`
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
	Attempt         int       `json:"attempt,omitempty"`
	Worker          string    `json:"worker,omitempty"`
	CancelRequested bool      `json:"cancel_requested,omitempty"`
	Progress        *Progress `json:"progress,omitempty"`
	Approval        *Approval `json:"approval,omitempty"`
	QueuedAt        time.Time `json:"queued_at,omitempty,omitzero"`
	// StartedAt is when the worker began the latest attempt; absent (in
	// both encodings) until a worker recorded a start or a result.
	StartedAt time.Time   `json:"started_at,omitempty,omitzero"`
	Deadline  time.Time   `json:"deadline,omitempty,omitzero"`
	Result    *CallResult `json:"result,omitempty"`
	// TraceID is the W3C trace ID of the call's trace (the traceparent
	// its queued event was stored with), when the request asked for it
	// or came from an operator, and the call has one.
	TraceID string `json:"trace_id,omitempty"`
}

// CancelRequest asks to cancel a call (endpoint calls.cancel).
type CancelRequest struct {
	CallID string `json:"call_id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// Outcomes of a cancel request.
const (
	// CancelDone: the call had not started; its result is "cancelled" now.
	// Its queued event stays in its namespace's consumer until a worker
	// takes it, finds the result and acknowledges it without running it.
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

// TurnInfo is an agent turn as it stands: its saved selections and its
// calls, oldest first.
type TurnInfo struct {
	Turn  string     `json:"turn"`
	State *TurnState `json:"state,omitempty"`
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
	// Down lists the sources of the namespace that the worker cannot serve
	// now (an MCP server it cannot reach); their tools are unavailable
	// unless another live worker serves them.
	Down []SourceDown `json:"down,omitempty"`
}

// SourceDown is a source a worker cannot serve now, and why.
type SourceDown struct {
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// TurnCallRecord is the turns-bucket value under TurnCallKey, where
// versions before 3 filed a turn's calls; since version 3 a call's queued
// event is its turn's index, and nothing writes it.
type TurnCallRecord struct {
	CallID   string    `json:"call_id"`
	Tool     string    `json:"tool"`
	QueuedAt time.Time `json:"queued_at"`
}

// EndpointToolsDiscover searches the catalog (tools.discover).
const EndpointToolsDiscover = "tools.discover"

// DiscoverRequest searches the tools an agent may use. With a turn, the
// tools of the returned page become visible to the model on the turn's
// next iterations, without an activation.
type DiscoverRequest struct {
	Query string `json:"query"`
	Agent string `json:"agent,omitempty"`
	Turn  string `json:"turn,omitempty"`
	// Namespaces and Tags narrow the search; they never widen what the agent may use.
	Namespaces []string `json:"namespaces,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	// Page counts from 0; PageSize defaults to 10, at most 100.
	Page     int `json:"page,omitempty"`
	PageSize int `json:"page_size,omitempty"`
	// Format, Think and Strict ask for the page's schemas, as in tools.list.
	Format string `json:"format,omitempty"`
	Think  bool   `json:"think,omitempty"`
	Strict bool   `json:"strict,omitempty"`
}

// DiscoverHit is one ranked tool.
//
//msgpack:generate
type DiscoverHit struct {
	Name  string  `json:"name"`
	Score float64 `json:"score"`
	// Exact is true when the query named the tool.
	Exact bool `json:"exact,omitempty"`
}

// DiscoverReply is one page of results, best first.
//
//msgpack:generate
type DiscoverReply struct {
	Hits []DiscoverHit `json:"hits"`
	// Tools are the hits' definitions, in the order of Hits.
	Tools []ToolEntry `json:"tools"`
	// Schemas holds the hits' schemas in the requested format, in the order of Hits.
	Schemas []JSON `json:"schemas,omitempty"`
	Page    int    `json:"page"`
	// More is true when another page follows.
	More bool `json:"more,omitempty"`
}
