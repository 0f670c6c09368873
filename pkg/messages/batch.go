package messages

// Endpoints of one model iteration: its tool calls in, in the provider's
// shape (calls.submit_batch), and their results out as the provider's
// next input (calls.results).
const (
	EndpointCallsSubmitBatch = "calls.submit_batch"
	EndpointCallsResults     = "calls.results"
)

// Bounds of the batch requests; a request outside them is refused with
// CodeBadRequest.
const (
	// MaxBatchCalls bounds the tool calls of one batch, and the calls one
	// results request renders.
	MaxBatchCalls = 64
	// MaxToolCallIDLength bounds a provider's tool-call ID. With a turn ID
	// (at most 128) it makes an idempotency key of at most
	// MaxIdempotencyKeyLength bytes.
	MaxToolCallIDLength = 120
	// MaxResponseIDLength bounds SubmitBatchRequest.ResponseID.
	MaxResponseIDLength = 256
	// MaxToolCallNameLength bounds the tool name a model wrote, as a batch
	// reply repeats it; a name is a tool's only when ParseToolName reads it.
	MaxToolCallNameLength = 256
)

// SubmitBatchRequest submits the tool calls of one model iteration
// (endpoint calls.submit_batch), in the shape the model's provider wrote
// them. Each call is checked, recorded and queued as a SubmitRequest of
// its own would be, with the provider's tool-call ID as its idempotency
// key within the turn, so that sending the same batch again runs nothing
// twice. One call's refusal does not refuse the others.
type SubmitBatchRequest struct {
	// Format is the provider's: openai-chat, openai-responses, anthropic,
	// gemini or mcp, as in tools.list.
	Format string `json:"format"`
	// ToolCalls holds the model's tool calls as the provider returned
	// them: the calls themselves (an array), or the message, content or
	// response that holds them (see docs/protocol.md, per format).
	ToolCalls JSON   `json:"tool_calls"`
	Agent     string `json:"agent,omitempty"`
	// Turn is required: the tool-call IDs are idempotency keys within it.
	Turn string `json:"turn"`
	// ResponseID names the model's response, for the calls that carry no
	// ID of their own (Gemini's may not): their keys are derived from it,
	// their position, name and arguments. Without it, a call with the same
	// name and arguments at the same position of another iteration of the
	// turn is the same call. A Gemini response's responseId is taken when
	// ToolCalls is the whole response.
	ResponseID string `json:"response_id,omitempty"`
	// TimeoutMS is every call's deadline, as in SubmitRequest.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Notify receives a copy of each call's result event, as in SubmitRequest.
	Notify string `json:"notify,omitempty"`
	// WaitMS, when above 0, makes the reply carry the calls' results
	// (SubmitBatchReply.Results), rendered as calls.results renders them,
	// once every call has ended, was refused or waits for an approval, or
	// once WaitMS has passed: one request for the whole iteration. The
	// coordinator waits at most its maximum wait, and the wait counts
	// against the user's concurrent waits as calls.results' does.
	WaitMS int64 `json:"wait_ms,omitempty"`
	// ResultsFormat is the format the results are rendered in; empty is
	// Format. Only with WaitMS.
	ResultsFormat string `json:"results_format,omitempty"`
}

// BatchCall is one tool call of a batch: the provider's side of it (its
// ID and the name the model gave), and Toolbus's (the call, or why there
// is none).
type BatchCall struct {
	// ToolCallID is the provider's ID of the call; empty when it has none.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name as the model wrote it.
	Name string `json:"name,omitempty"`
	// CallID is the Toolbus call, when the call was accepted.
	CallID string    `json:"call_id,omitempty"`
	State  CallState `json:"state,omitempty"`
	// Duplicate is true when an earlier submit of the batch made the call.
	Duplicate bool `json:"duplicate,omitempty"`
	// Approval is set while the call waits for one.
	Approval *Approval `json:"approval,omitempty"`
	// Error is why the call was refused (it has no CallID then): denied,
	// not_admitted, invalid_arguments, tool_not_found… It is rendered as
	// an error result the model can read.
	Error *Error `json:"error,omitempty"`
}

