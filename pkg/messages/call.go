package messages

import (
	"fmt"
	"time"
)

// CallState is where a call is in its life. The last five are terminal and
// are also the Status of the call's result.
type CallState string

const (
	StateQueued           CallState = "queued"
	StateAwaitingApproval CallState = "awaiting_approval"
	StateRunning          CallState = "running"
	// StateCompleted: the tool returned. Its result may still be a tool
	// error (IsError), which is the tool's answer, not a failure of Toolbus.
	StateCompleted CallState = "completed"
	// StateFailed: Toolbus could not get an answer from the tool, e.g.
	// every attempt lost its worker or the tool panicked.
	StateFailed    CallState = "failed"
	StateCancelled CallState = "cancelled"
	StateTimedOut  CallState = "timed_out"
	StateDenied    CallState = "denied"
)

// Terminal reports whether no further change can happen.
func (s CallState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCancelled, StateTimedOut, StateDenied:
		return true
	}
	return false
}

// SubmitRequest asks the coordinator (endpoint calls.submit) to run a tool.
//
//msgpack:generate
type SubmitRequest struct {
	// Tool names the tool in any spelling ParseToolName accepts.
	Tool      string `json:"tool"`
	Arguments JSON   `json:"arguments,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Turn      string `json:"turn,omitempty"`
	// IdempotencyKey makes submits with the same agent and key return the
	// same call, which is queued once, for as long as the call's events are
	// kept. Its tool runs as its delivery says: once, unless a worker dies
	// or loses the call while running it (docs/reliability.md).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// TimeoutMS is the caller's deadline for the call, counted from the
	// submit; the tool's own timeout applies when it is shorter.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Wait asks for the result in the reply. If it does not come within
	// WaitMS (or the call's deadline) the reply carries the call's state.
	Wait   bool  `json:"wait,omitempty"`
	WaitMS int64 `json:"wait_ms,omitempty"`
	// Notify is a subject under "_INBOX." that receives a copy of the
	// call's result event when the call ends: a caller can wait for many
	// calls on one subscription, without a consumer or a subscription per
	// call. The copy is a convenience; the result event in the events
	// stream is the record.
	Notify string `json:"notify,omitempty"`
	// Route names the caller's route (see RouteNames.Subject): the call's ID
	// starts with it, and its committed result is republished to the
	// route. Not allowed with IdempotencyKey, whose call ID comes from
	// the key; such a call can use Notify.
	Route string `json:"route,omitempty"`
	// CallID is the ID the caller gives its call: its route followed by
	// RouteLength letters and digits of its choosing (see RoutedCallID).
	// Only with Route. Knowing the ID, the caller can wait on its route
	// before submitting, and can send the same submit again without the
	// call running twice (within the events stream's duplicate window).
	CallID string `json:"call_id,omitempty"`
	// Quiet asks for no reply when the call is queued: refusals and a call
	// held for approval are still answered, on the request's reply
	// subject. Needs CallID; not with Wait.
	Quiet bool `json:"quiet,omitempty"`
}

// SubmitReply answers a SubmitRequest.
//
//msgpack:generate
type SubmitReply struct {
	CallID string    `json:"call_id"`
	State  CallState `json:"state"`
	// Duplicate is true when the idempotency key named an existing call.
	Duplicate bool        `json:"duplicate,omitempty"`
	Result    *CallResult `json:"result,omitempty"`
	// Approval is set when the call waits for one (state awaiting_approval).
	Approval *Approval `json:"approval,omitempty"`
}

// CallRequest is the message on a call subject that a worker executes.
//
//msgpack:generate
type CallRequest struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Namespace string `json:"namespace"`
	Method    string `json:"method"`
	Arguments JSON   `json:"arguments,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Turn      string `json:"turn,omitempty"`
	// ArgumentsDigest is the hex SHA-256 of the arguments as submitted, for
	// idempotency checks and approvals.
	ArgumentsDigest string    `json:"arguments_digest,omitempty"`
	QueuedAt        time.Time `json:"queued_at"`
	Deadline        time.Time `json:"deadline"`
	// MaxAttempts is how many deliveries the call gets before it fails.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Notify is the caller's subject for a copy of the result event.
	Notify string `json:"notify,omitempty"`
}

