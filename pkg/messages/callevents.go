package messages

// EndpointCallsEvents follows a call's events through the coordinator
// (calls.events): for clients whose account has no JetStream of its own,
// such as the agents' account of an installation with identities.
const EndpointCallsEvents = "calls.events"

// Bounds of CallEventsRequest.Max.
const (
	// DefaultCallEvents is how many events a calls.events reply holds at
	// most when the request sets no max.
	DefaultCallEvents = 256
	// MaxCallEvents bounds CallEventsRequest.Max: the most messages one
	// batched read of the events stream returns.
	MaxCallEvents = 1024
)

// CallEventsRequest asks for a call's events stored after a sequence
// (endpoint calls.events), in the order they were stored.
type CallEventsRequest struct {
	CallID string `json:"call_id"`
	// After is the sequence of the last event the caller has (Last of the
	// previous reply); 0 asks from the call's first event.
	After uint64 `json:"after,omitempty"`
	// WaitMS, when set, holds the reply until there is at least one event
	// after After or WaitMS passes (at most the coordinator's maximum
	// wait), a long poll. 0 answers at once.
	WaitMS int64 `json:"wait_ms,omitempty"`
	// Max bounds the events of the reply: 1 to MaxCallEvents, 0 for
	// DefaultCallEvents.
	Max int `json:"max,omitempty"`
}

// CallEventsReply holds a call's events after the request's After, oldest
// first. Last is the sequence to send as After next (the request's own
// After when there are no events); Finished tells that the call's result
// is among the events up to Last, so there is nothing more to follow.
type CallEventsReply struct {
	CallID   string      `json:"call_id"`
	Events   []CallEvent `json:"events"`
	Last     uint64      `json:"last"`
	Finished bool        `json:"finished,omitempty"`
}

// Validate checks the call ID and the ranges of wait_ms (0 to
// MaxTimeoutMS) and max (0 to MaxCallEvents).
func (r *CallEventsRequest) Validate() error {
	return firstError(
		requiredID("call_id", "call ID", r.CallID),
		validateRange("wait_ms", r.WaitMS, 0, MaxTimeoutMS),
		validateRange("max", int64(r.Max), 0, MaxCallEvents),
	)
}