// SubmitBatchReply lists the batch's calls in the order of the request.
type SubmitBatchReply struct {
	Calls []BatchCall `json:"calls"`
	// Results are the calls' results as the provider's next input, when
	// the request asked for them (SubmitBatchRequest.WaitMS): what
	// calls.results would answer for Calls. Calls still queued or running
	// when the wait ended are rendered as such (Complete is false).
	Results *ResultsReply `json:"results,omitempty"`
}

// ResultsRequest asks for the results of calls rendered as the provider's
// next input (endpoint calls.results). Calls is usually a batch's reply;
// any call IDs do, and a call without a ToolCallID or Name is rendered
// with its call ID and tool name. Calls that have not ended are waited
// for, up to WaitMS; a call that waits for an approval is not.
type ResultsRequest struct {
	// Format is the provider's, as in SubmitBatchRequest.
	Format string      `json:"format"`
	Calls  []BatchCall `json:"calls"`
	// WaitMS bounds the wait for calls that have not ended; 0 renders
	// them as they are. The coordinator waits at most its maximum wait.
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// ResultsReply holds the messages (or items, parts, results: whatever
// the format's next request takes) to append to the conversation, in
// order, and the state of each call in the order of the request.
type ResultsReply struct {
	Messages []JSON      `json:"messages"`
	Calls    []BatchCall `json:"calls"`
	// Complete is true when every call has ended or was refused; calls
	// that are still queued, running or awaiting approval are rendered
	// as such.
	Complete bool `json:"complete"`
}

// Validate checks the format, tool calls and turn are given, the names
// and IDs, the response ID's length (at most MaxResponseIDLength bytes),
// timeout_ms and wait_ms (0 to MaxTimeoutMS), results_format only with
// wait_ms, and the notify subject. The format and
// the tool calls' shape are checked by the coordinator.
func (r *SubmitBatchRequest) Validate() error {
	if r.Format == "" {
		return Errorf(CodeBadRequest, "format is required")
	}
	if len(r.ToolCalls) == 0 {
		return Errorf(CodeBadRequest, "tool_calls is required")
	}
	if err := firstError(
		optionalID("agent", r.Agent),
		requiredID("turn", "turn", r.Turn),
		validateText("response_id", r.ResponseID, MaxResponseIDLength),
		validateRange("timeout_ms", r.TimeoutMS, 0, MaxTimeoutMS),
		validateRange("wait_ms", r.WaitMS, 0, MaxTimeoutMS),
	); err != nil {
		return err
	}
	if r.ResultsFormat != "" && r.WaitMS == 0 {
		return Errorf(CodeBadRequest, "results_format is given without wait_ms: the reply carries no results")
	}
	if r.Notify != "" {
		return ValidateNotify(r.Notify)
	}
	return nil
}

// Validate checks the format is given, that there are 1 to MaxBatchCalls
// calls, each naming a call or carrying its refusal, with valid IDs and
// names of bounded length, and wait_ms (0 to MaxTimeoutMS).
func (r *ResultsRequest) Validate() error {
	if r.Format == "" {
		return Errorf(CodeBadRequest, "format is required")
	}
	if len(r.Calls) == 0 || len(r.Calls) > MaxBatchCalls {
		return Errorf(CodeBadRequest, "calls holds %d calls; it must hold 1 to %d", len(r.Calls), MaxBatchCalls)
	}
	for i := range r.Calls {
		if err := r.Calls[i].validate(); err != nil {
			return err
		}
	}
	return validateRange("wait_ms", r.WaitMS, 0, MaxTimeoutMS)
}

func (c *BatchCall) validate() error {
	if c.CallID == "" && c.Error == nil {
		return Errorf(CodeBadRequest, "each call needs a call_id or the error that refused it")
	}
	return firstError(
		optionalID("call ID", c.CallID),
		validateText("tool_call_id", c.ToolCallID, MaxToolCallIDLength),
		validateText("name", c.Name, MaxToolCallNameLength),
	)
}

// ValidateToolCallID checks a provider's tool-call ID: 1 to
// MaxToolCallIDLength bytes of UTF-8 without control characters.
func ValidateToolCallID(id string) error {
	if id == "" {
		return Errorf(CodeBadRequest, "a tool-call ID is empty")
	}
	if err := validateText("tool-call ID", id, MaxToolCallIDLength); err != nil {
		return err
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return Errorf(CodeBadRequest, "tool-call ID %q holds control characters", id)
		}
	}
	return nil
}