// ToolName returns the called tool's identity.
func (r *CallRequest) ToolName() ToolName {
	return ToolName{Namespace: r.Namespace, Method: r.Method}
}

// ContentBlock types.
const (
	ContentText         = "text"
	ContentJSON         = "json"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResource     = "resource"
	ContentResourceLink = "resource_link"
)

// ContentBlock is one part of a result.
//
//msgpack:generate pointer
type ContentBlock struct {
	//msgpack:values ContentText ContentJSON ContentImage ContentAudio ContentResource ContentResourceLink
	Type string `json:"type"`
	// Text of a text block, or of an embedded text resource.
	Text string `json:"text,omitempty"`
	// JSON of a json block.
	JSON JSON `json:"json,omitempty"`
	// Data of an image, audio or embedded binary resource: raw bytes in
	// MessagePack, base64 in JSON.
	Data     []byte `json:"data,omitempty"`
	MIMEType string `json:"mime_type,omitempty"`
	// URI, Name and Description of a resource or resource link.
	URI         string `json:"uri,omitempty"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Annotations are the MCP content annotations the source gave the block.
	Annotations *ContentAnnotations `json:"annotations,omitempty"`
}

// ContentAnnotations say whom a content block is for and how much it
// matters, as MCP's annotations do.
type ContentAnnotations struct {
	// Audience lists who the block is meant for: "user", "assistant" or both.
	Audience []string `json:"audience,omitempty"`
	// Priority ranges from 0 (optional) to 1 (most important); nil when not given.
	Priority *float64 `json:"priority,omitempty"`
	// LastModified is an ISO 8601 time, as the source wrote it.
	LastModified string `json:"last_modified,omitempty"`
}

// TextBlock returns a text content block.
func TextBlock(s string) ContentBlock { return ContentBlock{Type: ContentText, Text: s} }

// JSONBlock returns a json content block.
func JSONBlock(v JSON) ContentBlock { return ContentBlock{Type: ContentJSON, JSON: v} }

// ImageBlock returns an image content block.
func ImageBlock(data []byte, mimeType string) ContentBlock {
	return ContentBlock{Type: ContentImage, Data: data, MIMEType: mimeType}
}

// CallResult is the outcome of a call. Writing it is the call's commit
// point: the first result written wins and later attempts cannot replace it.
//
//msgpack:generate pointer
type CallResult struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Status is the terminal state of the call.
	Status CallState `json:"status"`
	// IsError tells the model that this is not a successful answer: the
	// tool reported an error, or the call did not complete.
	IsError           bool           `json:"is_error"`
	Content           []ContentBlock `json:"content,omitempty"`
	StructuredContent JSON           `json:"structured_content,omitempty"`
	// Error says why, when IsError is set.
	Error *ResultError `json:"error,omitempty"`
	// Attempt counts deliveries to workers, starting at 1; 0 when no worker ran the call.
	Attempt  int       `json:"attempt"`
	Worker   string    `json:"worker,omitempty"`
	QueuedAt time.Time `json:"queued_at"`
	// StartedAt is when the worker began the attempt that wrote the
	// result; absent when no worker ran the call.
	StartedAt  time.Time `json:"started_at,omitempty,omitzero"`
	FinishedAt time.Time `json:"finished_at"`
	// Truncated is set when Content was cut to the tool's MaxResultSize;
	// FullResult then names the object holding the whole result.
	Truncated  bool       `json:"truncated,omitempty"`
	FullResult *ObjectRef `json:"full_result,omitempty"`
}

// Result error codes.
const (
	ResultToolError      = "tool_error"
	ResultPanic          = "panic"
	ResultCancelled      = "cancelled"
	ResultTimedOut       = "timed_out"
	ResultAttempts       = "max_attempts"
	ResultWorkerError    = "worker_error"
	ResultDenied         = "denied"
	ResultInvalidRequest = "invalid_request"
	// ResultOutcomeUnknown ends a call of an at-most-once tool (see
	// DeliveryAtMostOnce) whose earlier attempt started the tool and
	// stopped before reporting: the tool may or may not have run, and is
	// not run again.
	ResultOutcomeUnknown = "outcome_unknown"
)

// OutcomeUnknownMessage is the message of a ResultOutcomeUnknown failure.
const OutcomeUnknownMessage = "the tool may or may not have run: its worker stopped before reporting"

// LogRetry is the level of the log event a worker stores when a tool asks
// for another attempt (an error that wraps the worker's ErrRetry): its
// message is the tool's error, the cause the call's final failure gives
// if its attempts run out.
const LogRetry = "retry"

// ExhaustedMessage is the error message of a call whose attempts ran out
// (ResultAttempts) after attempts deliveries that ran, or could have run,
// its tool. lastLog is the call's latest log event, if any: when it is one
// of level LogRetry, the message gives its cause and attempt; otherwise it
// says that the workers holding the call stopped or lost it.
func ExhaustedMessage(attempts int, lastLog *CallEvent) string {
	msg := fmt.Sprintf("the call was delivered %d times and no attempt finished", attempts)
	if lastLog != nil && lastLog.Log != nil && lastLog.Log.Level == LogRetry && lastLog.Log.Message != "" {
		return msg + fmt.Sprintf("; attempt %d asked for another because: %s", lastLog.Attempt, lastLog.Log.Message)
	}
	return msg + ": the workers that took it stopped, lost their lease, or do not serve the tool"
}

// ResultError explains a result that is not a success.
//
//msgpack:generate
type ResultError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ObjectRef names an object in the results object store.
type ObjectRef struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
}

// EventKind names an event of a call; each kind has its own subject.
type EventKind string

const (
	EventQueued   EventKind = "queued"
	EventStarted  EventKind = "started"
	EventProgress EventKind = "progress"
	EventLog      EventKind = "log"
	// EventCancel records that cancellation was requested; the call is
	// cancelled only when its result says so.
	EventCancel EventKind = "cancel"
	// EventApproval records each state of the call's approval.
	EventApproval EventKind = "approval"
	EventResult   EventKind = "result"
)

// Valid reports whether k is a known kind.
func (k EventKind) Valid() bool {
	switch k {
	case EventQueued, EventStarted, EventProgress, EventLog, EventCancel, EventApproval, EventResult:
		return true
	}
	return false
}

// CallEvent is one event of a call, stored in the events stream in order.
// Exactly one of the kind-specific fields is set.
//
//msgpack:generate
type CallEvent struct {
	CallID  string    `json:"call_id"`
	Kind    EventKind `json:"kind"`
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt,omitempty"`
	Worker  string    `json:"worker,omitempty"`
	// Request is set on queued events: the call as submitted.
	Request  *CallRequest `json:"request,omitempty"`
	Progress *Progress    `json:"progress,omitempty"`
	Log      *LogEntry    `json:"log,omitempty"`
	Cancel   *CancelInfo  `json:"cancel,omitempty"`
	Approval *Approval    `json:"approval,omitempty"`
	Result   *CallResult  `json:"result,omitempty"`
	// Audit is set on the queued event of a call that the policy let
	// through: the decision its audit record is derived from.
	Audit *QueuedAudit `json:"audit,omitempty"`
}

// Progress of a running call: Progress of Total units (Total 0 when
// unknown; a fraction is Progress of Total 1), with an optional message.
//
//msgpack:generate
type Progress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// Fraction returns Progress/Total in [0, 1], or -1 when Total is unknown.
func (p Progress) Fraction() float64 {
	if p.Total <= 0 {
		return -1
	}
	f := p.Progress / p.Total
	if f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

// LogEntry is a log line a tool emitted while running.
type LogEntry struct {
	Level   string `json:"level"`
	Message string `json:"message"`
}

// CancelInfo says who asked to cancel a call and why.
type CancelInfo struct {
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}
